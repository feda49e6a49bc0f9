"""The usage examples of the public packages' docstrings run, so that they stay true."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["engine", "engine.egraph", "engine.export", "engine.interop", "engine.stages"]


@pytest.mark.parametrize("name", MODULES)
def test_the_usage_examples_run(name):
    result = doctest.testmod(importlib.import_module(name), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0

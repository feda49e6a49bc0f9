"""OpenBLAS's thread timeout: set by importing ``engine`` before numpy, never over the environment's, and named in
the host devices' driver version (so that times measured under another timeout are not reused)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from engine import blas_threads

SHOW = "import os, engine.blas_threads as b; from engine.devices.numpy_device import NumpyDevice as D; " \
       "print(os.environ.get('OPENBLAS_THREAD_TIMEOUT'), b.IN_EFFECT, D.driver_version.split(' | ')[-1])"


def _fresh(first: str, timeout: str | None) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_THREAD_TIMEOUT"}
    if timeout is not None:
        env["OPENBLAS_THREAD_TIMEOUT"] = timeout
    out = subprocess.run([sys.executable, "-c", first + SHOW], env=env, capture_output=True, text=True, check=True)
    return out.stdout.split(maxsplit=2)


@pytest.mark.parametrize("first", ["", "import zyx_explorer.cli; "])
def test_importing_the_engine_first_sets_the_timeout(first):
    assert _fresh(first, None) == [blas_threads.TIMEOUT, blas_threads.TIMEOUT,
                                   f"openblas thread timeout {blas_threads.TIMEOUT}\n"]


def test_the_environments_timeout_is_kept():
    assert _fresh("", "28") == ["28", "28", "openblas thread timeout 28\n"]


def test_numpy_loaded_first_keeps_openblas_default_and_says_so():
    assert _fresh("import numpy; ", None) == ["None", "default", "openblas thread timeout default\n"]

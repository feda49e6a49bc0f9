"""Fixtures of every test."""

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import settings

settings.register_profile("deterministic", derandomize=True)
settings.register_profile("explore")
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "deterministic"))
"""Property tests draw the same examples on every run, so a commit passes or fails the same way each time;
``HYPOTHESIS_PROFILE=explore`` draws new ones on each run, to hunt for bugs."""

SNAPSHOT_REPORT = "snapshot_report.html"
"""pytest-textual-snapshot's default report path, relative to the working directory (the checkout)."""


def pytest_configure(config):
    """A failing snapshot's HTML report goes to the temp dir, not into the checkout (``git status`` stays clean);
    ``--snapshot-report PATH`` still picks another place."""
    if getattr(config.option, "snapshot_report", None) == SNAPSHOT_REPORT:
        config.option.snapshot_report = str(Path(tempfile.gettempdir()) / "zyx-explore-snapshot-report.html")


@pytest.fixture(autouse=True)
def _no_cursor_blink(monkeypatch):
    """Snapshots and Pilot runs must not depend on the cursor's blink phase."""
    from textual.widgets import Input

    monkeypatch.setattr(Input, "cursor_blink", False, raising=False)


@pytest.fixture(autouse=True, scope="session")
def _tuning_cache_in_a_temporary_dir(tmp_path_factory):
    """Tests never read or write the user's autotuning cache."""
    mp = pytest.MonkeyPatch()
    mp.setenv("ZYX_EXPLORE_CACHE", str(tmp_path_factory.mktemp("cache")))
    yield
    mp.undo()

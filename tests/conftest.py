"""Fixtures of every test."""

import pytest


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

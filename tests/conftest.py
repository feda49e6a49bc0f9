import pytest


@pytest.fixture(autouse=True)
def _no_cursor_blink(monkeypatch):
    """Snapshots and Pilot runs must not depend on the cursor's blink phase."""
    from textual.widgets import Input

    monkeypatch.setattr(Input, "cursor_blink", False, raising=False)

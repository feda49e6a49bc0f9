"""Helpers of the explorer's UI tests: a fast app (numpy + BLAS devices) and waiting for its compilation."""

from __future__ import annotations

import dataclasses
import io

import pytest
from rich.console import Console

import engine
import sample_graphs
from engine.devices import LibraryDevice, NumpyDevice
from engine.pipeline import Options
from zyx_explorer.app import ExplorerApp

THREADS = 2


def make_app(name: str = "mlp.small", tmp_path=None, devices=None, options: Options | None = None,
             frozen: bool = False) -> ExplorerApp:
    """The explorer on sample ``name``; ``frozen``: stage times read 0 (for snapshots).

    The default devices have a fixed thread count: their estimates must not depend on the machine's cores."""
    path = sample_graphs.path(name)
    if devices is None:
        devices = [NumpyDevice(threads=THREADS), LibraryDevice(threads=THREADS)]
    app = ExplorerApp(engine.load(path), path, screenshot_dir=tmp_path, devices=devices, options=options)
    if frozen:
        app.clock = lambda: 0.0
    return app


async def compiled(pilot, limit: int = 400) -> None:
    """Wait (without a timing assert) until the app's compilation worker has finished."""
    for _ in range(limit):
        if pilot.app.compiled:
            break
        await pilot.pause(0.02)
    assert pilot.app.compiled, "the compilation never finished"
    await pilot.pause()


def plain(widget, width: int = 200) -> str:
    """The text a Static widget shows, rendered without styles."""
    console = Console(width=width, color_system=None, file=io.StringIO())
    console.print(widget.content)
    return console.file.getvalue()


@pytest.fixture
def app_factory(tmp_path):
    return lambda name="mlp.small", **kw: make_app(name, tmp_path, **kw)


def freeze_measurements(app: ExplorerApp) -> None:
    """Zero what this machine measured (saturation and step seconds) so that snapshots repeat anywhere."""
    c = app.session.compilation
    if c.saturation is not None:
        c.saturation.seconds = 0.0
    if c.execution is not None:
        first = None if c.execution.first is None else 0.0
        c.execution = dataclasses.replace(c.execution, step_times=tuple(0.0 for _ in c.execution.step_times),
                                          first=first)
    app.main.refresh_panes(refill=True)

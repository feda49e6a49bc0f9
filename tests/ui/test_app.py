"""The explorer app driven with Textual's Pilot, and once in a real terminal (tmux)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time

import pytest

import engine
import sample_graphs
from zyx_explorer.app import ExplorerApp
from zyx_explorer.widgets.program_table import ProgramTable
from zyx_explorer.widgets.tensor_detail import TensorDetail


def _app(name: str, tmp_path) -> ExplorerApp:
    return ExplorerApp(engine.load(sample_graphs.path(name)), sample_graphs.path(name), screenshot_dir=tmp_path)


async def test_table_lists_every_tensor_and_detail_follows_the_cursor(tmp_path):
    app = _app("mlp.small", tmp_path)
    async with app.run_test(size=(120, 36)) as pilot:
        table = app.query_one(ProgramTable)
        assert table.row_count == len(app.program.inputs) + len(app.program.nodes)
        detail = app.query_one(TensorDetail)
        assert detail.summary.plain.startswith("x = input: [8, 16] f32")
        await pilot.press(*["down"] * 6)  # x w1 b1 w2 b2 t0 -> t1
        text = detail.summary.plain
        assert text.startswith("t1 = add(t0, b1): [8, 32] f32")
        assert "used by h" in text
        assert list(detail.lowering.columns[1].cells) == ["reshape", "expand", "add"]


async def test_ctrl_s_saves_an_svg_screenshot(tmp_path):
    app = _app("softmax.small", tmp_path)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("ctrl+s")
        await pilot.pause()
    shots = list(tmp_path.glob("*.svg"))
    assert len(shots) == 1 and shots[0].read_text().startswith("<svg")


async def test_q_quits(tmp_path):
    app = _app("sum.small", tmp_path)
    async with app.run_test() as pilot:
        await pilot.press("q")
    assert app.return_code == 0


def test_program_screen_snapshot(snap_compare):
    app = ExplorerApp(engine.load(sample_graphs.path("attention.small")), sample_graphs.path("attention.small"))
    assert snap_compare(app, terminal_size=(120, 36), press=["down", "down", "down", "down", "down", "down"])


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is installed by .ci/run")
def test_real_terminal_session_in_tmux():
    session = "zx-test"
    cmd = f"{sys.executable} -m zyx_explorer {sample_graphs.path('mlp.small')}"
    subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "120", "-y", "36", cmd], check=True)
    try:
        screen = _wait_for(session, "lowers to")
        assert "matmul" in screen and "x = input" in screen
        for _ in range(5):
            subprocess.run(["tmux", "send-keys", "-t", session, "Down"], check=True)
        screen = _wait_for(session, "t0 = matmul(x, w1)")
        assert "reads w1 [16, 32]" in screen
        subprocess.run(["tmux", "send-keys", "-t", session, "q"], check=True)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _alive(session):
            time.sleep(0.1)
        assert not _alive(session)
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


def _alive(session: str) -> bool:
    return subprocess.run(["tmux", "has-session", "-t", session], capture_output=True).returncode == 0


def _wait_for(session: str, text: str, timeout: float = 20.0) -> str:
    deadline = time.monotonic() + timeout
    screen = ""
    while time.monotonic() < deadline:
        screen = subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True).stdout
        if text in screen:
            return screen
        time.sleep(0.2)
    raise AssertionError(f"{text!r} never appeared; the screen was:\n{screen}")

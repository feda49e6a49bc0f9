"""The real app in a real terminal (tmux): started as a person would, driven with send-keys, read with capture-pane."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is missing (CI installs it)")


class Terminal:
    """One tmux session on a private server, 140 x 40."""

    def __init__(self, command: str) -> None:
        self.tmux = ["tmux", "-L", f"zx-test-{os.getpid()}", "-f", "/dev/null"]
        subprocess.run([*self.tmux, "new-session", "-d", "-s", "zx", "-x", "140", "-y", "40", "-c", str(ROOT), command],
                       check=True)

    def keys(self, *keys: str) -> None:
        subprocess.run([*self.tmux, "send-keys", "-t", "zx", *keys], check=True)

    def screen(self) -> str:
        return subprocess.run([*self.tmux, "capture-pane", "-p", "-t", "zx"], capture_output=True, text=True).stdout

    def wait_until(self, condition, what: str, timeout: float = 60.0) -> str:
        """The screen once ``condition(screen)`` holds (polling; fails with the last screen)."""
        deadline = time.monotonic() + timeout
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if condition(screen):
                return screen
            time.sleep(0.2)
        raise AssertionError(f"never happened: {what}; the screen was:\n{screen}")

    def wait_for(self, *texts: str) -> str:
        """The screen once every one of ``texts`` is on it."""
        return self.wait_until(lambda screen: all(t in screen for t in texts), f"{texts!r} all on the screen")

    def close(self) -> None:
        subprocess.run([*self.tmux, "kill-server"], capture_output=True)


def test_a_person_opens_the_mlp_looks_at_every_pane_and_quits():
    command = (f"env -u COLUMNS -u LINES PYTHONPATH={ROOT} {sys.executable} -m zyx_explorer sample_graphs/mlp.small.json "
               "--no-tune --no-opencl --no-native; echo app exited with $?; sleep 60")
    term = Terminal(command)
    try:
        screen = term.wait_for("executed ✓", "done in", "x = input: [8, 16] f32")
        assert "mlp: 5 nodes" in screen and "lowers to" in screen
        term.keys(*["Down"] * 5)
        term.wait_for("t0 = matmul(x, w1)", "reads w1 [16, 32]")
        term.keys("2")
        term.wait_for("c0 [8, 16] f32, 3 forms")  # a person waits for the pane before moving in it
        term.keys("Down", "Down")
        screen = term.wait_for("c4 [16] f32, 2 forms")
        assert "chosen" in screen and "input b2" in screen
        term.keys("/")
        term.wait_for("filter: c12")
        term.keys(*"relu")
        term.wait_until(lambda screen: "relu permute" in screen and "leaf permute to_device" not in screen,
                        "only the relu class is listed")
        term.keys("Enter", "3")  # at once, as a quick hand types them: the 3 must switch tabs, not join the filter
        screen = term.wait_for("p predicted", "variants of matmul_")
        assert "numpy" in screen and "blas" in screen and "not tuned" in screen
        term.keys("Enter")
        term.wait_until(lambda screen: ("numpy program of variant" in screen or "BLAS call" in screen)
                        and "np." in screen, "what the launched device runs")
        term.keys("4")
        term.wait_for("peak memory", "Launch")
        term.keys("7")
        screen = term.wait_for("Verification against the reference")
        assert "ok" in screen and "not tuned: cost-model predictions" in screen
        term.keys("?")
        term.wait_for("Keys", "Stop tuning")
        term.keys("Escape")  # alone: escape then q at once would read as alt+q
        term.wait_until(lambda screen: "Stop tuning" not in screen, "the help screen closes")
        term.keys("q")
        screen = term.wait_for("app exited with")
        assert "app exited with 0" in screen and "Traceback" not in screen
    finally:
        term.close()


def test_quitting_while_tuning_stops_the_tuner_and_exits_at_once(tmp_path):
    """``q`` in the middle of tuning the attention workload (an empty cache): the process ends within seconds."""
    command = (f"env -u COLUMNS -u LINES ZYX_EXPLORE_CACHE={tmp_path} PYTHONPATH={ROOT} {sys.executable} "
               "-m zyx_explorer sample_graphs/attention.json --no-opencl; echo app exited with $?; sleep 60")
    term = Terminal(command)
    try:
        term.wait_for("(c stops)")
        quit_at = time.monotonic()
        term.keys("q")
        screen = term.wait_until(lambda s: "app exited with" in s, "the app exits", timeout=10)
        assert "app exited with 0" in screen and time.monotonic() - quit_at < 5
    finally:
        term.close()


def test_the_explorer_without_a_terminal_says_so():
    run = subprocess.run([sys.executable, "-m", "zyx_explorer", "sample_graphs/mlp.small.json"], cwd=ROOT,
                         stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 2 and "needs a terminal" in run.stderr and "Traceback" not in run.stderr

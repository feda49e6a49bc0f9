"""What importing the explorer's modules does not do: ``model`` and ``view`` (what the panes show, as data) import no
Textual, and importing the package leaves Textual's frame rate alone (``__main__.run`` sets it for the app)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(code: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "TEXTUAL_FPS"}
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          check=True).stdout.strip()


def test_model_and_view_import_no_textual():
    code = ("import sys, zyx_explorer.model, zyx_explorer.rows, zyx_explorer.view; "
            "print(sorted({m.split('.')[0] for m in sys.modules if m.split('.')[0] == 'textual'}))")
    assert _run(code) == "[]"


def test_importing_the_package_sets_no_frame_rate():
    assert _run("import os, zyx_explorer, zyx_explorer.__main__; print(os.environ.get('TEXTUAL_FPS'))") == "None"

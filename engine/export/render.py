"""Rendering DOT to SVG, PNG or PDF with Graphviz's ``dot`` binary (run with a time limit)."""

from __future__ import annotations

import shutil
import subprocess

FORMATS = ("svg", "png", "pdf", "dot")
RENDER_SECONDS = 60.0
"""How long one ``dot`` run may take before it is abandoned (layout cost explodes on big graphs)."""


class RenderError(RuntimeError):
    """``dot`` is missing, failed, or took too long; the message is one line."""


def dot_binary() -> str | None:
    """The ``dot`` found on PATH, or None."""
    return shutil.which("dot")


def render(source: str, fmt: str, timeout: float = RENDER_SECONDS) -> bytes:
    """``source`` (DOT) rendered to ``fmt`` (svg, png or pdf)."""
    if fmt not in FORMATS or fmt == "dot":
        raise ValueError(f"cannot render to {fmt!r}")
    binary = dot_binary()
    if binary is None:
        raise RenderError(f"Graphviz `dot` not found on PATH: wrote DOT only (install graphviz to get {fmt})")
    try:
        done = subprocess.run([binary, f"-T{fmt}"], input=source.encode(), capture_output=True, timeout=timeout,
                              check=False)
    except subprocess.TimeoutExpired:
        raise RenderError(f"`dot` took more than {timeout:g} s: wrote DOT only (try a --neighbourhood, --plan-only "
                          "or `sfdp`)") from None
    if done.returncode != 0:
        first = (done.stderr.decode(errors="replace").strip().splitlines() or ["no message"])[0]
        raise RenderError(f"`dot` failed (exit {done.returncode}): {first}")
    return done.stdout

"""The stage bar: every stage of the compilation (done, running, absent), the one shown, the iteration scrubber,
and what the compilation is doing now (e.g. which kernel it is tuning)."""

from __future__ import annotations

from collections.abc import Mapping

from rich.text import Text
from textual.widgets import Static

from engine.pipeline import STAGES
from zyx_explorer.model import seconds_text


class StageBar(Static):
    """``program ✓  egraph ✓  [saturated ✓ it 3/5]  kernelized ✓  tuned …  plan  executed  tuning k_ab12 3/12``."""

    def show(self, done: list[str], viewed: str, seconds: dict[str, float], running: bool,
             iteration: int | None, iterations: int, failed: str | None = None, activity: str | None = None,
             notes: Mapping[str, str] = {}) -> None:
        """``activity``: what the running stage is doing; ``notes``: a word after a stage's name."""
        text = Text()
        pending = next((s for s in STAGES if s not in done), None)
        for name in STAGES:
            if name in done:
                mark, style = "✓", "green"
            elif failed and name == pending:
                mark, style = "✗", "bold red"
            elif running and name == pending:
                mark, style = "…", "yellow"
            else:
                mark, style = " ", "dim"
            label = f" {name} {mark}"
            if name in notes:
                label += f" {notes[name]}"
            if name == "saturated" and name == viewed and iterations:
                shown = iterations if iteration is None else iteration
                label += f" ◀ it {shown}/{iterations} ▶"
            text.append(label + " ", f"reverse {style}" if name == viewed else style)
            text.append(" ")
        total = sum(seconds.get(s, 0.0) for s in done[-1:])
        if failed:
            text.append(f"  failed: {failed}", "bold red")
        elif running:
            text.append(f"  {activity or f'compiling ({pending})…'}", "yellow")
        elif done:
            text.append(f"  done in {seconds_text(total)}", "dim")
        self.update(text)

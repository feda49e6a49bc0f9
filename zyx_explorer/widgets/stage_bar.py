"""The stage bar: every stage of the compilation (done, running, absent), the one shown, the iteration scrubber,
and what the compilation is doing now (e.g. which kernel it is tuning)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from rich.text import Text
from textual import events
from textual.widgets import Static

from engine import STAGES
from zyx_explorer.model import seconds_text
from zyx_explorer.view import View

SHORT = {"program": "prog", "egraph": "egraph", "saturated": "sat", "kernelized": "kern", "tuned": "tuned",
         "plan": "plan", "executed": "exec"}
"""Stage names when the full ones do not fit on one line (an 80-column terminal)."""


@dataclass
class BarState:
    """What ``StageBar.show`` was given, kept to redraw at a new width."""

    done: list[str]
    viewed: str
    seconds: dict[str, float]
    running: bool
    iteration: int | None
    iterations: int
    failed: str | None = None
    activity: str | None = None
    notes: Mapping[str, str] = field(default_factory=dict)


class StageBar(Static):
    """``program ✓  egraph ✓  ▶saturated ✓ it 3/5◀  kernelized ✓  tuned …  plan  executed  tuning k_ab12 3/12``.

    The stages fit one line at any width (shorter names and gaps when needed); what the compilation is doing
    follows on the same line when it fits, else on the second.  Viewing a stage other than the latest says so."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.state: BarState | None = None

    def show(self, view: View) -> None:
        """The session's stages, the viewed one, and what the compilation is doing (a word after a stage's name:
        tuning stopped)."""
        s = view.session
        notes = {"tuned": "(stopped)"} if view.stopped and "tuned" in s.done else {}
        self.state = BarState(s.done, view.stage, s.seconds, view.running, view.iteration, s.iterations(), s.failed,
                              view.activity, notes)
        self._draw()

    def on_resize(self, event: events.Resize) -> None:
        self._draw()

    def _draw(self) -> None:
        if self.state is None:
            return
        width = self.content_size.width or 200
        layouts = [self._stages(short, gap) for short, gap in ((False, 2), (False, 1), (True, 1))]
        stages = next((t for t in layouts if t.cell_len <= width), layouts[-1])
        status = self._status()
        if status:
            stages.append("  " if stages.cell_len + 2 + status.cell_len <= width else "\n").append_text(status)
        self.update(stages)

    def _stages(self, short: bool, gap: int) -> Text:
        st = self.state
        assert st is not None
        text = Text()
        pending = next((s for s in STAGES if s not in st.done), None)
        for name in STAGES:
            if name in st.done:
                mark, style = "✓", "green"
            elif st.failed and name == pending:
                mark, style = "✗", "bold red"
            elif st.running and name == pending:
                mark, style = "…", "yellow"
            else:
                mark, style = " ", "dim"
            label = f"{SHORT[name] if short else name} {mark}"
            if name in st.notes:
                label += f" {st.notes[name]}"
            if name == "saturated" and name == st.viewed and st.iterations:
                shown = st.iterations if st.iteration is None else st.iteration
                label += f" it {shown}/{st.iterations}"
            if name == st.viewed:
                text.append("▶", "bold").append(label, f"bold reverse {style}").append("◀", "bold")
            else:
                text.append(f" {label} ", style)
            text.append(" " * (gap - 1))
        return text

    def _status(self) -> Text:
        st = self.state
        assert st is not None
        pending = next((s for s in STAGES if s not in st.done), None)
        text = Text()
        if st.done and st.viewed != st.done[-1] and not st.failed:
            text.append(f"viewing {st.viewed}, not the latest ({st.done[-1]}): ] moves on", "bold magenta")
            text.append("  " if st.running else "")
        if st.failed:
            text.append(f"failed: {st.failed}", "bold red")
        elif st.running:
            text.append(st.activity or f"compiling ({pending})…", "yellow")
        elif not text and st.done:
            text.append(f"done in {seconds_text(sum(st.seconds.get(s, 0.0) for s in st.done[-1:]))}", "dim")
        return text

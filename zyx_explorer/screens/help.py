"""The ``?`` help screen: what every key does (its binding's long name) and what every pane shows."""

from __future__ import annotations

from typing import ClassVar

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

PANES = (
    ("Stage bar", "every stage of the compilation; [ ] switch stage, , . scrub the saturation iterations; "
                  "while tuning, the kernel and device being timed (c stops tuning)"),
    ("Program", "every tensor of the file; beside it what the highlighted one reads, feeds and lowers to"),
    ("Classes", "every e-class of the stage; / filters (c12, add, [8, 32], blas, ~fuzzy), s sorts"),
    ("Class detail", "the forms of the class (★ chosen, 📌 pinned); enter on → follows a child, backspace goes "
                     "back; enter on a form explains it against the chosen (or marked, m) form"),
    ("Costs", "kernel x device seconds (m measured, p predicted by the cost model, e nominal estimate; * in the "
              "plan, < fastest of the row: of its measured cells when it has any, a prediction never beats a timing; "
              "×2: the same code computes two classes): each kernel's own time, as its trials ran (a plan's launch "
              "may pay more: its fresh outputs' first touch, inputs read from memory; the Source pane shows that "
              "price); devices by short names (cl0 ...), the legend above the table; below, every variant tried of "
              "the highlighted kernel (verified / wrong / failed, cache; "
              "* launched, + the tuner's pick on its device); tab moves between them, enter shows the source"),
    ("Plan", "Allocate / Copy / Launch / Free steps; enter selects the step's class"),
    ("Source", "the kernel's time on each device and, where it differs, what a plan's launch of it is priced at; "
               "the kernel IR and what runs on the device of the selected variant (the launched one by default): "
               "OpenCL C, the native C kernel, the BLAS call or the numpy program"),
    ("Rewrites", "the rewrite log; / filters by rule, enter jumps to the merged class"),
    ("Results", "headline numbers, problems worked around, outputs, their statistics, and the verification"),
    ("Timeline (t)", "the plan's launches and copies as bars to scale, a lane per device (measured once it ran, else "
                     "predicted), the bytes each pool holds over the same time, the longest steps; after a pin, the "
                     "what-if plan below on the same scale (measured once r ran it)"),
)


class HelpScreen(ModalScreen[None]):
    """Keys and panes; escape, q or ? closes it."""

    BINDINGS: ClassVar = [Binding("escape,q,question_mark", "dismiss", "Close", id="help-close")]
    AUTO_FOCUS = "#help-scroll"
    """The list scrolls by keyboard (up/down, page up/down, home/end): at 80x24 it is taller than the screen."""
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 90%; height: 85%; border: thick $primary; background: $surface;
                                  padding: 0 1; }
    """

    def __init__(self, bindings: list[Binding]) -> None:
        super().__init__()
        self.bindings = bindings

    def compose(self) -> ComposeResult:
        keys = Table("key", "action", title="Keys", title_justify="left", box=None)
        for b in self.bindings:
            keys.add_row(self.app.get_key_display(b), b.tooltip or b.description)
        keys.add_row("ctrl+p", "Command palette")  # Textual's own key
        panes = Table("pane", "what it shows", title="Panes", title_justify="left", box=None)
        for pane, what in PANES:
            panes.add_row(pane, what)
        with VerticalScroll(id="help-scroll"):
            yield Static(keys, id="help-keys")
            yield Static(panes)
            yield Static("ctrl+p opens the command palette (every action, and themes).")

"""The explorer app: a Textual UI over a compiled tensor program."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from textual import on
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import DataTable, Footer, Header

from engine import Program
from engine.fileio import write_text_atomic
from zyx_explorer.widgets.program_table import ProgramTable
from zyx_explorer.widgets.tensor_detail import TensorDetail


class ExplorerApp(App):
    """Shows the program stage: the tensors of a program and what each lowers to."""

    CSS_PATH = "explorer.tcss"
    TITLE = "zyx-explore"
    BINDINGS: ClassVar = [
        Binding("q", "quit", "Quit", id="quit"),
        Binding("ctrl+s", "screenshot_svg", "Screenshot", id="screenshot"),
    ]

    def __init__(self, program: Program, source: Path, screenshot_dir: Path | None = None) -> None:
        super().__init__()
        self.program = program
        self.source = source
        self.screenshot_dir = screenshot_dir or Path.cwd()
        self.prims = program.lower()

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal():
            yield ProgramTable(self.program, id="program")
            with VerticalScroll(id="detail-scroll"):
                yield TensorDetail(self.program, self.prims, id="detail")
        yield Footer()

    def on_mount(self) -> None:
        name = self.program.name or self.source.name
        self.sub_title = f"{name}: {len(self.program.nodes)} nodes, {len(self.prims.nodes)} primitives"
        first = self.program.inputs[0].name if self.program.inputs else self.program.nodes[0].id
        self.query_one(TensorDetail).show(first)

    @on(DataTable.RowHighlighted, "#program")
    def _show_row(self, event: DataTable.RowHighlighted) -> None:
        self.query_one(TensorDetail).show(event.row_key.value)

    def action_screenshot_svg(self) -> None:
        """Save an SVG screenshot of the screen as it is."""
        target = self.screenshot_dir / f"zyx-explore-{self.program.name or self.source.stem}.svg"
        write_text_atomic(target, self.export_screenshot())
        self.notify(f"saved {target}", title="Screenshot")

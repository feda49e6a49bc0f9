"""The program pane: every tensor of the program, beside it the highlighted one's detail and where it went."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll

from engine import PrimGraph, Program
from zyx_explorer import model
from zyx_explorer.messages import LocateTensor
from zyx_explorer.view import View
from zyx_explorer.widgets.line_table import LineTable
from zyx_explorer.widgets.program_table import ProgramTable
from zyx_explorer.widgets.tensor_detail import TensorDetail


class ProgramPane(Horizontal):
    """The detail follows the table's cursor; enter on a tensor posts ``LocateTensor``."""

    def __init__(self, program: Program, prims: PrimGraph, **kwargs) -> None:
        super().__init__(**kwargs)
        self.program, self.prims = program, prims
        self.view: View | None = None

    def compose(self) -> ComposeResult:
        yield ProgramTable(self.program, id="program-table")
        with VerticalScroll(id="detail-scroll"):
            yield TensorDetail(self.program, self.prims, id="tensor")

    def show(self, view: View) -> None:
        """The highlighted tensor's detail, with where it went as of the view's stage."""
        self.view = view
        if isinstance(key := self.query_one(ProgramTable).current_key, str):
            self._show_detail(key)

    def show_tensor(self, tensor: str) -> None:
        """Put the cursor on ``tensor`` and show its detail."""
        self.query_one(ProgramTable).move_to(tensor)
        self._show_detail(tensor)

    def _show_detail(self, tensor: str) -> None:
        if self.view is None:
            return
        s, stage = self.view.session, self.view.stage
        where = s.locate(stage, tensor)
        self.query_one(TensorDetail).show(tensor, model.where_text(where, s.plan(stage)) if where is not None else "")

    @on(LineTable.Highlighted)
    def _highlighted(self, event: LineTable.Highlighted) -> None:
        self._show_detail(str(event.key))

    @on(LineTable.Selected)
    def _selected(self, event: LineTable.Selected) -> None:
        self.post_message(LocateTensor(str(event.key)))

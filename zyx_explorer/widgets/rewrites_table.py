"""The rewrites pane: the rewrite log, one rule application per row; ``/`` filters (e.g. by rule)."""

from __future__ import annotations

from textual import on

from engine import Compilation
from zyx_explorer import model
from zyx_explorer.messages import ShowClass
from zyx_explorer.view import Memo, View
from zyx_explorer.widgets.line_table import Column, LineTable

COLUMNS = (Column("it", 3, right=True), Column("rule", 26), Column("node", 44, flex=True), Column("result", 8),
           Column("merged", 16))


class RewritesTable(LineTable):
    """Rows come from ``model.rewrite_rows`` (key: iteration, application); enter posts ``ShowClass`` for the
    merged class."""

    def __init__(self, **kwargs) -> None:
        super().__init__(COLUMNS, **kwargs)
        self._memo = Memo()
        self._compilation: Compilation | None = None

    def show(self, view: View) -> None:
        """The whole log, or up to the iteration scrubbed to while the saturated stage is viewed."""
        c, eg = view.session.compilation, view.session.egraph("saturated")
        upto = view.iteration if view.stage == "saturated" else None
        self._compilation = c
        if self._memo.changed(c, eg, upto, view.refill):
            self.set_rows(model.rewrite_rows(eg, c, upto) if c is not None and eg else [])

    @on(LineTable.Selected)
    def _selected(self, event: LineTable.Selected) -> None:
        c = self._compilation
        if c is None or c.saturation is None or not isinstance(event.key, tuple):
            return
        it, j = event.key
        app = c.saturation.iterations[it - 1].applications[j]
        self.post_message(ShowClass(app.merged[0] if app.merged else app.node, tab=True, stage="saturated"))

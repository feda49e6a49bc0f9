"""The classes pane: every e-class of the shown stage, virtualised (a 100k-class e-graph scrolls as fast as 10)."""

from __future__ import annotations

from textual import on

from engine import ClassId
from zyx_explorer.messages import OpenClass
from zyx_explorer.view import Memo, View
from zyx_explorer.widgets.line_table import Column, LineTable

COLUMNS = (
    Column("class", 7), Column("shape", 14), Column("dtype", 5), Column("forms", 5, right=True),
    Column("ops", 22, flex=True), Column("chosen", 20, flex=True), Column("cost", 9, right=True),
)
SORTS = (None, 3, 6, 1, 4)
"""What ``s`` cycles through: id order, most forms first, cheapest, smallest shape, by ops."""


class ClassesTable(LineTable):
    """Rows come from ``model.class_rows``; ``s`` cycles the sort; enter posts ``OpenClass``."""

    def __init__(self, **kwargs) -> None:
        super().__init__(COLUMNS, **kwargs)
        self._sort = 0
        self._memo = Memo()

    def show(self, view: View, keep: ClassId | None) -> bool:
        """The classes of the view's e-graph, the cursor on ``keep`` (when it is in there); False if the rows were
        already those."""
        s, eg = view.session, view.egraph()
        extraction = s.extraction(view.stage)
        if not self._memo.changed(eg, extraction, tuple(s.pins.items()), view.refill):
            return False
        if eg is None:
            self.set_rows([])
        else:
            keep = eg.find(keep) if keep is not None and keep < eg.num_added else None
            self.set_rows(s.class_rows(eg, extraction), keep=keep)
        return True

    @property
    def current_class(self) -> ClassId | None:
        key = self.current_key
        return key if isinstance(key, int) else None

    def cycle_sort(self) -> str:
        """Next sort order; returns its name."""
        self._sort = (self._sort + 1) % len(SORTS)
        column = SORTS[self._sort]
        self.sort_by(column)
        return "class id" if column is None else COLUMNS[column].label

    @on(LineTable.Selected)
    def _selected(self, event: LineTable.Selected) -> None:
        if isinstance(event.key, int):
            self.post_message(OpenClass(event.key))

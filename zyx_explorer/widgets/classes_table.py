"""The classes pane: every e-class of the shown stage, virtualised (a 100k-class e-graph scrolls as fast as 10)."""

from __future__ import annotations

from zyx_explorer.widgets.line_table import Column, LineTable

COLUMNS = (
    Column("class", 7), Column("shape", 14), Column("dtype", 5), Column("forms", 5, right=True),
    Column("ops", 22, flex=True), Column("chosen", 20, flex=True), Column("cost", 9, right=True),
)
SORTS = (None, 3, 6, 1, 4)
"""What ``s`` cycles through: id order, most forms first, cheapest, smallest shape, by ops."""


class ClassesTable(LineTable):
    """Rows come from ``model.class_rows``; ``s`` cycles the sort."""

    def __init__(self, **kwargs) -> None:
        super().__init__(COLUMNS, **kwargs)
        self._sort = 0

    def cycle_sort(self) -> str:
        """Next sort order; returns its name."""
        self._sort = (self._sort + 1) % len(SORTS)
        column = SORTS[self._sort]
        self.sort_by(column)
        return "class id" if column is None else COLUMNS[column].label

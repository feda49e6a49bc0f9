"""The plan pane: the ordered Allocate / Copy / Launch / Free steps with predicted and measured time."""

from __future__ import annotations

from zyx_explorer.widgets.line_table import Column, LineTable

COLUMNS = (
    Column("#", 4, right=True), Column("step", 8), Column("what", 44, flex=True), Column("where", 8),
    Column("bytes", 9, right=True), Column("predicted", 9, right=True), Column("measured", 9, right=True),
)


class PlanTable(LineTable):
    """Rows come from ``model.plan_rows``; enter selects the step's class."""

    def __init__(self, **kwargs) -> None:
        super().__init__(COLUMNS, **kwargs)

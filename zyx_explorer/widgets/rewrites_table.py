"""The rewrites pane: the rewrite log, one rule application per row; ``/`` filters (e.g. by rule)."""

from __future__ import annotations

from zyx_explorer.widgets.line_table import Column, LineTable

COLUMNS = (Column("it", 3, right=True), Column("rule", 26), Column("node", 44, flex=True), Column("result", 8),
           Column("merged", 16))


class RewritesTable(LineTable):
    """Rows come from ``model.rewrite_rows``; enter jumps to the merged class."""

    def __init__(self, **kwargs) -> None:
        super().__init__(COLUMNS, **kwargs)

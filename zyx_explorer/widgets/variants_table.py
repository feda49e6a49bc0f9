"""The costs pane's variants: every variant tried of the highlighted kernel, on each device."""

from __future__ import annotations

from zyx_explorer.widgets.line_table import Column, LineTable

COLUMNS = (
    Column("", 1), Column("device", 8), Column("variant", 38, flex=True), Column("status", 9), Column("median", 9, right=True),
    Column("predicted", 9, right=True), Column("cache", 5), Column("reason", 60, flex=True),
)


class VariantsTable(LineTable):
    """Rows come from ``model.variant_rows`` (key: device, variant); enter shows that variant's OpenCL C."""

    def __init__(self, **kwargs) -> None:
        super().__init__(COLUMNS, **kwargs)

"""The costs pane's matrix: kernel candidates x devices, the seconds of each (measured, predicted or estimated)."""

from __future__ import annotations

from collections.abc import Sequence

from zyx_explorer.widgets.line_table import Column, LineTable

LEGEND = "m measured (tuned)   p predicted (cost model)   e nominal estimate   * chosen by the plan   < best of the row"


class CostsTable(LineTable):
    """Columns depend on the devices: set them with ``for_devices`` before the rows."""

    def __init__(self, **kwargs) -> None:
        super().__init__([], **kwargs)

    def for_devices(self, names: Sequence[str]) -> None:
        self.columns = [Column("kernel", 12), Column("class", 7), Column("root form", 14)]
        self.columns += [Column(n[:22], max(12, min(len(n), 22)), right=True) for n in names]

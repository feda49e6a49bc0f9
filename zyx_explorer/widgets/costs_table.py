"""The costs pane's matrix: kernel candidates x devices, the seconds of each (measured, predicted or estimated)."""

from __future__ import annotations

from collections.abc import Sequence

from zyx_explorer.widgets.line_table import Column, LineTable

LEGEND = "m measured  p predicted  e estimate   * in the plan  < fastest of the row  ×2 same code, two classes"


class CostsTable(LineTable):
    """Columns depend on the devices: set them with ``for_devices`` before the rows."""

    def __init__(self, **kwargs) -> None:
        super().__init__([], **kwargs)

    def for_devices(self, names: Sequence[str], kernel_width: int = 10) -> None:
        """``names``: the devices' short names (``units.short_devices``); ``kernel_width``: the longest kernel cell
        (``k_1a2b3c4d ×2`` when one kernel computes two classes)."""
        self.columns = [Column("kernel", max(10, kernel_width)), Column("class", 6), Column("root form", 14),
                        *(Column(n, max(10, len(n)), right=True) for n in names)]

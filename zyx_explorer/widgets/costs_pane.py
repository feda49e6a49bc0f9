"""The costs pane: the kernel x device matrix, its legend, and below it every variant tried of the highlighted
kernel."""

from __future__ import annotations

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from engine import Stage, units
from zyx_explorer import model
from zyx_explorer.messages import ShowKernel
from zyx_explorer.view import Memo, View
from zyx_explorer.widgets.costs_table import LEGEND, CostsTable
from zyx_explorer.widgets.line_table import LineTable
from zyx_explorer.widgets.variants_table import VariantsTable


class CostsPane(Vertical):
    """A kernel highlighted (or entered) in the matrix or among its variants posts ``ShowKernel``."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.view: View | None = None
        self._memo = Memo()

    def compose(self) -> ComposeResult:
        yield Static(LEGEND, id="costs-legend")
        yield CostsTable(id="costs")
        yield Static(id="variants-head")
        yield VariantsTable(id="variants")

    @property
    def costs(self) -> CostsTable:
        return self.query_one(CostsTable)

    @property
    def kernel(self) -> str | None:
        """The candidate under the matrix's cursor."""
        key = self.costs.current_key
        return key if isinstance(key, str) else None

    def show(self, view: View) -> None:
        """The view's kernel times (live: the tuner's so far), each marked measured, predicted or estimated."""
        self.view = view
        s, c, table = view.session, view.session.current(), self.costs
        times, tuning = view.cost_sources()
        extraction = s.extraction(view.stage)
        estimated = not view.live and not view.reached(Stage.TUNED)
        if not self._memo.changed(c, tuple(times.values()) if view.live else times, extraction, len(tuning),
                                  estimated, view.refill):
            return
        if c is None or not times:
            table.set_rows([])
        else:
            short = s.short()
            rows = model.cost_rows(c, times, extraction, tuning, estimated)
            table.for_devices([short[d.name] for d in c.devices], max((len(r.cells[0]) for r in rows), default=0))
            legend = units.device_legend(short)
            live = (f"tuning: {model.plural(len(tuning), 'kernel')} measured so far, the others predicted\n"
                    if view.live else "")
            self.query_one("#costs-legend", Static).update(live + LEGEND + (f"\n{legend}" if legend else ""))
            table.set_rows(rows)
        self._show_variants()

    def _show_variants(self) -> None:
        """The variants of the kernel under the matrix's cursor, on every device."""
        table, head = self.query_one(VariantsTable), self.query_one("#variants-head", Static)
        view, cand_id = self.view, self.kernel
        s = view.session if view is not None else None
        if view is None or s is None or cand_id is None or s.candidate(cand_id) is None:
            table.set_rows([])
            head.update("variants: highlight a kernel above")
            return
        stage = view.stage
        times, tuning = view.cost_sources()
        c = s.compilation
        rows = model.variant_rows(cand_id, times, tuning, lambda kn: s.variant(stage, kn), view.launched(cand_id),
                                  s.short(), c.skipped if c is not None else None)
        table.set_rows(rows)
        tuned = [r for kn, r in tuning.items() if kn.candidate == cand_id]
        text = f"variants of {s.kernel_name(cand_id)}: {len(rows)} on {model.plural(len({r.key[0] for r in rows if isinstance(r.key, tuple)}), 'device')}"
        if tuned:
            short = s.short()
            text += " (" + ", ".join(f"{short.get(r.device, r.device)} cache {r.cache}" for r in tuned) + ")"
        elif not view.reached(Stage.TUNED):
            text += " (before tuning: default variants, nominal estimates)"
        else:
            text += " (not tuned: the cost model's suggestion)"
        head.update(Text(text + "   * launched  + tuner's pick   tab: variants, enter: source"))

    @on(LineTable.Highlighted)
    def _highlighted(self, event: LineTable.Highlighted) -> None:
        """The matrix's cursor moves the variants; a focused table's cursor moves the source pane too (not when a
        refresh moves the cursor)."""
        if event.table is self.costs:
            self._show_variants()
        if event.table.has_focus:
            self._show_kernel(event)

    @on(LineTable.Selected)
    def _selected(self, event: LineTable.Selected) -> None:
        self._show_kernel(event, tab=True)

    def _show_kernel(self, event: LineTable.Highlighted, tab: bool = False) -> None:
        """The kernel of the matrix's row, or the variant's of the matrix's kernel."""
        if event.table is self.costs:
            if isinstance(event.key, str):
                self.post_message(ShowKernel(event.key, tab=tab))
        elif self.kernel is not None and isinstance(event.key, tuple):
            self.post_message(ShowKernel(self.kernel, event.key, tab=tab))

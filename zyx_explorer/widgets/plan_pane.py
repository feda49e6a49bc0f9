"""The plan pane: the plan's steps and a summary line (totals, peak memory, the pins and their what-if)."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from engine import RESIDENT_NOTE, ExecPlan, KernelNode, Launch, Stage
from zyx_explorer import model
from zyx_explorer.messages import ShowClass, ShowKernel
from zyx_explorer.view import Memo, View
from zyx_explorer.widgets.line_table import LineTable
from zyx_explorer.widgets.plan_table import PlanTable


class PlanPane(Vertical):
    """A Launch step highlighted posts ``ShowKernel`` (the variant it launches); enter on a step, ``ShowClass``."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.view: View | None = None
        self._memo = Memo()

    def compose(self) -> ComposeResult:
        yield PlanTable(id="plan")
        yield Static(id="plan-summary")

    @property
    def plan(self) -> ExecPlan | None:
        return self.view.session.plan(self.view.stage) if self.view is not None else None

    def show(self, view: View) -> None:
        """The view's plan, measured as far as the stage goes."""
        self.view = view
        s, c, plan = view.session, view.session.current(), self.plan
        summary = self.query_one("#plan-summary", Static)
        if plan is None or c is None:
            self.query_one(PlanTable).set_rows([])
            summary.update("no plan at this stage")
            return
        measured = c.execution.step_times if c.execution is not None and view.reached(Stage.EXECUTED) else None
        if self._memo.changed(plan, measured, view.refill):
            self.query_one(PlanTable).set_rows(model.plan_rows(plan, measured, s.short()))
        text = (f"{model.plural(len(plan.steps), 'step')}, {model.plural(len(plan.launches()), 'launch', 'launches')} "
                f"({plan.coverage()}); predicted {model.seconds_text(plan.predicted)}"
                f"; peak memory {model.bytes_text(plan.peak_bytes)}"
                f"; measured {c.execution.describe() if measured and c.execution else '(not run)'}")
        if c.resident:
            text += f"; planned {RESIDENT_NOTE}, the runs reuse them"
        if s.pins:
            run = s.whatif_run
            text += (f"; pinned: {', '.join(f'c{c}=n{n}' for c, n in s.pins.items())} (what-if: "
                     f"{model.what_if_text(run) if run else 'not run, r runs it'})")
        summary.update(text)

    def launch(self, step: object) -> Launch | None:
        """The Launch step of index ``step`` (None: another step, or no plan)."""
        plan = self.plan
        found = plan.steps[step] if plan is not None and isinstance(step, int) else None
        return found if isinstance(found, Launch) else None

    @on(LineTable.Highlighted)
    def _highlighted(self, event: LineTable.Highlighted) -> None:
        """A Launch step shows the kernel it launches (when the extraction chose it)."""
        view, launch = self.view, self.launch(event.key)
        if view is None or launch is None:
            return
        c, extraction = view.session.current(), view.session.extraction(view.stage)
        if extraction is None or c is None or c.egraph is None or launch.outputs[0] not in extraction.choices:
            return
        kn = c.egraph.node(extraction.choices[launch.outputs[0]].node).param
        if isinstance(kn, KernelNode):
            self.post_message(ShowKernel(kn.candidate, (launch.device, launch.variant)))

    @on(LineTable.Selected)
    def _selected(self, event: LineTable.Selected) -> None:
        plan = self.plan
        if plan is not None and isinstance(event.key, int):
            self.post_message(ShowClass(model.step_class(plan.steps[event.key]), tab=True))

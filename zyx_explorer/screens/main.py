"""The main screen: the stage bar, the seven panes in tabs, the filter box and the footer.

It keeps what is viewed (the stage, the saturation iteration, the class, the kernel) and shows it in every pane
(``show(view)``); the panes tell it what the user asked for with the messages of ``zyx_explorer.messages``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, ClassVar, cast

from textual import events, on
from textual.actions import SkipAction
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Header, Input, TabbedContent, TabPane

from engine import ClassId, EGraph, KernelNode, Launch, NodeId, PrimGraph, Program, Stage, Variant, WhatIf
from zyx_explorer import model
from zyx_explorer.messages import LocateTensor, OpenClass, ShowClass, ShowKernel
from zyx_explorer.screens.timeline import TimelineScreen
from zyx_explorer.view import View
from zyx_explorer.widgets.class_detail import ClassDetail
from zyx_explorer.widgets.classes_table import ClassesTable
from zyx_explorer.widgets.costs_pane import CostsPane
from zyx_explorer.widgets.line_table import LineTable
from zyx_explorer.widgets.plan_pane import PlanPane
from zyx_explorer.widgets.plan_table import PlanTable
from zyx_explorer.widgets.program_pane import ProgramPane
from zyx_explorer.widgets.results_view import ResultsView
from zyx_explorer.widgets.rewrites_table import RewritesTable
from zyx_explorer.widgets.source_view import SourceView
from zyx_explorer.widgets.stage_bar import StageBar

if TYPE_CHECKING:
    from zyx_explorer.app import ExplorerApp

TABS = ("program", "classes", "costs", "plan", "source", "rewrites", "results")
TABLES = {"program": "#program-table", "classes": "#classes", "costs": "#costs", "plan": "#plan", "rewrites": "#rewrites"}
FOCUS = {**TABLES, "source": "#source-scroll", "results": "#results-scroll"}
"""What each tab focuses when shown (a widget outside it must not keep the focus: the tab would switch back)."""
STAGE, ITERATION = Binding.Group("Stage", compact=True), Binding.Group("Iteration", compact=True)
"""Key pairs shown as one footer entry (``[]`` Stage), so that the footer fits 80 columns."""
NARROW = 120
"""Below this many columns the footer is compact."""

KEYS: list[Binding] = [
    Binding("q", "app.quit", "Quit", id="quit", tooltip="Quit"),
    Binding("question_mark", "app.help", "Help", id="help", tooltip="Help: every key and pane"),
    *(Binding(str(i + 1), f"tab('{t}')", t.capitalize(), show=False, id=f"tab-{t}", tooltip=f"Show {t}")
      for i, t in enumerate(TABS)),
    Binding("left_square_bracket", "stage(-1)", "Stage-", id="stage-prev", tooltip="Previous stage", group=STAGE),
    Binding("right_square_bracket", "stage(1)", "Stage+", id="stage-next", tooltip="Next stage", group=STAGE),
    Binding("comma", "iteration(-1)", "Iter-", id="iteration-prev", tooltip="Previous saturation iteration",
            group=ITERATION),
    Binding("full_stop", "iteration(1)", "Iter+", id="iteration-next", tooltip="Next saturation iteration",
            group=ITERATION),
    Binding("slash", "filter", "Filter", id="filter", tooltip="Filter the table"),
    Binding("s", "sort", "Sort", id="sort", tooltip="Sort the table (next column)"),
    Binding("backspace", "back", "Back", id="back", tooltip="Back to the previous class"),
    Binding("m", "mark", "Mark", show=False, id="mark", tooltip="Mark the highlighted form"),
    Binding("x", "explain", "Explain", show=False, id="explain",
            tooltip="Explain the highlighted form against the marked (or chosen) one"),
    Binding("p", "pin", "Pin", id="pin", tooltip="Pin the class to the highlighted form (what-if)"),
    Binding("d", "pin_device", "Pin device", show=False, id="pin-device",
            tooltip="Pin the class to the highlighted kernel's device (what-if)"),
    Binding("u", "unpin", "Unpin", show=False, id="unpin", tooltip="Unpin the class"),
    Binding("t", "tensors", "Tensors", show=False, id="tensors",
            tooltip="Show the program tensors the highlighted kernel (plan step, costs row, source) computes"),
    Binding("r", "app.run_what_if", "Run what-if", show=False, id="run-what-if",
            tooltip="Run the pinned plan beside the real one, verify it, measure the delta"),
    Binding("T", "timeline", "Timeline", show=False, id="timeline",
            tooltip="Where the time went: the plan's launches and copies per device, memory per pool"),
    Binding("e", "app.export", "Export", show=False, id="export", tooltip="Export the stage (Graphviz DOT + SVG)"),
    Binding("ctrl+s", "app.screenshot_svg", "Screenshot", show=False, id="screenshot", tooltip="Save a screenshot (SVG)"),
    Binding("c", "app.cancel_tuning", "Stop tuning", id="cancel-tuning",
            tooltip="Stop tuning (the plan uses what was timed)"),
    Binding("escape", "close_filter", "Close filter", show=False, id="close-filter", tooltip="Close the filter"),
]
"""Every key of the explorer, in the order the footer, the help and the command palette show them; ``tooltip``
is its long name.  The ``app.`` ones are the app's (those it also binds work on every screen)."""
NEXT_WIDGET = Binding("tab", "app.focus_next", "Next widget", show=False, id="next-widget",
                      tooltip="Next widget (costs: the matrix, then the variants)")
KEEP_FILTER = Binding("enter", "keep_filter", "Keep filter", show=False, priority=True, id="keep-filter",
                      tooltip="Keep the filter and close its box")
"""A priority binding, so the box closes before the next key is read: the Input's own enter would post a message,
and a key typed right after it would still reach the hidden box."""


def keys(*ids: str) -> list[Binding]:
    """The bindings of ``KEYS`` with these ids."""
    return [b for b in KEYS if b.id in ids]


class MainScreen(Screen[None]):
    """Stage bar, seven panes (program, classes + detail, costs, plan, source, rewrites, results), footer."""

    AUTO_FOCUS = "#program-table"
    BINDINGS: ClassVar = [*KEYS, NEXT_WIDGET, KEEP_FILTER]

    def __init__(self, program: Program, prims: PrimGraph, session: model.Session) -> None:
        super().__init__()
        self.program, self.prims, self.session = program, prims, session
        self.viewed = "program"
        self.follow = True
        """Show each stage as it arrives, until the user picks one."""
        self.iteration: int | None = None
        self.selected: ClassId | None = None
        self.history: list[ClassId] = []
        self.kernel: str | None = None
        """The candidate the source pane shows."""
        self.variant: tuple[str, Variant] | None = None
        """(device, variant) of ``kernel`` the source shows; None: the one the plan launches."""
        self.refill = 0
        """Bumped to make every pane refill (see ``View.refill``)."""

    @property
    def explorer(self) -> ExplorerApp:
        """The app, typed: where the compilation's status is."""
        return cast("ExplorerApp", self.app)

    @property
    def view(self) -> View:
        app = self.explorer
        return View(self.session, self.viewed, self.iteration, app.running, app.activity, app.tuning_cancelled,
                    app.tuning_now and self.follow, self.refill)

    # -- layout ----------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header()
        yield StageBar(id="stages")
        with TabbedContent(initial="program", id="tabs"):
            with TabPane("1 Program", id="program"):
                yield ProgramPane(self.program, self.prims)
            with TabPane("2 Classes", id="classes-tab"), Horizontal():
                yield ClassesTable(id="classes")
                yield ClassDetail(id="class-detail")
            with TabPane("3 Costs", id="costs-tab"):
                yield CostsPane()
            with TabPane("4 Plan", id="plan-tab"):
                yield PlanPane()
            with TabPane("5 Source", id="source-tab"), VerticalScroll(id="source-scroll"):
                yield SourceView(id="source")
            with TabPane("6 Rewrites", id="rewrites-tab"), Vertical():
                yield RewritesTable(id="rewrites")
            with TabPane("7 Results", id="results-tab"), VerticalScroll(id="results-scroll"):
                yield ResultsView(id="results")
        yield Input(placeholder="filter: c12  add  [8, 32]  blas  ~fuzzy   (enter: keep, escape: clear)", id="filter")
        yield Footer()

    def on_resize(self, event: events.Resize) -> None:
        """A compact footer on a narrow terminal, so that its keys fit 80 columns."""
        self.query_one(Footer).compact = event.size.width < NARROW

    def on_mount(self) -> None:
        self.query_one(ClassesTable).follow = self._class_highlighted
        self.refresh_panes()
        self.set_interval(0.5, self._tick)

    def _tick(self) -> None:
        """While tuning live, the costs pane follows what the worker has measured (a kernel's result lands after
        its last progress message)."""
        if self.view.live:
            self.show_costs()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The app decides (a screen over this one turns the panes' keys off)."""
        return self.app.check_action(action, parameters)

    # -- showing the view ------------------------------------------------------------------

    def stage_done(self, stage: str) -> None:
        """Stage ``stage`` arrived (``""``: the compilation is over): shown at once while following."""
        if stage and self.follow:
            self.viewed = stage
            self.iteration = None
        self.refresh_panes()

    def shown_egraph(self) -> EGraph | None:
        return self.session.egraph(self.viewed, self.iteration)

    def refresh_panes(self, refill: bool = False) -> None:
        """Every pane shows the view; ``refill``: although its sources look the same (pins or a what-if run
        changed what they hold)."""
        if refill:
            self.refill += 1
        view = self.view
        self.query_one(StageBar).show(view)
        classes = self.query_one(ClassesTable)
        if classes.show(view, self.selected) and self.selected is None:
            self.selected = classes.current_class
        self.query_one(ClassDetail).show(view, self.selected)
        self.query_one(ProgramPane).show(view)
        self.query_one(CostsPane).show(view)
        self.query_one(PlanPane).show(view)
        self.query_one(RewritesTable).show(view)
        self._show_source()
        self.query_one(ResultsView).show(view)

    def show_stage_bar(self) -> None:
        self.query_one(StageBar).show(self.view)

    def show_costs(self) -> None:
        self.query_one(CostsPane).show(self.view)

    def _show_detail(self) -> None:
        self.query_one(ClassDetail).show(self.view, self.selected)

    def _show_source(self) -> None:
        """Fill the source pane, only while it is shown (generating and highlighting C is not free)."""
        if self._active_tab() == "source":
            self.query_one(SourceView).show(self.view, self.kernel, self.variant)

    def show_kernel(self, cand_id: str, variant: tuple[str, Variant] | None = None) -> None:
        """Show candidate ``cand_id`` in the source pane (``variant``: which one; None: the launched one)."""
        self.kernel, self.variant = cand_id, variant
        self._show_source()

    @property
    def screenshot_stem(self) -> str:
        """What a screenshot is called: after the pane and the stage shown."""
        return f"screenshot-{self._active_tab()}-{self.viewed}"

    # -- what the panes ask for --------------------------------------------------------------

    @on(TabbedContent.TabActivated)
    def _tab_shown(self, event: TabbedContent.TabActivated) -> None:
        self._show_source()

    @on(ShowClass)
    def _show_class(self, message: ShowClass) -> None:
        if message.stage is not None and not Stage(self.viewed).shows(message.stage):
            self.viewed, self.follow, self.iteration = message.stage, False, None
            self.refresh_panes()
        self.select_class(message.cid, tab=message.tab)

    @on(ShowKernel)
    def _show_kernel(self, message: ShowKernel) -> None:
        self.show_kernel(message.candidate, message.variant)
        if message.tab:
            self.action_tab("source")

    @on(OpenClass)
    def _open_class(self, message: OpenClass) -> None:
        self.query_one(ClassDetail).forms.focus()

    @on(LocateTensor)
    def _locate_tensor(self, message: LocateTensor) -> None:
        """Enter on a tensor: its value class, the plan's kernel that computes it and that step (or the Allocate
        of an input), as far as the viewed stage goes."""
        tensor = message.tensor
        where = self.session.locate(self.viewed, tensor)
        if where is None:
            self.notify(f"{tensor} is not compiled yet (or no output reads it)", severity="warning", markup=False)
            return
        self.select_class(where.value)
        plan = self.session.plan(self.viewed)
        self.notify(f"{tensor}: {model.where_text(where, plan)}", title="Where it went", markup=False)
        if plan is None or not where.steps:
            self.action_tab("classes")
            return
        step = plan.steps[where.steps[0]]
        self.action_tab("plan")
        self.query_one(PlanTable).move_to(where.steps[0])
        if isinstance(step, Launch):
            self.show_kernel(step.candidate, (step.device, step.variant))

    def _class_highlighted(self, key: Hashable) -> None:
        """The classes table's cursor moved (called within the move, so the detail is painted with it)."""
        if isinstance(key, int) and key != self.selected:
            self.selected = key
            self._show_detail()

    @on(Input.Changed)
    def _filter_changed(self, event: Input.Changed) -> None:
        table = self._active_table()
        if table is not None:
            table.set_filter(event.value)

    # -- navigation ------------------------------------------------------------------------

    def select_class(self, cid: ClassId, tab: bool = False, remember: bool = True) -> None:
        """Show class ``cid`` (pushing the current one on the back history)."""
        eg = self.shown_egraph()
        if eg is None or cid >= eg.num_added:
            self.notify(f"c{cid} is not in the {self.viewed} e-graph", severity="warning")
            return
        cid = eg.find(cid)
        if remember and self.selected is not None and self.selected != cid:
            self.history.append(self.selected)
        table = self.query_one(ClassesTable)
        if not table.move_to(cid):
            table.set_filter("")
            self.query_one(Input).value = ""
            table.move_to(cid)
        self.selected = cid
        self._show_detail()
        if tab:
            self.action_tab("classes")

    def _active_tab(self) -> str:
        active = self.query_one(TabbedContent).active
        return active.removesuffix("-tab")

    def _active_table(self) -> LineTable | None:
        selector = TABLES.get(self._active_tab())
        return self.query_one(selector, LineTable) if selector else None

    def action_tab(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab if tab == "program" else f"{tab}-tab"
        self.query_one(FOCUS[tab]).focus()

    def action_stage(self, step: int) -> None:
        done = self.session.done
        if not done:
            return
        index = done.index(self.viewed) if self.viewed in done else len(done) - 1
        new = done[max(0, min(index + step, len(done) - 1))]
        if new != self.viewed:
            self.viewed, self.follow, self.iteration = new, False, None
            self.refresh_panes()

    def action_iteration(self, step: int) -> None:
        total = self.session.iterations()
        if self.viewed != "saturated":
            if "saturated" not in self.session.done:
                self.notify("no saturation yet", severity="warning")
                return
            self.viewed, self.follow, self.iteration = "saturated", False, None
        current = total if self.iteration is None else self.iteration
        new = max(0, min(current + step, total))
        self.iteration = None if new == total else new
        self.refresh_panes()

    def action_filter(self) -> None:
        table = self._active_table()
        if table is None:
            self.action_tab("classes")
            table = self.query_one(ClassesTable)
        box = self.query_one(Input)
        box.value = table.query_text
        box.display = True
        self.set_focus(box)  # at once: Widget.focus defers, and keys typed meanwhile would go to the table

    def action_close_filter(self) -> None:
        box = self.query_one(Input)
        if box.has_focus:
            box.value = ""
            self._hide_filter()

    def action_keep_filter(self) -> None:
        if not self.query_one(Input).has_focus:
            raise SkipAction()
        self._hide_filter()

    def _hide_filter(self) -> None:
        box = self.query_one(Input)
        box.display = False
        table = self._active_table()
        if table is not None:
            self.set_focus(table)  # at once, so a key pressed right after enter is not typed into the hidden box

    def action_sort(self) -> None:
        table = self._active_table()
        if isinstance(table, ClassesTable):
            self.notify(f"sorted by {table.cycle_sort()}", title="Classes")
        elif table is not None:
            column = 0 if table.sort_column is None else table.sort_column + 1
            table.sort_by(None if column >= len(table.columns) else column)
            label = "original order" if table.sort_column is None else table.columns[table.sort_column].label
            self.notify(f"sorted by {label}")

    def action_back(self) -> None:
        if not self.history:
            self.notify("no previous class", severity="warning")
            return
        self.select_class(self.history.pop(), remember=False)

    def action_mark(self) -> None:
        n = self.query_one(ClassDetail).mark()
        self._show_detail()
        if n is not None:
            self.notify(f"marked n{n}: x explains the highlighted form against it")

    def action_explain(self) -> None:
        if not self.query_one(ClassDetail).explain():
            self.notify("highlight a form in the class detail first", severity="warning")

    def _context_kernel(self) -> str | None:
        """The candidate the active pane points at: the plan step's, the costs row's, the source pane's or the
        highlighted kernel form's."""
        tab = self._active_tab()
        if tab == "plan":
            launch = self.query_one(PlanPane).launch(self.query_one(PlanTable).current_key)
            return launch.candidate if launch is not None else None
        if tab == "costs":
            return self.query_one(CostsPane).kernel
        if tab == "classes":
            n, eg = self.query_one(ClassDetail).highlighted_form(), self.shown_egraph()
            param = eg.node(n).param if n is not None and eg is not None else None
            return param.candidate if isinstance(param, KernelNode) else None
        return self.kernel if tab == "source" else None

    def action_tensors(self) -> None:
        """Back from a kernel to the program tensors it computes: the program pane, on the first of them."""
        cand_id = self._context_kernel()
        tensors = self.session.tensors_of(cand_id) if cand_id else []
        if not cand_id or not tensors:
            self.notify("highlight a kernel (a Launch step, a costs row, a kernel form or the source pane's)",
                        severity="warning")
            return
        self.notify(f"{self.session.kernel_name(cand_id)} computes {', '.join(tensors)}", title="Program tensors",
                    markup=False)
        self.action_tab("program")
        self.query_one(ProgramPane).show_tensor(tensors[0])

    # -- pins (what-if) ----------------------------------------------------------------------

    def action_pin(self) -> None:
        """Pin the highlighted form of the class (its kernels only, or that very kernel node)."""
        target = self._pin_target()
        if target is not None:
            cid, n = target
            self._what_if(lambda: self.session.pin(cid, n), f"pinned c{cid} to n{n}")

    def action_pin_device(self) -> None:
        """Pin the class to the device of the highlighted kernel form."""
        target = self._pin_target()
        if target is None:
            return
        cid, n = target
        eg = self.shown_egraph()
        param = eg.node(n).param if eg is not None else None
        if not isinstance(param, KernelNode):
            self.notify("highlight a kernel form to pin its device", severity="warning")
            return
        self._what_if(lambda: self.session.pin(cid, param.device), f"pinned c{cid} to {param.device}")

    def _pin_target(self) -> tuple[ClassId, NodeId] | None:
        detail = self.query_one(ClassDetail)
        n = detail.highlighted_form()
        if n is None or detail.cid is None:
            self.notify("highlight a form of a class to pin it", severity="warning")
            return None
        if not Stage(self.viewed).shows(Stage.KERNELIZED):
            self.notify("pins apply to the kernelized e-graph: switch to a later stage", severity="warning")
            return None
        return detail.cid, n

    def action_unpin(self) -> None:
        cid = self.query_one(ClassDetail).cid
        if cid is None or cid not in self.session.pins:
            self.notify("this class has no pin", severity="warning")
            return
        self._what_if(lambda: self.session.unpin(cid), f"unpinned c{cid}")

    def _what_if(self, change: Callable[[], WhatIf | None], what: str) -> None:
        try:
            whatif = change()
        except Exception as e:  # an impossible pin (model.PinError) is refused, never a crash
            self.notify(str(e), title="Pin", severity="error", markup=False)
            return
        real = self.session.compilation.plan if self.session.compilation is not None else None
        self.notify(model.pin_text(what, whatif, real.predicted if real is not None else math.nan), title="What-if",
                    markup=False)
        if self.follow or not Stage(self.viewed).shows(Stage.PLAN):
            self.viewed = self.session.done[-1]
        self.refresh_panes(refill=True)

    def action_timeline(self) -> None:
        """Show the timeline of the viewed stage's plan (and of the pinned what-if) on its own screen."""
        sections = self.session.timelines(self.viewed)
        if sections:
            self.app.push_screen(TimelineScreen(sections, self.session.short()))
        else:
            self.notify("no plan at this stage yet (] moves on to the plan)", severity="warning")

"""The explorer app: a Textual debugger over every stage of a compilation.

The compilation runs in a thread worker (``compile_stages``); each stage that
arrives updates the stage bar and, while the user has not picked a stage, every
pane.  All panes show the stage picked in the stage bar.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import events, on, work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import Footer, Header, Input, Static, TabbedContent, TabPane
from textual.worker import get_current_worker

from engine import Program, pipeline, units
from engine.devices import Device, discover
from engine.egraph.egraph import ClassId, EGraph
from engine.export import ExportResult, export_stage
from engine.fileio import write_atomic
from engine.kernel.attach import KernelNode
from engine.kernel.schedule import Variant
from engine.pipeline import Compilation, Options, compile_stages
from engine.plan import Launch
from engine.tuning import Progress, TuneResult
from zyx_explorer import model, outputs
from zyx_explorer.commands import ExplorerCommands
from zyx_explorer.compile_cmd import progress_text
from zyx_explorer.screens.help import HelpScreen
from zyx_explorer.screens.timeline import TimelineScreen
from zyx_explorer.widgets.class_detail import ClassDetail
from zyx_explorer.widgets.classes_table import ClassesTable
from zyx_explorer.widgets.costs_table import LEGEND, CostsTable
from zyx_explorer.widgets.line_table import LineTable
from zyx_explorer.widgets.plan_table import PlanTable
from zyx_explorer.widgets.program_table import ProgramTable
from zyx_explorer.widgets.results_view import ResultsView
from zyx_explorer.widgets.rewrites_table import RewritesTable
from zyx_explorer.widgets.source_view import SourceView
from zyx_explorer.widgets.stage_bar import StageBar
from zyx_explorer.widgets.tensor_detail import TensorDetail
from zyx_explorer.widgets.timeline_view import TimelineView
from zyx_explorer.widgets.variants_table import VariantsTable

TABS = ("program", "classes", "costs", "plan", "source", "rewrites", "results")
TABLES = {"program": "#program-table", "classes": "#classes", "costs": "#costs", "plan": "#plan", "rewrites": "#rewrites"}
FOCUS = {**TABLES, "source": "#source-scroll", "results": "#results-scroll"}
"""What each tab focuses when shown (a widget outside it must not keep the focus: the tab would switch back)."""
STAGE, ITERATION = Binding.Group("Stage", compact=True), Binding.Group("Iteration", compact=True)
"""Key pairs shown as one footer entry (``[]`` Stage), so that the footer fits 80 columns."""
NARROW = 120
"""Below this many columns the footer is compact."""


class StageDone(Message):
    def __init__(self, stage: str) -> None:
        super().__init__()
        self.stage = stage


class TuneProgress(Message):
    """One more variant timed: what the tuner is at, as text."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


class CompileFailed(Message):
    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class ExplorerApp(App):
    """Stage bar, seven panes (program, classes + detail, costs, plan, source, rewrites, results), footer."""

    CSS_PATH = "explorer.tcss"
    AUTO_FOCUS = "#program-table"
    TITLE = "zyx-explore"
    COMMANDS = App.COMMANDS | {ExplorerCommands}
    BINDINGS: ClassVar = [
        Binding("q", "quit", "Quit", id="quit", tooltip="Quit"),
        Binding("question_mark", "help", "Help", id="help", tooltip="Help: every key and pane"),
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
        Binding("r", "run_what_if", "Run what-if", show=False, id="run-what-if",
                tooltip="Run the pinned plan beside the real one, verify it, measure the delta"),
        Binding("T", "timeline", "Timeline", show=False, id="timeline",
                tooltip="Where the time went: the plan's launches and copies per device, memory per pool"),
        Binding("e", "export", "Export", show=False, id="export", tooltip="Export the stage (Graphviz DOT + SVG)"),
        Binding("ctrl+s", "screenshot_svg", "Screenshot", show=False, id="screenshot", tooltip="Save a screenshot (SVG)"),
        Binding("c", "cancel_tuning", "Stop tuning", id="cancel-tuning",
                tooltip="Stop tuning (the plan uses what was timed)"),
        Binding("escape", "close_filter", "Close filter", show=False, id="close-filter", tooltip="Close the filter"),
    ]
    """Every key; ``tooltip`` is its long name, which the help screen and the command palette show."""

    def __init__(self, program: Program, source: Path, screenshot_dir: Path | None = None,
                 devices: list[Device] | None = None, options: Options | None = None) -> None:
        super().__init__()
        self.program = program
        self.source = source
        self.screenshot_dir = screenshot_dir or Path.cwd()
        self.devices = devices
        self.options = options or Options()
        self.prims = program.lower()
        self.session = model.Session(program)
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
        self.activity: str | None = None
        """What the tuner is at (shown in the stage bar while tuning)."""
        self.tuning_cancelled = False
        self.running = True
        self._keys: dict[str, tuple] = {}
        """What each pane was last filled from (see ``_changed``)."""
        self.clock = time.perf_counter
        """Times the stages; snapshot tests freeze it."""

    # -- layout ----------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header()
        yield StageBar(id="stages")
        with TabbedContent(initial="program", id="tabs"):
            with TabPane("1 Program", id="program"), Horizontal():
                yield ProgramTable(self.program, id="program-table")
                with VerticalScroll(id="detail-scroll"):
                    yield TensorDetail(self.program, self.prims, id="tensor")
            with TabPane("2 Classes", id="classes-tab"), Horizontal():
                yield ClassesTable(id="classes")
                yield ClassDetail(id="class-detail")
            with TabPane("3 Costs", id="costs-tab"), Vertical():
                yield Static(LEGEND, id="costs-legend")
                yield CostsTable(id="costs")
                yield Static(id="variants-head")
                yield VariantsTable(id="variants")
            with TabPane("4 Plan", id="plan-tab"), Vertical():
                yield PlanTable(id="plan")
                yield Static(id="plan-summary")
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
        name = self.program.name or self.source.name
        self.sub_title = f"{name}: {model.plural(len(self.program.nodes), 'node')}, {model.plural(len(self.prims.nodes), 'primitive')}"
        first = self.program.inputs[0].name if self.program.inputs else self.program.nodes[0].id
        self._show_tensor(first)
        self.query_one(ClassesTable).follow = self._class_highlighted
        self._refresh()
        self.set_interval(0.5, self._tick)
        self.compile()

    def _tick(self) -> None:
        """While tuning live, the costs pane follows what the worker has measured (a kernel's result lands after
        its last progress message)."""
        if self.live:
            self._show_costs()

    # -- the compilation -------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="compile", exit_on_error=False)
    def compile(self) -> None:
        """Run every stage in this thread; each one is announced with a StageDone message."""
        worker = get_current_worker()
        try:
            devices = self.devices
            if devices is None:
                notes: list[str] = []
                try:
                    devices = discover(notes=notes)
                    for note in notes:  # e.g. no C compiler: no native device
                        self.call_from_thread(self.notify, note, title="Devices", severity="warning", markup=False)
                except Exception as e:  # no OpenCL runtime: numpy and BLAS only
                    self.call_from_thread(self.notify, f"OpenCL unavailable: {e}", title="Devices", severity="warning",
                                          markup=False)
                    devices = discover(opencl=False)
            began = self.clock()
            stages = compile_stages(self.program, devices, self.options, progress=self._tune_progress,
                                    cancel=lambda: self.tuning_cancelled or worker.is_cancelled)  # quitting stops it
            for c in stages:
                self.session.record(c, self.clock() - began)
                self.post_message(StageDone(c.stage))
                if worker.is_cancelled:
                    return
        except Exception as e:  # shown as a notification; the stages done so far stay usable
            self.post_message(CompileFailed(f"{type(e).__name__}: {e}"))
            return
        self.post_message(StageDone(""))

    def _tune_progress(self, p: Progress) -> None:
        """Called in the worker thread before and after each variant the tuner times."""
        c = self.session.compilation
        kz = c.kernelization if c is not None else None
        names = kz.names_by_key() if kz is not None else {}
        self.post_message(TuneProgress(f"tuning {progress_text(p, names, self.session.short())}  (c stops)"))

    @on(TuneProgress)
    def _tuning(self, message: TuneProgress) -> None:
        if self.tuning_now:
            self.activity = "stopping the tuner…" if self.tuning_cancelled else message.text
            self._show_stage_bar()
            self._show_costs()  # live: a kernel the tuner finished shows its measured time at once

    @on(StageDone)
    def _stage_done(self, message: StageDone) -> None:
        if message.stage in ("kernelized", "tuned"):
            self.activity = None
            self.refresh_bindings()
        if not message.stage:
            self.running = False
            self._report_end()
        elif self.follow:
            self.viewed = message.stage
            self.iteration = None
        self._refresh()

    def _report_end(self) -> None:
        """Notify of a cancelled tuning and of the problems the compilation worked around."""
        c = self.session.compilation
        if c is None:
            return
        if self.viewed != self.session.done[-1]:
            self.notify(f"compiled to {self.session.done[-1]}; the panes still show {self.viewed} (] moves on)",
                        title="Done")
        if self.tuning_cancelled:
            self.notify(f"tuning stopped: {model.plural(len(c.tuning), 'kernel')} timed, the others use predictions", title="Tuning")
        if c.problems:
            self.notify("\n".join(c.problems), title=f"{model.plural(len(c.problems), 'problem')} worked around", severity="warning",
                        timeout=10, markup=False)

    @on(CompileFailed)
    def _failed(self, message: CompileFailed) -> None:
        self.running = False
        self.session.failed = message.error
        self.notify(message.error, title="Compilation failed", severity="error", timeout=10, markup=False)
        self._refresh()

    @property
    def compiled(self) -> bool:
        """True once the worker has finished (every stage done, or failed)."""
        return not self.running

    # -- showing a stage -------------------------------------------------------------------

    def shown_egraph(self) -> EGraph | None:
        return self.session.egraph(self.viewed, self.iteration)

    def _refresh(self) -> None:
        s, stage = self.session, self.viewed
        self._show_stage_bar()
        eg = self.shown_egraph()
        extraction = s.extraction(stage)
        table = self.query_one(ClassesTable)
        if self._changed("classes", eg, extraction, tuple(s.pins.items())):
            if eg is None:
                table.set_rows([])
            else:
                keep = eg.find(self.selected) if self.selected is not None and self.selected < eg.num_added else None
                table.set_rows(s.class_rows(eg, extraction), keep=keep)
                if self.selected is None:
                    self.selected = table.current_key  # type: ignore[assignment]
        self._show_detail()
        if isinstance(key := self.query_one(ProgramTable).current_key, str):
            self._show_tensor(key)
        self._show_costs()
        self._show_plan()
        self._show_rewrites()
        self._show_source()
        self.query_one(ResultsView).show(s.current() if s.compilation else None)

    def _changed(self, pane: str, *sources: object) -> bool:
        """Whether ``pane`` is to be refilled: its sources differ from last time (objects by identity, plain
        values by equality); a big e-graph's rows take a while to rebuild."""
        old = self._keys.get(pane)
        plain = (int, float, str, tuple, type(None))
        if old is not None and len(old) == len(sources) and all(
                a == b if isinstance(a, plain) else a is b for a, b in zip(old, sources)):
            return False
        self._keys[pane] = sources
        return True

    def _show_stage_bar(self) -> None:
        s = self.session
        notes = {"tuned": "(stopped)"} if self.tuning_cancelled and "tuned" in s.done else {}
        self.query_one(StageBar).show(s.done, self.viewed, s.seconds, self.running, self.iteration, s.iterations(),
                                      s.failed, self.activity, notes)

    def _show_detail(self) -> None:
        detail = self.query_one(ClassDetail)
        eg = self.shown_egraph()
        if eg is None or self.selected is None or self.selected >= eg.num_added:
            detail.clear("no e-graph at this stage yet" if eg is None else "no class selected")
            return
        c = self.session.compilation
        kz = c.kernelization if c is not None and model.reached(self.viewed, model.KERNELIZED) else None
        current = self.session.current()
        detail.show(eg, self.selected, self.session.extraction(self.viewed), self.session.kernel_times(self.viewed),
                    kz, self.session.pins, self.session.why(self.viewed, self.selected),
                    current.measured if current is not None else lambda kn: False, self.session.short(),
                    lambda cand_id: self.session.kernel_lines(self.viewed, cand_id))

    @property
    def live(self) -> bool:
        """Whether the costs pane shows the tuner's results as they come: it is tuning and the user follows."""
        return self.tuning_now and self.follow

    def _cost_sources(self) -> tuple[Mapping[KernelNode, float], Mapping[KernelNode, TuneResult]]:
        """Kernel times and tuning results the costs pane shows: those of the viewed stage, or, while ``live``, a
        copy of what the tuner has measured so far (the rest predicted)."""
        c = self.session.compilation
        if self.live and c is not None:
            return dict(c.kernel_times), dict(c.tuning)
        return self.session.kernel_times(self.viewed), self.session.tuning(self.viewed)

    def _show_costs(self) -> None:
        table, c = self.query_one(CostsTable), self.session.current()
        times, tuning = self._cost_sources()
        extraction = self.session.extraction(self.viewed)
        estimated = not self.live and not model.reached(self.viewed, model.TUNED)
        if not self._changed("costs", c, tuple(times.values()) if self.live else times, extraction, len(tuning),
                             estimated):
            return
        if c is None or not times:
            table.set_rows([])
        else:
            short = self.session.short()
            rows = model.cost_rows(c, times, extraction, tuning, estimated)
            table.for_devices([short[d.name] for d in c.devices], max((len(r.cells[0]) for r in rows), default=0))
            legend = units.device_legend(short)
            live = (f"tuning: {model.plural(len(tuning), 'kernel')} measured so far, the others predicted\n"
                    if self.live else "")
            self.query_one("#costs-legend", Static).update(live + LEGEND + (f"\n{legend}" if legend else ""))
            table.set_rows(rows)
        self._show_variants()

    def _launched(self, cand_id: str) -> tuple[str, Variant] | None:
        """(device, variant) the plan launches candidate ``cand_id`` with (else its fastest device's)."""
        c, stage = self.session.current(), self.viewed
        if c is None or c.egraph is None:
            return None
        chosen = model.chosen_kernels(c.egraph, self.session.extraction(stage))
        return model.launched_variant(cand_id, self.session.kernel_times(stage), chosen,
                                      lambda kn: self.session.variant(stage, kn))

    def _show_variants(self) -> None:
        """The variants of the kernel under the costs cursor, on every device."""
        table, head = self.query_one(VariantsTable), self.query_one("#variants-head", Static)
        cand_id = self.query_one(CostsTable).current_key
        cand = self.session.candidate(cand_id) if isinstance(cand_id, str) else None
        if cand is None:
            table.set_rows([])
            head.update("variants: highlight a kernel above")
            return
        stage = self.viewed
        times, tuning = self._cost_sources()
        c = self.session.compilation
        rows = model.variant_rows(cand_id, times, tuning, lambda kn: self.session.variant(stage, kn),
                                  self._launched(cand_id), self.session.short(), c.skipped if c is not None else None)
        table.set_rows(rows)
        tuned = [r for kn, r in tuning.items() if kn.candidate == cand_id]
        text = f"variants of {self.session.kernel_name(cand_id)}: {len(rows)} on {model.plural(len({r.key[0] for r in rows}), 'device')}"
        if tuned:
            short = self.session.short()
            text += " (" + ", ".join(f"{short.get(r.device, r.device)} cache {r.cache}" for r in tuned) + ")"
        elif not model.reached(stage, model.TUNED):
            text += " (before tuning: default variants, nominal estimates)"
        else:
            text += " (not tuned: the cost model's suggestion)"
        head.update(Text(text + "   * launched  + tuner's pick   tab: variants, enter: source"))

    def _show_plan(self) -> None:
        plan = self.session.plan(self.viewed)
        summary = self.query_one("#plan-summary", Static)
        c = self.session.current()
        if plan is None or c is None:
            self.query_one(PlanTable).set_rows([])
            summary.update("no plan at this stage")
            return
        measured = c.execution.step_times if c.execution is not None and model.reached(self.viewed, "executed") else None
        if self._changed("plan", plan, measured):
            self.query_one(PlanTable).set_rows(model.plan_rows(plan, measured, self.session.short()))
        text = (f"{model.plural(len(plan.steps), 'step')}, {model.plural(len(plan.launches()), 'launch', 'launches')} "
                f"({plan.coverage()}); predicted {model.seconds_text(plan.predicted)}"
                f"; measured {model.seconds_text(sum(measured)) if measured else '(not run)'}"
                f"; peak memory {model.bytes_text(plan.peak_bytes)}")
        if self.session.pins:
            run = self.session.whatif_run
            text += (f"; pinned: {', '.join(f'c{c}=n{n}' for c, n in self.session.pins.items())} (what-if: "
                     f"{model.what_if_text(run) if run else 'not run, r runs it'})")
        summary.update(text)

    def _show_rewrites(self) -> None:
        c, eg = self.session.compilation, self.session.egraph("saturated")
        upto = self.iteration if self.viewed == "saturated" else None
        if self._changed("rewrites", c, eg, upto):
            self.query_one(RewritesTable).set_rows(model.rewrite_rows(eg, c, upto) if c is not None and eg else [])

    def _show_source(self) -> None:
        """Fill the source pane, only while it is shown (generating and highlighting C is not free)."""
        if self._active_tab() != "source":
            return
        cand = self.session.candidate(self.kernel) if self.kernel else None
        current = self.session.current()
        times = {k.device: (t, current is not None and current.measured(k))
                 for k, t in self.session.kernel_times(self.viewed).items() if k.candidate == self.kernel}
        theme = "monokai" if self.current_theme.dark else "default"
        launched = self._launched(self.kernel) if self.kernel else None
        c = self.session.compilation
        devices = {d.name: d for d in c.devices} if c is not None else {}
        kernel = self.kernel or ""
        self.query_one(SourceView).show(self.kernel, cand, times, theme, self.variant or launched, launched, devices,
                                        self.session.short(), self.session.kernel_name(kernel),
                                        self.session.tensors_of(kernel), self.session.kernel_lines(self.viewed, kernel))

    def show_kernel(self, cand_id: str, variant: tuple[str, Variant] | None = None) -> None:
        """Show candidate ``cand_id`` in the source pane (``variant``: which one; None: the launched one)."""
        self.kernel, self.variant = cand_id, variant
        self._show_source()

    # -- events ----------------------------------------------------------------------------

    @on(TabbedContent.TabActivated)
    def _tab_shown(self, event: TabbedContent.TabActivated) -> None:
        self._show_source()

    @on(LineTable.Highlighted, "#program-table")
    def _show_row(self, event: LineTable.Highlighted) -> None:
        self._show_tensor(str(event.key))

    def _show_tensor(self, tensor: str) -> None:
        """The tensor detail, with where the tensor went as of the viewed stage."""
        where = self.session.locate(self.viewed, tensor)
        plan = self.session.plan(self.viewed)
        self.query_one(TensorDetail).show(tensor, model.where_text(where, plan) if where is not None else "")

    @on(LineTable.Selected, "#program-table")
    def _tensor_selected(self, event: LineTable.Selected) -> None:
        """Enter on a tensor: its value class, the plan's kernel that computes it and that step (or the Allocate
        of an input), as far as the viewed stage goes."""
        tensor = str(event.key)
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

    def _context_kernel(self) -> str | None:
        """The candidate the active pane points at: the plan step's, the costs row's, the source pane's or the
        highlighted kernel form's."""
        tab = self._active_tab()
        if tab == "plan":
            plan, key = self.session.plan(self.viewed), self.query_one(PlanTable).current_key
            step = plan.steps[key] if plan is not None and isinstance(key, int) else None  # type: ignore[index]
            return step.candidate if isinstance(step, Launch) else None
        if tab == "costs":
            key = self.query_one(CostsTable).current_key
            return key if isinstance(key, str) else None
        if tab == "classes":
            n, eg = self.query_one(ClassDetail).highlighted_form(), self.shown_egraph()
            param = eg.node(n).param if n is not None and eg is not None else None
            return param.candidate if isinstance(param, KernelNode) else None
        return self.kernel if tab == "source" else None

    def action_tensors(self) -> None:
        """Back from a kernel to the program tensors it computes: the program pane, on the first of them."""
        cand_id = self._context_kernel()
        tensors = self.session.tensors_of(cand_id) if cand_id else []
        if not tensors:
            self.notify("highlight a kernel (a Launch step, a costs row, a kernel form or the source pane's)",
                        severity="warning")
            return
        self.notify(f"{self.session.kernel_name(cand_id)} computes {', '.join(tensors)}",  # type: ignore[arg-type]
                    title="Program tensors", markup=False)
        self.action_tab("program")
        self.query_one(ProgramTable).move_to(tensors[0])
        self._show_tensor(tensors[0])

    def _class_highlighted(self, cid: ClassId) -> None:
        """The classes table's cursor moved (called within the move, so the detail is painted with it)."""
        if cid != self.selected:
            self.selected = cid
            self._show_detail()

    @on(LineTable.Selected, "#classes")
    def _class_selected(self, event: LineTable.Selected) -> None:
        self.query_one(ClassDetail).forms.focus()

    @on(ClassDetail.Follow)
    def _follow(self, message: ClassDetail.Follow) -> None:
        self.select_class(message.cid)

    @on(ClassDetail.FormHighlighted)
    def _form_highlighted(self, message: ClassDetail.FormHighlighted) -> None:
        eg = self.shown_egraph()
        if eg is not None and eg.node(message.node).op == "kernel":
            kn = eg.node(message.node).param
            self.show_kernel(kn.candidate, (kn.device, self.session.variant(self.viewed, kn)))  # type: ignore[attr-defined,arg-type]

    @on(LineTable.Highlighted, "#costs")
    def _cost_highlighted(self, event: LineTable.Highlighted) -> None:
        self._show_variants()
        if event.table.has_focus:  # not when a refresh moves the cursor
            self.show_kernel(event.key)  # type: ignore[arg-type]

    @on(LineTable.Selected, "#costs")
    def _cost_selected(self, event: LineTable.Selected) -> None:
        self.show_kernel(event.key)  # type: ignore[arg-type]
        self.action_tab("source")

    @on(LineTable.Highlighted, "#variants")
    def _variant_highlighted(self, event: LineTable.Highlighted) -> None:
        cand_id = self.query_one(CostsTable).current_key
        if event.table.has_focus and isinstance(cand_id, str):
            self.show_kernel(cand_id, event.key)  # type: ignore[arg-type]

    @on(LineTable.Selected, "#variants")
    def _variant_selected(self, event: LineTable.Selected) -> None:
        cand_id = self.query_one(CostsTable).current_key
        if isinstance(cand_id, str):
            self.show_kernel(cand_id, event.key)  # type: ignore[arg-type]
            self.action_tab("source")

    @on(LineTable.Highlighted, "#plan")
    def _step_highlighted(self, event: LineTable.Highlighted) -> None:
        plan, extraction = self.session.plan(self.viewed), self.session.extraction(self.viewed)
        c = self.session.current()
        if plan is None or extraction is None or c is None or c.egraph is None:
            return
        step = plan.steps[event.key]  # type: ignore[index]
        if isinstance(step, Launch) and step.outputs[0] in extraction.choices:
            kn = c.egraph.node(extraction.choices[step.outputs[0]].node).param
            self.show_kernel(kn.candidate, (step.device, step.variant))  # type: ignore[attr-defined]

    @on(LineTable.Selected, "#plan")
    def _step_selected(self, event: LineTable.Selected) -> None:
        plan = self.session.plan(self.viewed)
        if plan is not None:
            self.select_class(model.step_class(plan.steps[event.key]), tab=True)  # type: ignore[index]

    @on(LineTable.Selected, "#rewrites")
    def _rewrite_selected(self, event: LineTable.Selected) -> None:
        c = self.session.compilation
        it, j = event.key  # type: ignore[misc]
        app = c.saturation.iterations[it - 1].applications[j]  # type: ignore[union-attr]
        if self.viewed != "saturated" and not model.reached(self.viewed, "saturated"):
            self.viewed, self.follow, self.iteration = "saturated", False, None
            self._refresh()
        self.select_class(app.merged[0] if app.merged else app.node, tab=True)

    @on(Input.Changed, "#filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        table = self._active_table()
        if table is not None:
            table.set_filter(event.value)

    @on(Input.Submitted, "#filter")
    def _filter_submitted(self, event: Input.Submitted) -> None:
        self._hide_filter()

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
            self.query_one("#filter", Input).value = ""
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
            self._refresh()

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
        self._refresh()

    def action_filter(self) -> None:
        if self._active_table() is None:
            self.action_tab("classes")
        box = self.query_one("#filter", Input)
        box.value = self._active_table().query_text  # type: ignore[union-attr]
        box.display = True
        box.focus()

    def action_close_filter(self) -> None:
        box = self.query_one("#filter", Input)
        if box.has_focus:
            box.value = ""
            self._hide_filter()

    def _hide_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.display = False
        table = self._active_table()
        if table is not None:
            table.focus()

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
        detail = self.query_one(ClassDetail)
        n = detail.mark()
        self._show_detail()
        if n is not None:
            self.notify(f"marked n{n}: x explains the highlighted form against it")

    def action_explain(self) -> None:
        detail = self.query_one(ClassDetail)
        n = detail.highlighted_form()
        if n is None or detail.egraph is None:
            self.notify("highlight a form in the class detail first", severity="warning")
            return
        other = detail.marked if detail.marked is not None else min(detail.chosen, default=detail.egraph.eclass(n).nodes[0])
        detail.explain_forms(other, n)

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
        op, param, _ = self.shown_egraph().node(n)  # type: ignore[union-attr]
        if op != "kernel":
            self.notify("highlight a kernel form to pin its device", severity="warning")
            return
        self._what_if(lambda: self.session.pin(cid, param.device), f"pinned c{cid} to {param.device}")  # type: ignore[attr-defined]

    def _pin_target(self) -> tuple[ClassId, int] | None:
        detail = self.query_one(ClassDetail)
        n = detail.highlighted_form()
        if n is None or detail.cid is None:
            self.notify("highlight a form of a class to pin it", severity="warning")
            return None
        if not model.reached(self.viewed, model.KERNELIZED):
            self.notify("pins apply to the kernelized e-graph: switch to a later stage", severity="warning")
            return None
        return detail.cid, n

    def action_unpin(self) -> None:
        cid = self.query_one(ClassDetail).cid
        if cid is None or cid not in self.session.pins:
            self.notify("this class has no pin", severity="warning")
            return
        self._what_if(lambda: self.session.unpin(cid), f"unpinned c{cid}")

    def _what_if(self, change, what: str) -> None:
        try:
            before, after = change()
        except (model.PinError, Exception) as e:  # an impossible pin is refused, never a crash
            self.notify(str(e), title="Pin", severity="error", markup=False)
            return
        delta = after - before
        sign = "+" if delta >= 0 else "-"
        self.notify(f"{what}: predicted {model.seconds_text(before)} -> {model.seconds_text(after)} "
                    f"({sign}{model.seconds_text(abs(delta)) if not math.isnan(delta) else '?'})", title="What-if",
                    markup=False)
        if self.follow or not model.reached(self.viewed, model.PLAN):
            self.viewed = self.session.done[-1]
        self._keys.clear()
        self._refresh()

    def action_run_what_if(self) -> None:
        """Measure the pinned plan against the real one in a worker (the UI stays live)."""
        whatif = self.session.whatif
        if whatif is None:
            self.notify("pin a form or device first (p, d); r then runs that plan", severity="warning")
        elif not self.compiled:
            self.notify("wait for the compilation to finish: its devices are busy", severity="warning")
        else:
            self.notify("running the pinned plan and the real one…", title="What-if")
            self._run_what_if(whatif)

    @work(thread=True, exclusive=True, group="what-if", exit_on_error=False)
    def _run_what_if(self, whatif: Compilation) -> None:
        try:
            run = pipeline.run_what_if(self.session.compilation, whatif)  # type: ignore[arg-type]
        except Exception as e:  # a failing step is shown, never raised
            self.call_from_thread(self.notify, f"{type(e).__name__}: {e}", title="What-if run failed",
                                  severity="error", markup=False)
            return
        self.call_from_thread(self._what_if_ran, whatif, run)

    def _what_if_ran(self, whatif: Compilation, run: pipeline.WhatIfRun) -> None:
        if self.session.ran(whatif, run):  # else the pins changed while it ran
            self.notify(model.what_if_text(run), title="What-if run", markup=False,
                        severity="information" if run.verification.ok else "error", timeout=10)
            self._keys.clear()
            self._refresh()
            if isinstance(self.screen, TimelineScreen):  # shown while it ran: the what-if's lanes are measured now
                self.screen.query_one(TimelineView).show(self.session.timelines(self.viewed))

    def action_timeline(self) -> None:
        """Show the timeline of the viewed stage's plan (and of the pinned what-if) on its own screen."""
        sections = self.session.timelines(self.viewed)
        if sections:
            self.push_screen(TimelineScreen(sections, self.session.short()))
        else:
            self.notify("no plan at this stage yet (] moves on to the plan)", severity="warning")

    def action_export(self) -> None:
        """Export the viewed stage (``<stage>.dot`` and ``.svg``) into the program's folder (``outputs``)."""
        if self.session.compilation is not None:
            self._export()

    @property
    def output_dir(self) -> Path:
        """The folder of this program's exports and screenshots, under ``screenshot_dir``."""
        return outputs.program_dir(self.screenshot_dir, self.program.name or self.source.stem)

    @work(thread=True, group="export", exit_on_error=False)
    def _export(self) -> None:
        c, stage, folder = self.session.current(), self.viewed, self.output_dir
        result = ExportResult()
        try:
            folder.mkdir(parents=True, exist_ok=True)
            stem = outputs.free_stem(folder, stage, (".dot", ".svg"))
            paths = export_stage(c, stage, folder, "svg", result=result, stem=stem)
        except Exception as e:  # rendering problems are shown, never raised
            self.call_from_thread(self.notify, f"{type(e).__name__}: {e}", title="Export failed", severity="error",
                                  markup=False)
            return
        notes = result.notes + ([f"{stage}.svg exists: kept, this export is {stem}"] if stem != stage else [])
        message = (f"wrote {', '.join(p.name for p in paths)} in {folder}" if paths else "nothing written") + (
            f" ({'; '.join(notes)})" if notes else "")
        self.call_from_thread(self.notify, message, title="Export", severity="information" if paths else "warning",
                              markup=False)

    @property
    def tuning_now(self) -> bool:
        """Whether the tuned stage is running (and can still be stopped)."""
        return self.running and "kernelized" in self.session.done and "tuned" not in self.session.done

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """``c`` (stop tuning) shows in the footer only while tuning; a screen over the panes (the timeline, help)
        keeps only the keys that mean something there."""
        covered = any(isinstance(s, TimelineScreen | HelpScreen) for s in self.screen_stack)
        if covered and action not in ("quit", "help", "screenshot_svg", "run_what_if"):
            return False
        return self.tuning_now and not self.tuning_cancelled if action == "cancel_tuning" else True

    def action_cancel_tuning(self) -> None:
        """Stop the autotuner: the plan then uses the times measured so far and predictions for the rest."""
        self.tuning_cancelled = True
        self.refresh_bindings()
        self.activity = "stopping the tuner…"
        self._show_stage_bar()

    def action_help(self) -> None:
        keys = [(self.get_key_display(b), b.tooltip) for b in self.BINDINGS if isinstance(b, Binding)]
        keys += [("enter", "Follow a child link / explain a form / select a row / a program tensor: its class, kernel, "
                           "plan step"),
                 ("tab", "Next widget (costs: the matrix, then the variants)"), ("ctrl+p", "Command palette")]
        self.push_screen(HelpScreen(keys))

    def get_system_commands(self, screen) -> Iterable[SystemCommand]:
        """Textual's own commands, less those the explorer has its own binding for (its Screenshot and Quit)."""
        ours = {b.description for b in self.BINDINGS}
        yield from (c for c in super().get_system_commands(screen) if c.title not in ours)

    def action_screenshot_svg(self) -> None:
        """Save an SVG screenshot of the screen as it is, in the program's folder, never over an earlier one."""
        folder = self.output_dir
        try:
            folder.mkdir(parents=True, exist_ok=True)
            target = folder / f"{outputs.free_stem(folder, f'screenshot-{self._active_tab()}-{self.viewed}', ('.svg',))}.svg"
            write_atomic(target, self.export_screenshot())
        except OSError as e:
            self.notify(f"cannot write in {folder}: {e}", title="Screenshot", severity="error", markup=False)
            return
        self.notify(f"saved {target}", title="Screenshot", markup=False)

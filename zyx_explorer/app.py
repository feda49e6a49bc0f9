"""The explorer app: a Textual debugger over every stage of a compilation.

The app runs the workers (the compilation, whose stages arrive one by one, the what-if run, exports) and the
keys that work on every screen; the main screen (``screens/main.py``) lays the panes out and shows each stage
that arrives, until the user picks one.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import ClassVar

from textual import on, work
from textual.app import App, SystemCommand
from textual.binding import BindingType
from textual.screen import Screen
from textual.worker import get_current_worker

from engine import (
    Compilation,
    Device,
    ExportResult,
    Options,
    Program,
    Progress,
    WhatIfRun,
    compile_stages,
    discover,
    export_stage,
    run_what_if,
    write_atomic,
)
from zyx_explorer import model, outputs
from zyx_explorer.commands import ExplorerCommands
from zyx_explorer.compile_cmd import progress_text
from zyx_explorer.messages import CompileFailed, StageDone, TuneProgress
from zyx_explorer.screens.help import HelpScreen
from zyx_explorer.screens.main import KEYS, NEXT_WIDGET, MainScreen, keys
from zyx_explorer.screens.timeline import TimelineScreen
from zyx_explorer.widgets.cursor_view import CursorView
from zyx_explorer.widgets.timeline_view import TimelineView

GLOBAL_KEYS = keys("quit", "help", "run-what-if", "screenshot")
"""The keys that work on every screen (the main screen shows them among the others: ``KEYS``)."""
EVERYWHERE = frozenset(b.action.removeprefix("app.") for b in GLOBAL_KEYS)


class ExplorerApp(App[None]):
    """The compilation and its session; the main screen shows them."""

    CSS_PATH = "explorer.tcss"
    TITLE = "zyx-explore"
    COMMANDS = App.COMMANDS | {ExplorerCommands}
    BINDINGS: ClassVar[list[BindingType]] = [*GLOBAL_KEYS]

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
        self.main = MainScreen(program, self.prims, self.session)
        self.activity: str | None = None
        """What the tuner is at (shown in the stage bar while tuning)."""
        self.tuning_cancelled = False
        self.running = True
        self.clock = time.perf_counter
        """Times the stages; snapshot tests freeze it."""

    def get_default_screen(self) -> Screen:
        return self.main

    def on_mount(self) -> None:
        name = self.program.name or self.source.name
        self.sub_title = f"{name}: {model.plural(len(self.program.nodes), 'node')}, {model.plural(len(self.prims.nodes), 'primitive')}"

    def on_ready(self) -> None:
        """The main screen is laid out (the stages that arrive are shown in its panes): compile."""
        self.compile()

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
            self.main.show_stage_bar()
            self.main.show_costs()  # live: a kernel the tuner finished shows its measured time at once

    @on(StageDone)
    def _stage_done(self, message: StageDone) -> None:
        if message.stage in ("kernelized", "tuned"):
            self.activity = None
            self.refresh_bindings()
        if not message.stage:
            self.running = False
            self._report_end()
        self.main.stage_done(message.stage)

    def _report_end(self) -> None:
        """Notify of a cancelled tuning and of the problems the compilation worked around."""
        c = self.session.compilation
        if c is None:
            return
        viewed = self.main.viewed
        if viewed != self.session.done[-1]:
            self.notify(f"compiled to {self.session.done[-1]}; the panes still show {viewed} (] moves on)",
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
        self.main.refresh_panes()

    @property
    def compiled(self) -> bool:
        """True once the worker has finished (every stage done, or failed)."""
        return not self.running

    @property
    def tuning_now(self) -> bool:
        """Whether the tuned stage is running (and can still be stopped)."""
        return self.running and "kernelized" in self.session.done and "tuned" not in self.session.done

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """``c`` (stop tuning) shows in the footer only while tuning; a screen over the panes (the timeline, help)
        keeps only the keys that work everywhere."""
        covered = any(isinstance(s, TimelineScreen | HelpScreen) for s in self.screen_stack)
        if covered and action not in EVERYWHERE:
            return False
        return self.tuning_now and not self.tuning_cancelled if action == "cancel_tuning" else True

    def action_cancel_tuning(self) -> None:
        """Stop the autotuner: the plan then uses the times measured so far and predictions for the rest."""
        self.tuning_cancelled = True
        self.refresh_bindings()
        self.activity = "stopping the tuner…"
        self.main.show_stage_bar()

    # -- what-if ---------------------------------------------------------------------------

    def action_run_what_if(self) -> None:
        """Measure the pinned plan against the real one in a worker (the UI stays live)."""
        base, whatif = self.session.compilation, self.session.whatif
        if base is None or whatif is None:
            self.notify("pin a form or device first (p, d); r then runs that plan", severity="warning")
        elif not self.compiled:
            self.notify("wait for the compilation to finish: its devices are busy", severity="warning")
        else:
            self.notify("running the pinned plan and the real one…", title="What-if")
            self._run_what_if(base, whatif)

    @work(thread=True, exclusive=True, group="what-if", exit_on_error=False)
    def _run_what_if(self, base: Compilation, whatif: Compilation) -> None:
        try:
            run = run_what_if(base, whatif)
        except Exception as e:  # a failing step is shown, never raised
            self.call_from_thread(self.notify, f"{type(e).__name__}: {e}", title="What-if run failed",
                                  severity="error", markup=False)
            return
        self.call_from_thread(self._what_if_ran, whatif, run)

    def _what_if_ran(self, whatif: Compilation, run: WhatIfRun) -> None:
        if self.session.ran(whatif, run):  # else the pins changed while it ran
            self.notify(model.what_if_text(run), title="What-if run", markup=False,
                        severity="information" if run.verification.ok else "error", timeout=10)
            self.main.refresh_panes(refill=True)
            if isinstance(self.screen, TimelineScreen):  # shown while it ran: the what-if's lanes are measured now
                self.screen.query_one(TimelineView).show(self.session.timelines(self.main.viewed))

    # -- files -----------------------------------------------------------------------------

    @property
    def output_dir(self) -> Path:
        """The folder of this program's exports and screenshots, under ``screenshot_dir``."""
        return outputs.program_dir(self.screenshot_dir, self.program.name or self.source.stem)

    def action_export(self) -> None:
        """Export the viewed stage (``<stage>.dot`` and ``.svg``) into the program's folder (``outputs``)."""
        c = self.session.current()
        if self.session.compilation is not None and c is not None:
            self._export(c, self.main.viewed)

    @work(thread=True, group="export", exit_on_error=False)
    def _export(self, c: Compilation, stage: str) -> None:
        folder = self.output_dir
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

    def action_screenshot_svg(self) -> None:
        """Save an SVG screenshot of the screen as it is, in the program's folder, never over an earlier one."""
        folder = self.output_dir
        try:
            folder.mkdir(parents=True, exist_ok=True)
            target = folder / f"{outputs.free_stem(folder, self.main.screenshot_stem, ('.svg',))}.svg"
            write_atomic(target, self.export_screenshot())
        except OSError as e:
            self.notify(f"cannot write in {folder}: {e}", title="Screenshot", severity="error", markup=False)
            return
        self.notify(f"saved {target}", title="Screenshot", markup=False)

    # -- help and the command palette ----------------------------------------------------

    def action_help(self) -> None:
        self.push_screen(HelpScreen([*KEYS, CursorView.SELECT, NEXT_WIDGET]))

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """Textual's own commands, less those the explorer has its own binding for (its Screenshot and Quit)."""
        ours = {b.description for b in KEYS}
        yield from (c for c in super().get_system_commands(screen) if c.title not in ours)

"""compile(): a Program through every stage, kept as a Compilation the explorer and exporters read.

    program -> egraph (lowered, hashconsed) -> saturated (rewrites) -> kernelized (kernel and
    ToDevice nodes per device, nominal times) -> tuned (kernels timed on their devices, or the
    cost model's predictions with ``tune=False``) -> plan (extraction + ExecPlan) -> executed
    (run, checked against the reference interpreter)

Tuning follows the plan: every kernel gets the calibrated cost model's prediction, the plan
is extracted, the kernels it launches are tuned (timed variants), and that repeats until the
plan launches only timed kernels; then, while the budget lasts, the plan's kernels are timed on
the other devices too (unless their prediction is hopeless next to the time measured), so that
a choice is made between measurements.  Candidates no plan would take are never built.  When
the total budget ends first, the plan says how many of its launches are predicted only, and it
is not switched to untimed kernels of classes a timed kernel makes (``Compilation.untried``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from engine import units
from engine.devices.base import Device, PoolLink
from engine.egraph import ClassId, EGraph, Limits, Runner, Saturation, default_rules, from_program
from engine.extract import EXTRACTORS, Delta, Explainer, Extraction, Pin, Why, compare, explainer
from engine.kernel.attach import Attached, KernelNode, attach
from engine.kernel.ir import Kernel
from engine.kernel.kernelize import MAX_ROOT_FORMS, Kernelization, kernelize
from engine.kernel.schedule import DEFAULT_VARIANT, Variant
from engine.plan import ExecPlan, Execution, Launch, Session, StepError, build_plan, execute, identical, steady
from engine.program.primitives import PrimGraph
from engine.program.program import Program
from engine.program.reference import evaluate
from engine.program.values import check_inputs
from engine.stages import Stage
from engine.timeline import Timeline, timeline
from engine.tuning import Budget, CancelFn, ProgressFn, Tuner, TuneResult, suggest
from engine.tuning.calibrate import Calibrations
from engine.tuning.links import LinkCache, measured_links, transfer_time
from engine.tuning.search import HOPELESS

RIVALS_SHARE = 0.5
"""Rivals (the plan's kernels on other devices) are timed only while more than this share of the budget is left,
so that a plan that changes because of them can still have its new launches timed."""

@dataclass(frozen=True)
class Options:
    fast_math: bool = False
    limits: Limits = field(default_factory=Limits)
    max_root_forms: int = MAX_ROOT_FORMS
    execute: bool = True
    """Run the plan and verify it (the ``executed`` stage)."""
    tune: bool = True
    """Time kernel variants on the devices; False: the cost model's predictions and suggested variants."""
    tune_budget: Budget = field(default_factory=lambda: Budget(variants=12, seconds=4.0, total=15.0))
    """Per kernel and device, and in total (``total`` seconds of tuning per compilation)."""
    tune_cache: bool = True
    """Read and write the on-disk tuning cache (``ZYX_EXPLORE_CACHE`` or the user cache dir)."""
    extractor: str = "dag"
    """One of EXTRACTORS."""
    resident_inputs: bool = False
    """The program's inputs stay on the devices between runs (a ``Session``): extraction prices their uploads at
    nothing, as every run of a session after its first pays them, and the plan runs in a session."""

    def __post_init__(self) -> None:
        if self.extractor not in EXTRACTORS:
            raise ValueError(f"extractor must be one of {', '.join(EXTRACTORS)}, not {self.extractor!r}")


RESIDENT_NOTE = "for inputs resident on the devices (their uploads priced at nothing)"
"""What a plan made under ``Options.resident_inputs`` is said to be for, in every view that shows one."""


@dataclass(frozen=True)
class OutputCheck:
    """One output compared with the reference interpreter."""

    name: str
    max_error: float
    rtol: float
    atol: float
    ok: bool


@dataclass(frozen=True)
class Verification:
    outputs: tuple[OutputCheck, ...]

    @property
    def ok(self) -> bool:
        return all(o.ok for o in self.outputs)


@dataclass(frozen=True)
class Skip:
    """Why a kernel was not tuned on a device: ``predicted`` there vs ``measured`` on device ``on``."""

    predicted: float
    measured: float
    on: str

    def __str__(self) -> str:
        return f"skipped: predicted {units.seconds(self.predicted)} vs {units.seconds(self.measured)} measured on {self.on}"


@dataclass
class Compilation:
    """Every stage of one compilation."""

    program: Program
    devices: tuple[Device, ...]
    stage: Stage = Stage.PROGRAM
    """The last stage done; the fields of later stages are still None."""
    egraph: EGraph | None = None
    """The e-graph as it ends up (kernel nodes included); earlier stages are its prefixes."""
    lowered: tuple[int, int] = (0, 0)
    """(nodes added, unions) right after lowering: ``egraph.prefix(*lowered)`` is the ``egraph`` stage."""
    saturation: Saturation | None = None
    kernelization: Kernelization | None = None
    attached: Attached | None = None
    estimates: Mapping[KernelNode, float] = field(default_factory=dict)
    """Seconds of each kernel node by its device's nominal roofline (the ``kernelized`` stage)."""
    kernel_times: Mapping[KernelNode, float] = field(default_factory=dict)
    """Seconds of each kernel node the extraction uses: the estimates, then from ``tuned`` on the cost model's
    predictions and, for the kernels tuned, measured times."""
    variants: dict[KernelNode, Variant] = field(default_factory=dict)
    """The variant each kernel node launches with (tuned or suggested; the default when absent)."""
    tuning: dict[KernelNode, TuneResult] = field(default_factory=dict)
    """The tuning result of every kernel node that was timed."""
    extractor: str = "dag"
    links: dict[str, PoolLink] = field(default_factory=dict)
    """Measured host<->pool copy costs by pool (from ``tuned`` on, when tuning); nominal ones where absent."""
    calibrations: Calibrations | None = None
    """The devices' calibrated cost models (from ``tuned`` on); executed steps refit them."""
    skipped: dict[KernelNode, Skip] = field(default_factory=dict)
    """Kernel nodes not tuned because their prediction was hopeless next to another device's measured time."""
    resident: frozenset[ClassId] = frozenset()
    """The classes of the program's inputs under ``Options.resident_inputs`` (else none): their uploads are priced
    at nothing, and the plan's runs go through one ``Session``."""
    untried: frozenset[KernelNode] = frozenset()
    """Untimed kernels left out of the plan because the budget ended before they were timed and a timed kernel
    makes the same class: a plan is not changed to kernels only predicted once there is no time to check them."""
    tune_seconds: float = 0.0
    """Wall time of the tuned stage (copy links and calibration included)."""
    budget: Budget | None = None
    """The tuning budget the compilation ran under (None without tuning)."""
    cancelled: bool = False
    """Whether tuning was stopped by the user."""
    problems: list[str] = field(default_factory=list)
    """What went wrong but was worked around (a device failing, a kernel no variant could run), one line each."""
    extraction: Extraction | None = None
    plan: ExecPlan | None = None
    execution: Execution | None = None
    verification: Verification | None = None
    _graphs: dict[tuple[Stage, int], EGraph] = field(default_factory=dict, init=False, repr=False, compare=False)
    """The e-graphs of earlier stages, rebuilt once (``view``)."""
    _explainer: Explainer | None = field(default=None, init=False, repr=False, compare=False)

    def done(self, stage: str) -> bool:
        """Whether ``stage`` (a Stage or its name) is available."""
        return Stage(stage).order <= self.stage.order

    def view(self, stage: str, iteration: int | None = None) -> StageView:
        """What ``stage`` shows: its e-graph (for ``saturated``, after ``iteration`` iterations when given), and
        the kernels, times, plan and explanations as of that stage."""
        stage = Stage(stage)
        return StageView(self, stage, iteration, self._egraph(stage, iteration))

    def _egraph(self, stage: Stage, iteration: int | None) -> EGraph | None:
        """The e-graph ``stage`` shows: ``egraph`` and ``saturated`` are prefixes of the final one (kept once
        built: 8,000 classes take a while); None before that stage's e-graph is complete."""
        if stage == Stage.EGRAPH and self.egraph is not None:
            key: tuple[Stage, int] = (stage, 0)
            if key not in self._graphs:
                self._graphs[key] = self.egraph.prefix(*self.lowered)
        elif stage == Stage.SATURATED and self.saturation is not None:
            done = len(self.saturation.iterations)
            key = (stage, done if iteration is None else min(iteration, done))
            if key not in self._graphs:
                self._graphs[key] = self.saturation.snapshot(key[1])
        else:
            return self.egraph if stage.shows(Stage.KERNELIZED) and self.attached is not None else None
        return self._graphs[key]

    def explainer(self) -> Explainer:
        """Why each class of the plan is made as it is (``explain``), kept while the extraction stays the same."""
        if self._explainer is None or self._explainer.extraction is not self.extraction:
            self._explainer = explain(self)
        return self._explainer

    def plan_kernels(self) -> list[KernelNode]:
        """The kernel nodes the extraction chose, inputs before their users."""
        assert self.egraph is not None and self.extraction is not None
        return self.extraction.kernels(self.egraph)

    @property
    def device_pools(self) -> dict[str, str]:
        return {d.name: d.pool for d in self.devices}

    def extraction_time(self, kn: KernelNode) -> float:
        """What extraction (and its explanation) prices ``kn`` at: its time, plus what a plan's launch pays more
        (``output_cost``), infinite when ``untried``."""
        return math.inf if kn in self.untried else self.kernel_times[kn] + self.output_cost(kn)

    def output_cost(self, kn: KernelNode) -> float:
        """Seconds a plan's launch of ``kn`` spends more than its trials: first touches of its fresh outputs
        (trials reuse theirs; measured where tuning timed them), inputs read from memory (trials find them
        cached); 0 uncalibrated."""
        if self.calibrations is None or self.kernelization is None:
            return 0.0
        device = next(d for d in self.devices if d.name == kn.device)
        kernel = self.kernelization.candidates[kn.candidate].kernel
        touch = self.tuning[kn].touch if kn in self.tuning else None
        return self.calibrations.output_cost(kernel, device, self.kernel_times[kn], touch)

    def measured(self, kn: KernelNode) -> bool:
        """Whether kernel node ``kn``'s time was measured (tuned), not predicted."""
        return kn in self.tuning and self.tuning[kn].ok

    def transfer_time(self) -> Callable[[int, str, str], float]:
        """Seconds to copy ``nbytes`` from pool ``src`` to ``dst``: measured links, else nominal estimates."""
        return transfer_time(self.devices, self.links)


def transfer_estimate(devices: Sequence[Device]) -> Callable[[int, str, str], float]:
    """Nominal seconds to copy ``nbytes`` from one pool to another (through the host)."""
    return transfer_time(devices, {})


def compile_program(program: Program, devices: Sequence[Device], options: Options = Options()) -> Compilation:
    """Compile ``program`` for ``devices`` (and run it, unless ``options.execute`` is false)."""
    *_, compilation = compile_stages(program, devices, options)
    return compilation


def compile_stages(program: Program, devices: Sequence[Device], options: Options = Options(),
                   progress: ProgressFn | None = None, cancel: CancelFn | None = None) -> Iterator[Compilation]:
    """Compile stage by stage, yielding the (same, growing) Compilation after each of STAGES.

    ``progress`` hears of every variant the autotuner times; ``cancel`` returning True ends tuning
    early (the plan then uses what was timed so far and predictions for the rest).
    """
    c = Compilation(program, tuple(devices))
    yield c
    c.egraph = from_program(program)
    c.lowered = (c.egraph.num_added, len(c.egraph.unions))
    c.stage = Stage.EGRAPH
    yield c
    c.saturation = Runner(default_rules(fast_math=options.fast_math), options.limits).run(c.egraph)
    c.stage = Stage.SATURATED
    yield c
    c.kernelization = kernelize(c.egraph, options.max_root_forms)
    c.attached = attach(c.kernelization, devices)
    by_name = {d.name: d for d in devices}
    for n in c.attached.kernels:
        param = c.egraph.node(n).param
        c.estimates[param] = by_name[param.device].estimate(c.kernelization.candidates[param.candidate].kernel)
    c.kernel_times = dict(c.estimates)
    if options.resident_inputs:
        c.resident = frozenset(cls.id for cls in c.egraph.classes()
                               if any(c.egraph.node(n).op == "leaf" for n in cls.nodes))
    c.stage = Stage.KERNELIZED
    yield c
    c.extractor = options.extractor
    began = time.perf_counter()
    if options.tune:
        c.budget = options.tune_budget
        c.calibrations = Calibrations(persist=options.tune_cache)
        tuner = Tuner(budget=options.tune_budget, use_cache=options.tune_cache, progress=progress, cancel=cancel,
                      calibrations=c.calibrations)  # the budget counts from here: copy links and calibration too
        c.links = measured_links(devices, LinkCache() if options.tune_cache else None)
        tune_plan(c, tuner)
    else:
        c.calibrations = Calibrations(persist=options.tune_cache, fit=False)  # stored fits if any; no device runs without tuning
        predict_all(c, c.calibrations.predict)
    c.tune_seconds = time.perf_counter() - began
    c.stage = Stage.TUNED
    yield c
    extract(c)
    c.stage = Stage.PLAN
    yield c
    if options.execute:
        run(c)
        c.stage = Stage.EXECUTED
        yield c


def _kernel(c: Compilation, kn: KernelNode) -> Kernel:
    assert c.kernelization is not None
    return c.kernelization.candidates[kn.candidate].kernel


def predict_all(c: Compilation, model: Callable[[Kernel, Device, Variant], float]) -> None:
    """Every kernel node's variant (the cost model's suggestion) and its time by ``model`` (no device runs)."""
    by_name = {d.name: d for d in c.devices}
    for kn in list(c.kernel_times):
        kernel, device = _kernel(c, kn), by_name[kn.device]
        c.variants[kn] = suggest(kernel, device, model)
        c.kernel_times[kn] = model(kernel, device, c.variants[kn])  # type: ignore[index]


def tune_plan(c: Compilation, tuner: Tuner) -> None:
    """Predict every kernel, then tune what the extracted plan launches until all its launches are timed (a first
    look at each, its best predicted variant, before any is searched further: a slow search or build cannot use up
    the budget of the launches after it), then the plan's kernels on the other devices (``_rivals``, while more
    than RIVALS_SHARE of the budget is left), re-extracting after each batch, within the budget.

    ``c`` is left without an extraction or plan (the ``tuned`` stage has none).
    """
    predict_all(c, tuner.predict)
    by_name = {d.name: d for d in c.devices}
    unstarted: set[KernelNode] = set()  # their share of the budget could not start a launch: they stay predicted
    while tuner.left > 0:
        extract(c)
        todo = [kn for kn in c.plan_kernels() if kn not in unstarted
                 and not tuner.searched(_kernel(c, kn), by_name[kn.device])]
        first = [kn for kn in todo if kn not in c.tuning]
        todo = first or todo
        floor = 0.0
        if not todo:  # rivals, leaving RIVALS_SHARE of the budget for the launches of a plan they change
            floor = tuner.budget.total * RIVALS_SHARE
            todo = [kn for kn in _rivals(c, tuner) if kn not in unstarted]
        if not todo or tuner.left <= floor:
            break
        for i, kn in enumerate(todo):
            if tuner.left <= floor:
                break
            device = by_name[kn.device]
            share = (tuner.left - floor) / (len(todo) - i)  # each launch of the plan gets its turn
            result = tuner.tune(_kernel(c, kn), device, share, first=bool(first))
            if first and result.trials and not result.ok:  # its best predicted variant failed: search the others
                result = tuner.tune(_kernel(c, kn), device, share)
            if result.cancelled:
                c.cancelled = True
                break
            if not result.trials:  # the budget (all of it, or this kernel's share) ended before its first trial
                unstarted.add(kn)
                if tuner.left <= 0:
                    break
                continue
            c.tuning[kn] = result
            c.variants[kn] = result.best
            c.kernel_times[kn] = result.seconds  # type: ignore[index]  # inf when no variant ran
            if device.lost:
                _avoid(c, kn.device, f"device {kn.device} was lost while tuning ({device.lost})")
            elif not result.ok:
                c.problems.append(f"{kn}: no variant ran ({result.failure.splitlines()[0]}); extraction avoids it")
        _repredict(c, tuner)
        if c.cancelled:
            break
    if tuner.left <= 0 or c.cancelled:
        assert c.kernelization is not None
        made = c.kernelization.candidates
        classes = {made[kn.candidate].output for kn in c.tuning if c.tuning[kn].ok}
        c.untried = frozenset(kn for kn in c.kernel_times if kn not in c.tuning and made[kn.candidate].output in classes)
    c.extraction = c.plan = None


def _repredict(c: Compilation, tuner: Tuner) -> None:
    """The untimed kernels' times from the model as refitted by every measurement so far."""
    by_name = {d.name: d for d in c.devices}
    for kn, seconds in c.kernel_times.items():
        if kn not in c.tuning and math.isfinite(seconds):
            c.kernel_times[kn] = tuner.predict(_kernel(c, kn), by_name[kn.device], c.variants[kn])  # type: ignore[index]


def _rivals(c: Compilation, tuner: Tuner) -> list[KernelNode]:
    """The plan's kernels on the devices it does not launch them on, worth timing: those predicted within
    HOPELESS of the time measured; the others are recorded in ``c.skipped`` with why."""
    by_name = {d.name: d for d in c.devices}
    measured = {kn.candidate: kn for kn in c.plan_kernels() if kn in c.tuning and c.tuning[kn].ok}
    out = []
    for kn in c.kernel_times:
        chosen = measured.get(kn.candidate)
        if chosen is None or kn in c.tuning or kn in c.skipped or kn.device == chosen.device:
            continue
        predicted = c.kernel_times[kn]
        best = c.kernel_times[chosen]
        if predicted > HOPELESS * best:
            c.skipped[kn] = Skip(predicted, best, chosen.device)
        else:
            out.append(kn)
    return sorted(out, key=lambda kn: tuner.predict(_kernel(c, kn), by_name[kn.device], c.variants[kn]))


def _avoid(c: Compilation, device: str, why: str, kernel: Kernel | None = None) -> bool:
    """Make ``kernel``'s nodes on ``device`` (every kernel of it, if None) infinitely slow, noting ``why``;
    False when none was still usable."""
    hit = [kn for kn, t in c.kernel_times.items() if kn.device == device and math.isfinite(t)
           and (kernel is None or _kernel(c, kn).key == kernel.key)]
    for kn in hit:
        c.kernel_times[kn] = math.inf  # type: ignore[index]
    if hit:
        c.problems.append(why + ("; its kernels are not used" if kernel is None else "; re-planned without it"))
    return bool(hit)


def extract(c: Compilation, pins: Mapping[ClassId, Pin] | None = None) -> None:
    """(Re-)extract the plan of a kernelized compilation from its kernel times, under ``pins``."""
    assert c.egraph is not None and c.kernelization is not None
    copy_time = c.transfer_time()
    kernel_time = c.extraction_time
    c.extraction = EXTRACTORS[c.extractor](c.egraph, c.device_pools, kernel_time, copy_time, pins=pins,
                                           resident=c.resident)
    c.plan = build_plan(c.extraction, c.kernelization, kernel_time, lambda kn: c.variants.get(kn, DEFAULT_VARIANT),
                        c.measured)


@dataclass(frozen=True)
class WhatIf:
    """A planned compilation re-extracted under pins, beside the compilation it changes."""

    base: Compilation
    compilation: Compilation
    """A copy of ``base`` at the ``plan`` stage with the pinned extraction and plan, not run."""
    delta: Delta
    """``compare(base's extraction, the pinned one)``: the DAG and tree cost deltas and the values changed."""

    @property
    def extraction(self) -> Extraction:
        assert self.compilation.extraction is not None
        return self.compilation.extraction

    @property
    def predicted(self) -> tuple[float, float]:
        """Seconds predicted for (the base plan, the what-if plan)."""
        assert self.base.plan is not None and self.compilation.plan is not None
        return self.base.plan.predicted, self.compilation.plan.predicted

    @property
    def predicted_delta(self) -> float:
        """Seconds the what-if plan is predicted to take more (negative: less) than the base plan."""
        before, after = self.predicted
        return after - before


def what_if(c: Compilation, pins: Mapping[ClassId, Pin]) -> WhatIf:
    """Planned compilation ``c`` re-extracted under ``pins``, not run; ``c`` is untouched.

    The copy shares only what no later step changes (the program, devices, e-graph, kernelization, tuning
    results, cost models); its times, variants, problems and caches are its own, so that running it (which may
    re-plan around a failing kernel) leaves ``c`` as it was.  Raises ExtractionError when no plan honours the
    pins."""
    assert c.extraction is not None and c.done(Stage.PLAN)
    copy = dataclasses.replace(  # the private caches (e-graph snapshots, explainer) start empty
        c, stage=Stage.PLAN, estimates=dict(c.estimates), kernel_times=dict(c.kernel_times), variants=dict(c.variants),
        tuning=dict(c.tuning), links=dict(c.links), skipped=dict(c.skipped), problems=list(c.problems),
        extraction=None, plan=None, execution=None, verification=None)
    extract(copy, pins)
    assert copy.extraction is not None
    return WhatIf(c, copy, compare(c.extraction, copy.extraction))


@dataclass(frozen=True)
class WhatIfRun:
    """A what-if plan measured beside the plan it changes, both now and alike: each plan's fastest of ``repeats``
    runs (alternating, so that both see the same machine), the what-if's outputs verified against the reference."""

    predicted: tuple[float, float]
    """Seconds predicted for (the base plan, the what-if plan)."""
    runs: tuple[tuple[float, ...], tuple[float, ...]]
    """Seconds of every run of (the base plan, the what-if plan), in order."""
    execution: Execution
    """The what-if plan's fastest run."""
    verification: Verification

    @property
    def repeats(self) -> int:
        return len(self.runs[0])

    @property
    def measured(self) -> tuple[float, float]:
        """Seconds measured for (the base plan, the what-if plan): the fastest run of each."""
        return min(self.runs[0]), min(self.runs[1])

    @property
    def spread(self) -> float:
        """The widest gap between two runs of one plan: a measured delta no bigger than this is noise."""
        return max(max(r) - min(r) for r in self.runs)

    @property
    def predicted_delta(self) -> float:
        return self.predicted[1] - self.predicted[0]

    @property
    def measured_delta(self) -> float:
        return self.measured[1] - self.measured[0]


def run_what_if(base: Compilation, whatif: Compilation, repeats: int = 3) -> WhatIfRun:
    """Run ``whatif``'s plan and ``base``'s plan ``repeats`` times each on the program's input values and verify
    the what-if's outputs.  Neither compilation is changed, nor are the cost models refitted: a pinned plan is
    an experiment.  A step that fails raises StepError."""
    assert base.plan is not None and whatif.plan is not None and repeats >= 1
    values = base.program.input_values()
    runs: tuple[list[float], list[float]] = ([], [])
    best: Execution | None = None
    with _runs(base, base.plan) as go_base, _runs(whatif, whatif.plan) as go_whatif:
        for _ in range(repeats):
            for i, go in enumerate((go_base, go_whatif)):
                e = go(values)
                runs[i].append(e.total)
                if i and (best is None or e.total < best.total):
                    best = e
    assert best is not None
    checked = verify(best.outputs, evaluate(base.program.lower(), values), base.program)
    return WhatIfRun((base.plan.predicted, whatif.plan.predicted), (tuple(runs[0]), tuple(runs[1])), best, checked)


def explain(c: Compilation) -> Explainer:
    """Why each class of ``c``'s plan is made as it is, in the extractor's objective (DAG cost, same times)."""
    assert c.egraph is not None and c.extraction is not None
    return explainer(c.egraph, c.device_pools, c.extraction_time, c.transfer_time(), c.extraction, c.resident)


PLAN_RUNS = 3
"""Runs of a plan behind its measured times: the first, with its one-time costs, apart; per step the median of
the others (``engine.plan.steady``).  Every run is verified."""


def run(compilation: Compilation, inputs: Mapping[str, np.ndarray] | None = None) -> Verification:
    """Execute the plan ``PLAN_RUNS`` times on the program's input values (or ``inputs``) and verify each run
    against the reference (the verification shown is the first that failed, else the last).

    Raises InputError, before running anything, when an array of ``inputs`` is missing or of the wrong shape
    or dtype."""
    program = compilation.program
    assert compilation.plan is not None
    values = program.input_values() if inputs is None else check_inputs(
        {i.name: (i.shape, i.dtype) for i in program.inputs}, inputs)
    by_name = {d.name: d for d in compilation.devices}
    while True:  # a step that fails: re-plan without its kernel (or its device, if lost) and run again
        try:
            runs: list[Execution] = []
            with _runs(compilation, compilation.plan) as go:
                for _ in range(PLAN_RUNS):
                    runs.append(_sharing_outputs(go(values), runs))
            break
        except StepError as e:
            device = by_name.get(e.device)
            kernel = e.step.kernel if isinstance(e.step, Launch) and not (device is not None and device.lost) else None
            if device is None or not _avoid(compilation, e.device, f"{e} at run time", kernel):
                raise
            extract(compilation)
    compilation.execution = steady(runs)
    feed_back(compilation, compilation.execution)
    reference = evaluate(program.lower(), values)  # after the runs: its BLAS threads must not share their cores
    checks = [verify(r.outputs, reference, program) for r in runs]
    compilation.verification = next((v for v in checks if not v.ok), checks[-1])
    return compilation.verification


@contextlib.contextmanager
def _runs(c: Compilation, plan: ExecPlan) -> Iterator[Callable[[Mapping[str, np.ndarray]], Execution]]:
    """Timed runs of ``plan``: fresh executions, or where ``c``'s inputs are resident one ``Session``'s runs (its
    first uploads them, the later ones reuse them), as the extraction priced them."""
    if not c.resident:
        yield lambda values: execute(plan, c.devices, values)
        return
    with Session(plan, c.devices, timed=True) as session:
        yield session.run


def _sharing_outputs(run: Execution, earlier: Sequence[Execution]) -> Execution:
    """``run`` holding an earlier run's output arrays where its own hold the same bytes: identical runs keep one
    copy of the outputs between them (a plan's outputs can be most of the memory the machine has)."""
    for before in earlier:
        if before.outputs.keys() == run.outputs.keys() and all(
                identical(before.outputs[name], array) for name, array in run.outputs.items()):
            return dataclasses.replace(run, outputs=before.outputs)
    return run


def feed_back(c: Compilation, execution: Execution) -> None:
    """Refit the devices' cost models with the plan's measured launches, less what trials do not pay
    (``Calibrations.output_cost`` of the time the model predicts for a trial, with the first touch tuning
    measured where it did); and keep what each measured
    launch into a large host output paid more than its trial, per output byte, as an observed first touch
    (``Calibration.observe_touch``: the calibrations loaded next use it, this compilation keeps its prices)."""
    if c.calibrations is None or c.plan is None:
        return
    by_name = {d.name: d for d in c.devices}
    trials = {(kn.candidate, kn.device): t for kn, t in c.kernel_times.items() if c.measured(kn)}
    touches = {(kn.candidate, kn.device): result.touch for kn, result in c.tuning.items()}
    for step, seconds in zip(c.plan.steps, execution.step_times):
        if isinstance(step, Launch):
            device = by_name[step.device]
            candidate = (step.candidate, step.device)
            if candidate in trials:
                c.calibrations.observe_first_touch(step.kernel, device, trials[candidate], seconds)
            trial = c.calibrations.predict(step.kernel, device, step.variant)
            extra = c.calibrations.output_cost(step.kernel, device, trial, touches.get(candidate))
            c.calibrations.observe(step.kernel, device, step.variant, max(seconds - extra, 0.5 * seconds))
    c.calibrations.save()


def longest_sum(graph: PrimGraph, within: Collection[int] | None = None) -> int:
    """The most terms any ``reduce_sum`` of ``graph`` (among the nodes ``within``, if given) adds; 1 for none."""
    nodes = range(len(graph.nodes)) if within is None else within
    return max((math.prod(graph.nodes[graph.nodes[i].args[0]].shape[a] for a in graph.nodes[i].param)
                for i in nodes if graph.nodes[i].op == "reduce_sum"), default=1)


def cone(graph: PrimGraph, node: int) -> set[int]:
    """``node`` and every node it depends on."""
    seen, stack = {node}, [node]
    while stack:
        for a in graph.nodes[stack.pop()].args:
            if a not in seen:
                seen.add(a)
                stack.append(a)
    return seen


def _rms(values: np.ndarray) -> float:
    """Root mean square of the finite values (scaled first, so that it cannot overflow)."""
    finite = np.abs(values[np.isfinite(values)])
    top = float(finite.max(initial=0.0))
    return top * float(np.sqrt(np.mean(np.square(finite / top)))) if top > 0 else 0.0


def verify(outputs: Mapping[str, np.ndarray], reference: Mapping[str, np.ndarray], program: Program) -> Verification:
    """Compare each output with the reference (NaNs must match).

    Each output has the tolerance of the loosest dtype among the nodes it is computed
    from (its own, unless an f16 value flows into it: a float16 intermediate rounds
    differently on a device that keeps it in float32 registers); an f16 node elsewhere
    does not relax it.  Beside its rtol and atol, an element may be off by
    ``eps * sqrt(K) * rms(output)``, K the longest sum the output is computed from: two
    correct float sums of K terms, added in different orders, differ by about sqrt(K)
    roundings of their partial sums, which near zero exceeds atol (fp32 matmuls with
    K=4096, whose numpy BLAS reference is itself 1.4e-4 from the exact product there);
    an output of small values (a softmax) gains next to nothing from it.
    """
    graph = program.lower()
    checks = []
    for name, want in reference.items():
        nodes = cone(graph, graph.outputs[name])
        loosest = max({graph.nodes[i].dtype for i in nodes}, key=lambda d: d.tolerance)
        rtol, atol = loosest.tolerance
        spread = float(np.finfo(loosest.numpy).eps) * math.sqrt(longest_sum(graph, nodes)) if loosest.is_float else 0.0
        got = outputs[name]
        a, b = np.asarray(got, np.float64), np.asarray(want, np.float64)
        bound = atol + spread * _rms(b)
        same = np.isclose(a, b, rtol=rtol, atol=bound, equal_nan=True)
        with np.errstate(invalid="ignore"):
            diff = np.where(same, 0.0, np.nan_to_num(np.abs(a - b), nan=np.inf))
        checks.append(OutputCheck(name, float(diff.max(initial=0.0)), rtol, bound, bool(same.all())))
    return Verification(tuple(checks))


class _Prices(Mapping[KernelNode, float]):
    """``Compilation.extraction_time`` of each kernel node, priced when read: a pane reads a few of them on every
    cursor move, and a big program has thousands."""

    def __init__(self, compilation: Compilation) -> None:
        self.compilation = compilation

    def __getitem__(self, kn: KernelNode) -> float:
        if kn not in self.compilation.kernel_times:
            raise KeyError(kn)
        return self.compilation.extraction_time(kn)

    def __iter__(self) -> Iterator[KernelNode]:
        return iter(self.compilation.kernel_times)

    def __len__(self) -> int:
        return len(self.compilation.kernel_times)


@dataclass(frozen=True)
class StageView:
    """A compilation as of one stage, which the explorer, the exporters and the CLI all read (which e-graph a
    stage shows, which kernel times count and whether there is a plan are decided here, once): what later stages made is hidden, what this stage and earlier ones made is
    shown as it is now (a stage still running shows its progress: tuning fills ``kernel_times`` live).

    The e-graph is the stage's own (``egraph`` and ``saturated`` are prefixes of the final one, taken once and kept
    by the compilation; ``iteration`` picks a saturation iteration), None before the e-graph or before the stage's
    e-graph is complete."""

    compilation: Compilation
    stage: Stage
    iteration: int | None
    egraph: EGraph | None

    @property
    def kernelization(self) -> Kernelization | None:
        return self.compilation.kernelization if self.stage.shows(Stage.KERNELIZED) else None

    @property
    def estimated(self) -> bool:
        """Whether ``kernel_times`` are the devices' nominal estimates (before tuning)."""
        return not self.stage.shows(Stage.TUNED)

    @property
    def kernel_times(self) -> Mapping[KernelNode, float]:
        """Seconds of each kernel node: nominal estimates at ``kernelized``, tuned or predicted from ``tuned`` on."""
        c = self.compilation
        if not self.stage.shows(Stage.KERNELIZED):
            return {}
        return c.estimates if self.estimated else c.kernel_times

    @property
    def prices(self) -> Mapping[KernelNode, float]:
        """What extraction prices each kernel node at as of this stage: ``kernel_times``, plus from ``tuned`` on
        what a plan's launch pays more than a trial (``Compilation.extraction_time``; infinite when untried)."""
        return self.kernel_times if self.estimated else _Prices(self.compilation)

    @property
    def tuning(self) -> Mapping[KernelNode, TuneResult]:
        return {} if self.estimated else self.compilation.tuning

    def variant(self, kn: KernelNode) -> Variant:
        """The variant kernel node ``kn`` launches with as of this stage (the default before tuning)."""
        return DEFAULT_VARIANT if self.estimated else self.compilation.variants.get(kn, DEFAULT_VARIANT)

    def measured(self, kn: KernelNode) -> bool:
        """Whether ``kn``'s time in ``kernel_times`` was measured (tuned), not predicted or estimated."""
        return not self.estimated and self.compilation.measured(kn)

    @property
    def extraction(self) -> Extraction | None:
        return self.compilation.extraction if self.stage.shows(Stage.PLAN) else None

    @property
    def plan(self) -> ExecPlan | None:
        return self.compilation.plan if self.stage.shows(Stage.PLAN) else None

    @property
    def execution(self) -> Execution | None:
        return self.compilation.execution if self.stage.shows(Stage.EXECUTED) else None

    @property
    def verification(self) -> Verification | None:
        return self.compilation.verification if self.stage.shows(Stage.EXECUTED) else None

    def timeline(self) -> Timeline | None:
        """The plan's timeline (measured once executed); None without a plan."""
        plan = self.plan
        return None if plan is None else timeline(plan, self.execution, self.compilation.devices)

    def why(self, cid: ClassId) -> Why | None:
        """Why class ``cid`` is made as it is in the plan (DAG cost, as the extractor decided); None without one."""
        if self.extraction is None:
            return None
        c = self.compilation
        assert c.egraph is not None
        return c.explainer().why(c.egraph.find(cid))

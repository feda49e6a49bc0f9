"""What the explorer shows, read from a Compilation's stage views (no Textual here): table rows, pins.

The compilation runs in a worker thread; the e-graph snapshots of the ``egraph`` and ``saturated`` stages
(``Compilation.view``) are built there, as each stage lands, so that the UI thread finds them ready.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field

from engine import (
    DEFAULT_VARIANT,
    FAILED,
    OK,
    WRONG,
    Allocate,
    Candidate,
    Choice,
    ClassId,
    Compilation,
    Copy,
    EGraph,
    ExecPlan,
    Extraction,
    ExtractionError,
    Free,
    Kernelization,
    KernelNode,
    Launch,
    Located,
    NodeId,
    Pins,
    Program,
    Stage,
    StageView,
    Term,
    Timeline,
    TuneResult,
    Variant,
    WhatIf,
    WhatIfRun,
    Why,
    kernel_lines,
    locate,
    tensors_of,
    units,
    what_if,
)
from zyx_explorer.rows import Row

bytes_text, seconds_text, shape_text = units.nbytes, units.seconds, units.shape  # the explorer's names (panes
plural, short_devices = units.plural, units.short_devices                    # import them from here)
class PinError(ValueError):
    """A pin that cannot be honoured (no kernel computes the pinned form)."""


@dataclass
class Session:
    """A compilation as far as it got, the stages done, and the user's pins.

    What a stage shows is the engine's ``Compilation.view``: the e-graph from the real compilation (whose
    snapshots it keeps), the rest from ``current()`` (the pinned what-if, or the real one)."""

    program: Program
    compilation: Compilation | None = None
    done: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    pins: dict[ClassId, PinTarget] = field(default_factory=dict)
    what: WhatIf | None = None
    """The compilation re-extracted under ``pins`` and its delta (None when nothing is pinned)."""
    whatif_run: WhatIfRun | None = None
    """The measured run of ``whatif`` beside the real plan (None until one is asked for)."""
    failed: str | None = None
    _class_rows: dict[tuple[int, int], tuple[EGraph, Extraction | None, list[Row]]] = field(default_factory=dict)

    @property
    def whatif(self) -> Compilation | None:
        """The pinned what-if's compilation (None when nothing is pinned)."""
        return self.what.compilation if self.what is not None else None

    def record(self, c: Compilation, seconds: float) -> None:
        """Called in the worker thread right after stage ``c.stage``: build what the UI thread will show (the
        stage's e-graph snapshot, its class rows) here, so that it finds them ready."""
        self.compilation = c
        self.seconds[c.stage] = seconds
        self.done.append(c.stage)
        eg = self.egraph(c.stage)
        if eg is not None:
            self.class_rows(eg, self.extraction(c.stage))

    def class_rows(self, eg: EGraph, extraction: Extraction | None) -> list[Row]:
        """``class_rows`` under the pins; without pins built once per (e-graph, extraction), so that a stage
        landing does not stall the UI on a big e-graph."""
        c = self.compilation
        names = c.kernelization.names if c is not None and c.kernelization is not None else {}
        if self.pins:
            return class_rows(eg, extraction, self.pins, names)
        hit = self._class_rows.get((id(eg), id(extraction)))
        if hit is None or hit[0] is not eg or hit[1] is not extraction:
            hit = self._class_rows[(id(eg), id(extraction))] = (eg, extraction, class_rows(eg, extraction, {}, names))
        return hit[2]

    # -- what a stage shows ----------------------------------------------------------------

    def iterations(self) -> int:
        c = self.compilation
        return len(c.saturation.iterations) if c is not None and c.saturation is not None else 0

    def view(self, stage: str, iteration: int | None = None) -> StageView | None:
        """What ``stage`` shows of the plan shown (the pinned what-if, or the real one); None before compiling."""
        c = self.current()
        return c.view(stage, iteration) if c is not None else None

    def egraph(self, stage: str, iteration: int | None = None) -> EGraph | None:
        """The e-graph of ``stage`` once done (for ``saturated``, after ``iteration`` iterations when given)."""
        c = self.compilation
        if c is None or stage not in self.done:
            return None
        return c.view(stage, iteration).egraph

    def current(self) -> Compilation | None:
        """The compilation whose extraction and plan are shown: the pinned what-if, or the real one."""
        return self.whatif or self.compilation

    def extraction(self, stage: str) -> Extraction | None:
        view = self.view(stage)
        return view.extraction if view is not None else None

    def plan(self, stage: str) -> ExecPlan | None:
        view = self.view(stage)
        return view.plan if view is not None else None

    def timelines(self, stage: str) -> list[tuple[str, Timeline]]:
        """The plan's timeline as of ``stage`` (measured once executed) and, under pins, the what-if plan's
        (measured once ``r`` ran it)."""
        out = []
        for title, c in (("plan", self.compilation), ("what-if plan (pinned)", self.whatif)):
            t = c.view(stage).timeline() if c is not None else None
            if t is not None:
                out.append((title, t))
        return out

    def kernel_times(self, stage: str) -> Mapping[KernelNode, float]:
        """Seconds of each kernel node: nominal estimates at ``kernelized``, tuned or predicted from ``tuned`` on."""
        view = self.view(stage)
        return view.kernel_times if view is not None else {}

    def prices(self, stage: str) -> Mapping[KernelNode, float]:
        """Seconds extraction prices each kernel node at as of ``stage`` (``StageView.prices``)."""
        view = self.view(stage)
        return view.prices if view is not None else {}

    def tuning(self, stage: str) -> Mapping[KernelNode, TuneResult]:
        view = self.view(stage)
        return view.tuning if view is not None else {}

    def variant(self, stage: str, kn: KernelNode) -> Variant:
        """The variant kernel node ``kn`` launches with as of ``stage`` (the default before tuning)."""
        view = self.view(stage)
        return view.variant(kn) if view is not None else DEFAULT_VARIANT

    def why(self, stage: str, cid: ClassId) -> Why | None:
        """Why class ``cid`` is made as it is in the plan shown (DAG cost, as the extractor decided)."""
        view = self.view(stage)
        return view.why(cid) if view is not None else None

    def candidate(self, cand_id: str) -> Candidate | None:
        c = self.compilation
        return c.kernelization.candidates.get(cand_id) if c is not None and c.kernelization is not None else None

    def kernel_name(self, cand_id: str) -> str:
        """Candidate ``cand_id``'s readable name (``engine.kernel.names``)."""
        c = self.compilation
        return c.kernelization.name(cand_id) if c is not None and c.kernelization is not None else cand_id

    def kernel_lines(self, stage: str, cand_id: str) -> list[str]:
        """The kernelizer's decisions on candidate ``cand_id``, its rivals priced as ``stage``'s extraction prices
        them."""
        c = self.compilation
        if c is None or c.kernelization is None or c.attached is None or cand_id not in c.kernelization.candidates:
            return []
        short = self.short()
        return kernel_lines(c.kernelization, c.attached.refused, cand_id, self.prices(stage),
                            lambda d: short.get(d, d))

    def locate(self, stage: str, tensor: str) -> Located | None:
        """Where program tensor ``tensor`` went as of ``stage`` (classes from ``egraph`` on, kernels and steps
        from ``plan`` on); None before the e-graph or for a tensor nothing reads."""
        view, eg = self.view(stage), self.egraph(stage)
        if eg is None or view is None:
            return None
        return locate(eg, view.kernelization, view.plan, tensor)

    def tensors_of(self, cand_id: str) -> list[str]:
        """The program tensors candidate ``cand_id`` computes (``engine.locate.tensors_of``)."""
        c = self.compilation
        if c is None or c.kernelization is None or c.egraph is None or cand_id not in c.kernelization.candidates:
            return []
        return tensors_of(c.egraph, c.kernelization, cand_id)

    # -- pins ------------------------------------------------------------------------------

    def pin(self, cid: ClassId, target: PinTarget) -> WhatIf | None:
        """Pin class ``cid`` to a form (node id) or a device (name) and re-extract; returns the what-if."""
        pins = {**self.pins, cid: target}
        self.what, self.whatif_run = reextract(self._base(), pins), None
        self.pins = pins
        return self.what

    def unpin(self, cid: ClassId) -> WhatIf | None:
        """Drop ``cid``'s pin and re-extract under the others; returns the what-if (None when no pin is left)."""
        pins = {k: v for k, v in self.pins.items() if k != cid}
        self.what, self.whatif_run = reextract(self._base(), pins) if pins else None, None
        self.pins = pins
        return self.what

    def ran(self, whatif: Compilation, run: WhatIfRun) -> bool:
        """Keep ``run`` as the measurement of ``whatif``: False (dropped) when the pins changed meanwhile."""
        if whatif is not self.whatif:
            return False
        self.whatif_run = run
        whatif.execution, whatif.verification, whatif.stage = run.execution, run.verification, Stage.EXECUTED
        return True

    def _base(self) -> Compilation:
        c = self.compilation
        if c is None or c.kernelization is None or c.plan is None:
            raise PinError("pins need the plan stage: wait for the compilation")
        return c

    def short(self) -> dict[str, str]:
        """The short name of each device and pool of the compilation (``units.short_devices``)."""
        c = self.compilation
        return short_devices(d.name for d in c.devices) if c is not None else {}



def pin_text(what: str, whatif: WhatIf | None, real: float) -> str:
    """What a pin or unpin did, in the engine's numbers: the plans' predicted totals and the extraction's delta
    (``extract.compare``), both against the real plan (predicted ``real`` seconds)."""
    if whatif is None:
        return f"{what}: the real plan again, predicted {seconds_text(real)}"
    before, after = whatif.predicted
    return (f"{what}: predicted {seconds_text(before)} -> {seconds_text(after)} "
            f"({seconds_text(whatif.predicted_delta, signed=True)}); extraction {whatif.delta}")


def what_if_text(run: WhatIfRun) -> str:
    """A measured what-if beside its prediction, each marked: ``measured 1.20 ms -> 1.50 ms (+300 µs, fastest of
    3 runs each; runs spread 20 µs); predicted ... (+250 µs); verification ok``; a measured delta within the
    spread of the runs is said to be noise."""
    (pb, pw), (mb, mw) = run.predicted, run.measured
    check = "ok" if run.verification.ok else "FAILED: an output differs from the reference"
    noise = ": within it, no measurable difference" if abs(run.measured_delta) <= run.spread else ""
    return (f"measured {seconds_text(mb)} -> {seconds_text(mw)} ({seconds_text(run.measured_delta, signed=True)}, "
            f"fastest of {run.repeats} runs each; runs spread {seconds_text(run.spread)}{noise}); "
            f"predicted {seconds_text(pb)} -> {seconds_text(pw)} ({seconds_text(run.predicted_delta, signed=True)}); "
            f"verification {check}")


PinTarget = NodeId | str
"""A pin: a form (node id) or a device (name)."""


def reextract(c: Compilation, pins: Mapping[ClassId, PinTarget]) -> WhatIf:
    """``c`` re-extracted under ``pins`` (``engine.what_if``: the real compilation is untouched)."""
    assert c.egraph is not None and c.kernelization is not None
    chosen = Pins()
    try:
        for cid, target in pins.items():
            chosen = (chosen.device(c.egraph, cid, target) if isinstance(target, str)
                      else chosen.node(c.egraph, target, c.kernelization))
        return what_if(c, chosen)
    except ExtractionError as e:
        raise PinError(str(e)) from None


def chosen_by_class(extraction: Extraction | None) -> dict[ClassId, Choice]:
    """The producing choice of each extracted class (a kernel or leaf over a copy)."""
    out: dict[ClassId, Choice] = {}
    if extraction is None:
        return out
    for (cid, _pool), choice in sorted(extraction.choices.items(), key=lambda kv: (kv[1].source is not None, kv[0])):
        out.setdefault(cid, choice)
    return out


def form_name(eg: EGraph, n: NodeId, names: Mapping[str, str] = {}) -> str:
    """A short name of a form: ``matmul_t2+add_y on blas`` (a kernel by its readable name in ``names``, else
    its hash), ``input x``, ``copy to host``, ``add``."""
    op, param, _ = eg.node(n)
    if op == "kernel":
        cand = param.candidate  # type: ignore[attr-defined]
        return f"{names.get(cand, cand.split('@')[0])} on {param.device}"  # type: ignore[attr-defined]
    if op == "to_device":
        return f"copy {param}"
    if op == "leaf":
        return f"input {param}"
    return eg.describe(n).split("(")[0]


def term_text(eg: EGraph, kz: Kernelization | None, t: Term, short: Mapping[str, str],
              measured: Callable[[KernelNode], bool]) -> str:
    """A kernel or copy of a ``Why`` with its seconds as the extractor priced them: m measured, p predicted;
    kernels by their readable names, devices by their ``short`` names."""
    def device(name: str) -> str:
        return short.get(name, name.split(":")[0])

    if t.copy:
        return f"copy to {device(t.value[1])} {seconds_text(t.seconds)} p"
    param = eg.node(t.node).param
    if not isinstance(param, KernelNode):
        return f"n{t.node} {eg.describe(t.node).split('(')[0]}"
    name = kz.name(param.candidate) if kz is not None else f"n{t.node}"
    return f"{name} on {device(param.device)} {seconds_text(t.seconds)} {'m' if measured(param) else 'p'}"


def class_rows(eg: EGraph, extraction: Extraction | None, pins: Mapping[ClassId, object] = {},
               names: Mapping[str, str] = {}) -> list[Row]:
    """One row per class: id, shape, dtype, forms, ops, chosen form (kernels by their readable ``names``), cost."""
    chosen = chosen_by_class(extraction)
    outputs = set(eg.output_classes().values())
    rows = []
    for cls in eg.classes():
        ops: Counter[str] = Counter()
        devices: set[str] = set()
        for n in cls.nodes:
            op, param, _ = eg.node(n)
            ops[op] += 1
            if op == "kernel":
                devices.add(param.device)  # type: ignore[attr-defined]
        ops_text = " ".join(op if k == 1 else f"{op}×{k}" for op, k in ops.items())
        choice = chosen.get(cls.id)
        chosen_text = ("📌 " if cls.id in pins else "") + (form_name(eg, choice.node, names) if choice else "")
        cost = choice.cost if choice else math.inf
        cells = (f"c{cls.id}", shape_text(cls.shape), str(cls.dtype), str(len(cls.nodes)), ops_text, chosen_text,
                 seconds_text(choice.cost) if choice else "")
        rows.append(Row(cls.id, cells, "bold" if cls.id in outputs else "",
                        (cls.id, cls.numel, str(cls.dtype), -len(cls.nodes), ops_text, chosen_text, cost),
                        search=f"c{cls.id} {cells[1]} {cells[2]} {ops_text} {' '.join(devices)} {chosen_text}"))
    rows.sort(key=lambda r: r.key)
    return rows


def where_text(where: Located, plan: ExecPlan | None) -> str:
    """Where a program tensor went, in one line: its value class, the kernels of ``plan`` computing it and
    their steps."""
    others = f" (+{len(where.classes) - 1} from its lowering)" if len(where.classes) > 1 else ""
    text = f"value in c{where.value}{others}"
    if plan is None:
        return text + "; no plan at this stage"
    if not where.steps:
        return text + "; no kernel of the plan computes it on its own (an equal form of its users was chosen)"
    kernels = [s.name for s in (plan.steps[i] for i in where.steps) if isinstance(s, Launch)]
    what = f"kernel {', '.join(kernels)}" if kernels else "a program input"
    return f"{text}; {what} at step {', '.join(str(i + 1) for i in where.steps)}"


def step_class(step: Allocate | Copy | Launch | Free) -> ClassId:
    """The class a plan step makes, copies, computes or frees."""
    if isinstance(step, Copy):
        return step.target[0]
    if isinstance(step, Launch):
        return step.outputs[0][0]
    return step.value[0]


def plan_rows(plan: ExecPlan, measured: tuple[float, ...] | None, short: Mapping[str, str]) -> list[Row]:
    """One row per step; devices and pools by their ``short`` names."""
    rows = []
    for i, step in enumerate(plan.steps):
        kind = type(step).__name__
        if isinstance(step, Launch):
            what = f"{step.name} -> c{step.outputs[0][0]} ({', '.join(f'c{v[0]}' for v in step.inputs)})"
            where, predicted, nbytes = step.device, step.predicted, step.kernel.output_bytes
        elif isinstance(step, Copy):
            what = f"c{step.source[0]}: {short.get(step.source[1], step.source[1])} -> {short.get(step.target[1], step.target[1])}"
            where, predicted, nbytes = step.target[1], step.predicted, step.buffer.nbytes
        else:
            what = f"c{step.value[0]} {step.buffer}" + (f" = input {step.input}" if isinstance(step, Allocate)
                                                        and step.input else "")
            where, predicted, nbytes = step.value[1], None, step.buffer.nbytes
        took = measured[i] if measured is not None and i < len(measured) and kind in ("Launch", "Copy") else None
        style = {"Launch": "", "Copy": "cyan", "Allocate": "dim", "Free": "dim"}[kind]
        source = (" m" if step.measured else " p") if isinstance(step, Launch) else ""  # measured by the tuner
        rows.append(Row(i, (str(i + 1), kind, what, short.get(where, where), bytes_text(nbytes), seconds_text(predicted) + source,
                            seconds_text(took)), style))
    return rows


def rewrite_rows(eg: EGraph, c: Compilation, upto: int | None = None) -> list[Row]:
    """Every application of the rewrite log (up to iteration ``upto``): iteration, rule, node, result, merge."""
    rows: list[Row] = []
    if c.saturation is None:
        return rows
    for it in c.saturation.iterations[:upto]:
        for j, a in enumerate(it.applications):
            merged = f"c{a.merged[0]} + c{a.merged[1]}" if a.merged else "(new nodes)"
            rows.append(Row((it.index, j), (str(it.index), a.rule, f"n{a.node} {eg.describe(a.node, raw=True)}",
                                            f"n{a.result}", merged), "" if a.merged else "dim"))
    return rows


def chosen_kernels(eg: EGraph, extraction: Extraction | None) -> set[KernelNode]:
    """The kernel nodes the extraction chose (none without an extraction)."""
    return set(extraction.kernels(eg)) if extraction is not None else set()


def cost_rows(c: Compilation, times: Mapping[KernelNode, float], extraction: Extraction | None,
              tuning: Mapping[KernelNode, TuneResult], estimated: bool = False) -> list[Row]:
    """Kernel x device: one row per candidate, each device's seconds marked ``m`` measured (tuned), ``p`` predicted
    by the cost model or ``e`` nominal estimate (``estimated``), then ``*`` chosen by the plan or ``<`` the fastest
    of the row (of its measured cells when it has any).  A kernel that computes several classes (the same code)
    is named with ``×N``."""
    kz, eg = c.kernelization, c.egraph
    if kz is None or eg is None:
        return []
    by_cand: dict[str, dict[str, tuple[KernelNode, float]]] = {}
    for k, s in times.items():
        by_cand.setdefault(k.candidate, {})[k.device] = (k, s)
    chosen = chosen_kernels(eg, extraction)
    chosen_cands = {k.candidate for k in chosen}
    uses = Counter(cand.kernel.name for cand in kz.candidates.values())
    rows = []
    for cid, cand in kz.candidates.items():
        row_times = by_cand.get(cid, {})
        kinds = {d: "e" if estimated else ("m" if kn in tuning and tuning[kn].ok else "p")
                 for d, (kn, _) in row_times.items()}
        measured = "m" in kinds.values()  # then only measured cells compete for "<": a prediction is not a timing
        best = min((s for d, (_, s) in row_times.items() if kinds[d] == "m" or not measured), default=math.inf)
        name = kz.name(cid) + (f" ×{uses[cand.kernel.name]}" if uses[cand.kernel.name] > 1 else "")
        cells = [name, f"c{cand.output}", eg.describe(cand.root).split("(")[0]]
        for d in c.devices:
            if d.name not in row_times:
                cells.append("—")
                continue
            kn, s = row_times[d.name]
            kind = kinds[d.name]
            mark = "*" if kn in chosen else ("<" if s == best and (kind == "m" or not measured) else " ")
            cells.append(f"{seconds_text(s)} {kind}{mark}")
        style = "bold" if cid in chosen_cands else ""
        rows.append(Row(cid, tuple(cells), style, (kz.name(cid), cand.output, cells[2],
                                                   *(row_times.get(d.name, (None, math.inf))[1] for d in c.devices))))
    return rows


STATUS = {OK: "verified", WRONG: "wrong", FAILED: "failed"}


def launched_variant(cand_id: str, times: Mapping[KernelNode, float], chosen: set[KernelNode],
                     variant_of: Callable[[KernelNode], Variant]) -> tuple[str, Variant] | None:
    """(device, variant) candidate ``cand_id`` is launched with: the plan's choice, else its fastest device."""
    mine = [kn for kn in times if kn.candidate == cand_id]
    if not mine:
        return None
    kn = min(mine, key=lambda k: (k not in chosen, times[k], k.device))
    return kn.device, variant_of(kn)


def variant_rows(cand_id: str, times: Mapping[KernelNode, float], tuning: Mapping[KernelNode, TuneResult],
                 variant_of: Callable[[KernelNode], Variant], launched: tuple[str, Variant] | None,
                 short: Mapping[str, str], skipped: Mapping[KernelNode, object] | None = None) -> list[Row]:
    """Every variant tried of candidate ``cand_id`` on each device, fastest verified first: ``*`` launched,
    ``+`` the tuner's pick on its device (a variant that timed a plan's fresh outputs says what they cost more); a
    device whose kernel was not tuned shows the one variant it would launch,
    predicted, and why it was skipped when its prediction was hopeless."""
    rows = []
    for kn in sorted((k for k in times if k.candidate == cand_id), key=lambda k: k.device):
        result = tuning.get(kn)
        if result is None:
            v = variant_of(kn)
            mark = "*" if launched == (kn.device, v) else " "
            why = str((skipped or {}).get(kn, ""))
            rows.append(Row((kn.device, v), (mark, short.get(kn.device, kn.device), str(v),
                                             "skipped" if why else "not tuned", "", seconds_text(times[kn]), "", why),
                            "dim"))
            continue
        for t in sorted(result.trials, key=lambda t: (t.status != OK, math.inf if t.seconds is None else t.seconds)):
            best = result.ok and t.variant == result.best
            mark = "*" if launched == (kn.device, t.variant) else ("+" if best else " ")
            reason = t.reason.splitlines()[0] if t.reason else ""
            if t.touch is not None:
                reason = f"a plan's launch pays {seconds_text(t.touch)} more on fresh outputs (measured)"
            style = {OK: "bold" if best else "", WRONG: "red", FAILED: "yellow"}[t.status]
            rows.append(Row((kn.device, t.variant), (mark, short.get(kn.device, kn.device), str(t.variant), STATUS[t.status],
                                                     seconds_text(t.seconds), seconds_text(t.predicted), result.cache,
                                                     reason), style))
    return rows


def result_summary(c: Compilation) -> dict[str, Hashable]:
    """Headline numbers of a compilation."""
    out: dict[str, Hashable] = {}
    if c.egraph is not None:
        out["e-graph"] = f"{c.egraph.num_classes} classes, {c.egraph.num_nodes} nodes"
    if c.saturation is not None:
        s = c.saturation
        out["saturation"] = f"{s.stop.value} after {plural(len(s.iterations), 'iteration')}, {seconds_text(s.seconds)}"
    if c.kernelization is not None:
        out["kernels"] = f"{plural(len(c.kernelization.candidates), 'candidate')}, {plural(len(c.kernel_times), 'kernel node')}"
    if c.tuning:
        trials = sum(len(r.trials) for r in c.tuning.values())
        hits = sum(r.cache == "hit" for r in c.tuning.values())
        out["tuning"] = f"{plural(len(c.tuning), 'kernel')} tuned, {plural(trials, 'variant')} tried, {hits} from the cache"
    elif c.done(Stage.TUNED):
        out["tuning"] = "not tuned: cost-model predictions"
    if c.plan is not None:
        launches = len(c.plan.launches())
        out["plan"] = (f"{plural(len(c.plan.steps), 'step')} ({plural(launches, 'launch', 'launches')}: "
                       f"{c.plan.coverage()}), predicted {seconds_text(c.plan.predicted)}, "
                       f"peak {bytes_text(c.plan.peak_bytes)}")
    if c.execution is not None:
        out["measured"] = c.execution.describe()
    return out

"""compile(): a Program through every stage, kept as a Compilation the explorer and exporters read.

    program -> egraph (lowered, hashconsed) -> saturated (rewrites) -> kernelized (kernel and
    ToDevice nodes per device) -> plan (extraction + ExecPlan) -> executed (run, checked
    against the reference interpreter)
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from engine.devices.base import HOST, Device
from engine.egraph import EGraph, Limits, Runner, Saturation, default_rules, from_program
from engine.extract import Extraction, greedy
from engine.kernel.attach import Attached, KernelNode, attach
from engine.kernel.kernelize import MAX_ROOT_FORMS, Kernelization, kernelize
from engine.plan import ExecPlan, Execution, build_plan, execute
from engine.program.program import Program
from engine.program.reference import evaluate

STAGES = ("program", "egraph", "saturated", "kernelized", "plan", "executed")


@dataclass(frozen=True)
class Options:
    fast_math: bool = False
    limits: Limits = field(default_factory=Limits)
    max_root_forms: int = MAX_ROOT_FORMS
    execute: bool = True
    """Run the plan and verify it (the ``executed`` stage)."""


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


@dataclass
class Compilation:
    """Every stage of one compilation."""

    program: Program
    devices: tuple[Device, ...]
    stage: str = "program"
    """The last stage done; the fields of later stages are still None."""
    egraph: EGraph | None = None
    """The e-graph as it ends up (kernel nodes included); earlier stages are its prefixes."""
    lowered: tuple[int, int] = (0, 0)
    """(nodes added, unions) right after lowering: ``egraph.prefix(*lowered)`` is the ``egraph`` stage."""
    saturation: Saturation | None = None
    kernelization: Kernelization | None = None
    attached: Attached | None = None
    kernel_times: Mapping[KernelNode, float] = field(default_factory=dict)
    """Seconds of each kernel node: the devices' estimates (the autotuner replaces them with timings)."""
    extraction: Extraction | None = None
    plan: ExecPlan | None = None
    execution: Execution | None = None
    verification: Verification | None = None

    def done(self, stage: str) -> bool:
        """Whether ``stage`` (one of STAGES) is available."""
        return STAGES.index(stage) <= STAGES.index(self.stage)

    @property
    def device_pools(self) -> dict[str, str]:
        return {d.name: d.pool for d in self.devices}


def transfer_estimate(devices: Sequence[Device]) -> Callable[[int, str, str], float]:
    """Estimated seconds to copy ``nbytes`` from one pool to another (through the host)."""
    by_pool = {d.pool: d for d in devices}

    def seconds(nbytes: int, src: str, dst: str) -> float:
        return sum(by_pool[p].transfer_estimate(nbytes) for p in (src, dst) if p != HOST)

    return seconds


def compile_program(program: Program, devices: Sequence[Device], options: Options = Options()) -> Compilation:
    """Compile ``program`` for ``devices`` (and run it, unless ``options.execute`` is false)."""
    *_, compilation = compile_stages(program, devices, options)
    return compilation


def compile_stages(program: Program, devices: Sequence[Device], options: Options = Options()) -> Iterator[Compilation]:
    """Compile stage by stage, yielding the (same, growing) Compilation after each of STAGES."""
    c = Compilation(program, tuple(devices))
    yield c
    c.egraph = from_program(program)
    c.lowered = (c.egraph.num_added, len(c.egraph.unions))
    c.stage = "egraph"
    yield c
    c.saturation = Runner(default_rules(fast_math=options.fast_math), options.limits).run(c.egraph)
    c.stage = "saturated"
    yield c
    c.kernelization = kernelize(c.egraph, options.max_root_forms)
    c.attached = attach(c.kernelization, devices)
    by_name = {d.name: d for d in devices}
    for n in c.attached.kernels:
        param = c.egraph.node(n).param
        c.kernel_times[param] = by_name[param.device].estimate(c.kernelization.candidates[param.candidate].kernel)
    c.stage = "kernelized"
    yield c
    extract(c)
    c.stage = "plan"
    yield c
    if options.execute:
        run(c)
        c.stage = "executed"
        yield c


def extract(c: Compilation) -> None:
    """(Re-)extract the plan of a kernelized compilation from its kernel times."""
    assert c.egraph is not None and c.kernelization is not None
    transfer_time = transfer_estimate(c.devices)
    kernel_time = c.kernel_times.__getitem__
    c.extraction = greedy(c.egraph, c.device_pools, kernel_time, transfer_time)
    c.plan = build_plan(c.extraction, c.kernelization, kernel_time, transfer_time)


def run(compilation: Compilation, inputs: Mapping[str, np.ndarray] | None = None) -> Verification:
    """Execute the plan on the program's input values (or ``inputs``) and verify it against the reference."""
    program = compilation.program
    assert compilation.plan is not None
    values = dict(program.input_values() if inputs is None else inputs)
    execution = execute(compilation.plan, compilation.devices, values)
    reference = evaluate(program.lower(), values)
    compilation.execution = execution
    compilation.verification = verify(execution.outputs, reference, program)
    return compilation.verification


def verify(outputs: Mapping[str, np.ndarray], reference: Mapping[str, np.ndarray], program: Program) -> Verification:
    """Compare each output with the reference (NaNs must match).

    The tolerance is that of the loosest dtype the program computes in: a float16
    intermediate rounds differently on a device that keeps it in float32 registers.
    """
    dtypes = {i.dtype for i in program.inputs} | {n.dtype for n in program.lower().nodes}
    rtol, atol = max(d.tolerance for d in dtypes)
    checks = []
    for name, want in reference.items():
        got = outputs[name]
        a, b = np.asarray(got, np.float64), np.asarray(want, np.float64)
        same = np.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
        with np.errstate(invalid="ignore"):
            diff = np.where(same, 0.0, np.nan_to_num(np.abs(a - b), nan=np.inf))
        checks.append(OutputCheck(name, float(diff.max(initial=0.0)), rtol, atol, bool(same.all())))
    return Verification(tuple(checks))

"""ExecPlan: the extracted kernels and copies as ordered Allocate / Copy / Launch / Free steps, and running them.

Values (a class in a memory pool) are produced in dependency order; a buffer is
freed right after its last reader, except the program's outputs, which end in
the host pool and are returned.  Executing a plan on real devices returns the
outputs and the measured time of every step; a step that fails raises StepError
naming it and its device (the pipeline then re-plans around it).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.devices.base import Device
from engine.egraph.egraph import EGraph
from engine.extract import Extraction, Value
from engine.kernel.attach import KernelNode
from engine.kernel.ir import HOST, Buffer, Kernel
from engine.kernel.kernelize import Kernelization
from engine.kernel.schedule import DEFAULT_VARIANT, Variant
from engine.program.values import check_inputs


@dataclass(frozen=True)
class Allocate:
    """A buffer for ``value`` in its pool; ``input`` names the program input it is filled with, if any."""

    value: Value
    buffer: Buffer
    input: str | None = None


@dataclass(frozen=True)
class Copy:
    source: Value
    target: Value
    buffer: Buffer
    predicted: float


@dataclass(frozen=True)
class Launch:
    """Run ``kernel`` on ``device``, reading ``inputs`` and writing ``outputs`` (values in the device's pool)."""

    kernel: Kernel
    device: str
    inputs: tuple[Value, ...]
    outputs: tuple[Value, ...]
    predicted: float
    variant: Variant = DEFAULT_VARIANT
    measured: bool = False
    """Whether ``predicted`` is the tuner's measured time (else the cost model's prediction)."""
    name: str = ""
    """The kernel's readable name (``Kernelization.names``)."""
    candidate: str = ""
    """The kernel's candidate id in the Kernelization (what links a step to the program tensors it computes)."""


@dataclass(frozen=True)
class Free:
    value: Value
    buffer: Buffer


Step = Allocate | Copy | Launch | Free


@dataclass(frozen=True)
class ExecPlan:
    steps: tuple[Step, ...]
    outputs: Mapping[str, Value]

    @property
    def predicted(self) -> float:
        """Predicted seconds of all launches and copies (each counted once)."""
        return sum(s.predicted for s in self.steps if isinstance(s, Copy | Launch))

    @property
    def peak_bytes(self) -> int:
        """The most memory held at once, summed over pools."""
        held = peak = 0
        for s in self.steps:
            if isinstance(s, Allocate):
                held += s.buffer.nbytes
                peak = max(peak, held)
            elif isinstance(s, Free):
                held -= s.buffer.nbytes
        return peak

    def launches(self) -> list[Launch]:
        return [s for s in self.steps if isinstance(s, Launch)]

    @property
    def unmeasured(self) -> int:
        """Launches whose time is predicted only (their kernel was not timed on its device)."""
        return sum(not s.measured for s in self.launches())

    def coverage(self) -> str:
        """``all 3 launches measured`` or ``2 of 5 launches predicted only``."""
        n = len(self.launches())
        return f"all {n} launches measured" if not self.unmeasured else f"{self.unmeasured} of {n} launches predicted only"


def build_plan(
    extraction: Extraction,
    kz: Kernelization,
    kernel_time: Callable[[KernelNode], float],
    transfer_time: Callable[[int, str, str], float],
    variant: Callable[[KernelNode], Variant] = lambda kn: DEFAULT_VARIANT,
    measured: Callable[[KernelNode], bool] = lambda kn: False,
) -> ExecPlan:
    """Order the extraction's choices into steps (inputs before users), freeing buffers after their last use.

    Each kernel launches in ``variant(kernel node)`` (the tuned or suggested one); ``measured(kernel node)``
    says whether its ``kernel_time`` was measured.
    """
    egraph = kz.egraph
    order = _topological(egraph, extraction)
    reads: dict[Value, list[int]] = {}
    steps: list[Step] = []
    for value in order:
        choice = extraction.choices[value]
        buffer = _buffer(egraph, value)
        op, param, children = egraph.node(choice.node)
        if op == "leaf":
            steps.append(Allocate(value, buffer, input=param))  # type: ignore[arg-type]
            continue
        steps.append(Allocate(value, buffer))
        if choice.source is not None:
            src = choice.source
            steps.append(Copy(src, value, buffer, transfer_time(buffer.nbytes, src[1], value[1])))
            reads.setdefault(src, []).append(len(steps) - 1)
        else:
            assert isinstance(param, KernelNode)
            pool = value[1]
            inputs = tuple((ch, pool) for ch in children)
            kernel = kz.candidates[param.candidate].kernel
            steps.append(Launch(kernel, param.device, inputs, (value,), kernel_time(param), variant(param),
                                measured(param), kz.name(param.candidate), param.candidate))
            for v in inputs:
                reads.setdefault(v, []).append(len(steps) - 1)
    keep = set(extraction.outputs.values())
    frees: dict[int, list[Value]] = {}
    for value, at in reads.items():
        if value not in keep:
            frees.setdefault(max(at), []).append(value)
    final: list[Step] = []
    for i, step in enumerate(steps):
        final.append(step)
        final.extend(Free(v, _buffer(egraph, v)) for v in frees.get(i, []))
    return ExecPlan(tuple(final), dict(extraction.outputs))


def _buffer(egraph: EGraph, value: Value) -> Buffer:
    cls = egraph.eclass(value[0])
    return Buffer(cls.shape, cls.dtype)


def _topological(egraph: EGraph, extraction: Extraction) -> list[Value]:
    """The chosen values, each after the values it reads (depth-first from the outputs, deterministic)."""
    order: list[Value] = []
    done: set[Value] = set()
    for root in sorted(set(extraction.outputs.values())):
        stack: list[tuple[Value, bool]] = [(root, False)]
        while stack:
            value, expanded = stack.pop()
            if value in done:
                continue
            if expanded:
                done.add(value)
                order.append(value)
                continue
            stack.append((value, True))
            stack.extend((d, False) for d in reversed(_dependencies(egraph, extraction, value)) if d not in done)
    return order


def _dependencies(egraph: EGraph, extraction: Extraction, value: Value) -> list[Value]:
    choice = extraction.choices[value]
    if choice.source is not None:
        return [choice.source]
    op, _, children = egraph.node(choice.node)
    return [(ch, value[1]) for ch in children] if op == "kernel" else []


class StepError(RuntimeError):
    """Step ``index`` of a plan failed on device ``device`` (its pool's device for a copy or allocation)."""

    def __init__(self, index: int, step: Step, device: str, cause: Exception) -> None:
        first = (str(cause).strip().splitlines() or [type(cause).__name__])[0]
        super().__init__(f"step {index} ({type(step).__name__.lower()}) on {device}: {first}")
        self.index, self.step, self.device, self.cause = index, step, device, cause


def _step_device(step: Step, by_pool: Mapping[str, Device]) -> str:
    """The device a step runs on: a launch's, else that of the device pool it touches (``host`` if none)."""
    if isinstance(step, Launch):
        return step.device
    pools = (step.source[1], step.target[1]) if isinstance(step, Copy) else (step.value[1],)
    return next((by_pool[p].name for p in pools if p in by_pool), HOST)


@dataclass(frozen=True)
class Execution:
    """Outputs of running a plan, and the measured seconds of each step (0 for allocations and frees)."""

    outputs: Mapping[str, np.ndarray]
    step_times: tuple[float, ...]

    @property
    def total(self) -> float:
        return sum(self.step_times)


def execute(plan: ExecPlan, devices: Sequence[Device], inputs: Mapping[str, np.ndarray]) -> Execution:
    """Run every step of ``plan``; inputs are host arrays by program input name.

    Raises InputError (before any step) when an input array is missing or of the wrong shape or dtype, and
    StepError when a step fails (after freeing the device buffers it holds).
    """
    declared = {s.input: (s.buffer.shape, s.buffer.dtype) for s in plan.steps if isinstance(s, Allocate) and s.input}
    run = _Run(plan, devices, check_inputs(declared, inputs))
    for device in devices:  # devices that build programs build all of the plan's kernels at once
        with contextlib.suppress(Exception):  # a failing kernel's own compile() reports it, at its step
            device.compile_many([(s.kernel, s.variant) for s in plan.launches() if s.device == device.name])
    times: list[float] = []
    for index, step in enumerate(plan.steps):
        try:
            times.append(run.step(step))
        except Exception as e:
            run.release()
            raise StepError(index, step, _step_device(step, run.by_pool), e) from e
    outputs = {name: np.asarray(run.handles[v]).reshape(_shape(plan, v)) for name, v in plan.outputs.items()}
    return Execution(outputs, tuple(times))


class _Run:
    """The state of one execution: live buffers by value, kernels compiled so far."""

    def __init__(self, plan: ExecPlan, devices: Sequence[Device], inputs: Mapping[str, np.ndarray]) -> None:
        self.by_name = {d.name: d for d in devices}
        self.by_pool = {d.pool: d for d in devices if d.pool != HOST}
        self.inputs = inputs
        self.handles: dict[Value, Any] = {}
        self.compiled: dict[tuple[str, str, Variant], Any] = {}
        self.copied = {s.target for s in plan.steps if isinstance(s, Copy)}  # their Copy makes the buffer

    def step(self, step: Step) -> float:
        """Run ``step``; its measured seconds (0 for allocations and frees)."""
        handles, by_pool = self.handles, self.by_pool
        if isinstance(step, Allocate):
            pool = step.value[1]
            if step.input is not None:
                handles[step.value] = np.ascontiguousarray(self.inputs[step.input], step.buffer.dtype.numpy)
            elif step.value in self.copied:
                pass
            elif pool == HOST:
                handles[step.value] = np.empty(step.buffer.shape, step.buffer.dtype.numpy)
            else:
                handles[step.value] = by_pool[pool].alloc(step.buffer)
            return 0.0
        if isinstance(step, Copy):
            start = time.perf_counter()
            src, dst = step.source[1], step.target[1]
            data = handles[step.source] if src == HOST else by_pool[src].download(handles[step.source], step.buffer)
            if dst == HOST:
                handles[step.target] = np.asarray(data).reshape(step.buffer.shape)
            else:
                handles[step.target] = by_pool[dst].upload(np.ascontiguousarray(data))
            return time.perf_counter() - start
        if isinstance(step, Launch):
            device = self.by_name[step.device]
            key = (step.kernel.key, step.device, step.variant)
            if key not in self.compiled:
                self.compiled[key] = device.compile(step.kernel, step.variant)
            ins = [handles[v] for v in step.inputs]
            outs = [handles[v] for v in step.outputs]
            return device.launch(self.compiled[key], ins, outs)
        pool = step.value[1]
        handle = handles.pop(step.value)
        if pool != HOST:
            by_pool[pool].free(handle)
        return 0.0

    def release(self) -> None:
        """Free every device buffer still held (after a failure; errors freeing are ignored)."""
        for (_, pool), handle in self.handles.items():
            if pool != HOST:
                with contextlib.suppress(Exception):
                    self.by_pool[pool].free(handle)
        self.handles.clear()


def _shape(plan: ExecPlan, value: Value) -> tuple[int, ...]:
    for step in plan.steps:
        if isinstance(step, Allocate) and step.value == value:
            return step.buffer.shape
    raise AssertionError(value)

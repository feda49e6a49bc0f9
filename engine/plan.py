"""ExecPlan: the extracted kernels and copies as ordered Allocate / Copy / Launch / Free steps, and running them.

Values (a class in a memory pool) are produced in dependency order; a buffer is
freed right after its last reader, except the program's outputs, which end in
the host pool and are returned.  Executing a plan on real devices returns the
outputs and the measured time of every step; a step that fails raises StepError
naming it and its device (the pipeline then re-plans around it).

``execute(..., timed=False)`` runs a plan as a caller who wants its outputs does:
launches are queued without a wait or a timer each (``Device.launch_queued``),
so the run costs what its copies and kernels cost, not a timed launch's waits.
A ``Session`` runs one plan again and again and keeps its inputs on the devices
between runs (see ``Session`` for what counts as an unchanged input).
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import numpy as np

from engine import units
from engine.devices import staging
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
    variant: Callable[[KernelNode], Variant] = lambda kn: DEFAULT_VARIANT,
    measured: Callable[[KernelNode], bool] = lambda kn: False,
) -> ExecPlan:
    """Order the extraction's choices into steps (inputs before users), freeing buffers after their last use.

    Each kernel launches in ``variant(kernel node)`` (the tuned or suggested one); ``measured(kernel node)``
    says whether its ``kernel_time`` was measured.  A copy costs what the extraction priced it at (its choice's
    time: nothing for an input resident on the devices).
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
            steps.append(Copy(src, value, buffer, choice.time))
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
    """Outputs of running a plan, and the measured seconds of each step (0 for allocations and frees, and for
    launches when the run was not ``timed``)."""

    outputs: Mapping[str, np.ndarray]
    step_times: tuple[float, ...]
    wall: float = 0.0
    """Wall seconds from the first step to the outputs on the host."""
    timed: bool = True
    """Whether each launch was timed on its device (else launches were queued and their times are 0)."""
    first: float | None = None
    """The first run's total, when ``step_times`` are the medians of the runs after it (``steady``)."""
    reruns: int = 0
    """How many runs after the first ``step_times`` are the medians of (0: one run, as it was)."""

    @property
    def total(self) -> float:
        return sum(self.step_times)

    def describe(self) -> str:
        """The measured total, and what it is: ``9.97 ms (median of 2 reruns; first run 14.1 ms)``."""
        if self.first is None:
            return units.seconds(self.total)
        return (f"{units.seconds(self.total)} (median of {units.plural(self.reruns, 'rerun')}; "
                f"first run {units.seconds(self.first)})")


def identical(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether ``a`` and ``b`` have one dtype and shape and hold the same bytes (NaN payloads and the signs of
    zeros included), compared chunk by chunk: no temporary as large as either."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return staging.same_bytes(staging.as_bytes(np.ascontiguousarray(a)), staging.as_bytes(np.ascontiguousarray(b)))


def steady(runs: Sequence[Execution]) -> Execution:
    """One execution standing for ``runs`` of the same plan: per step the median time of the runs after the
    first, whose one-time costs (kernels loaded, caches cold, a runtime's first allocations) it keeps apart as
    ``first``; the last run's outputs.  Trials and the cost models are about repeated launches: this is the time
    to set beside them."""
    if len(runs) == 1:
        return runs[0]
    later = runs[1:]
    times = tuple(statistics.median(r.step_times[i] for r in later) for i in range(len(runs[0].step_times)))
    return Execution(runs[-1].outputs, times, statistics.median(r.wall for r in later), runs[0].timed,
                     runs[0].total, len(later))


def _declared(plan: ExecPlan) -> dict[str, tuple[tuple[int, ...], Any]]:
    return {s.input: (s.buffer.shape, s.buffer.dtype) for s in plan.steps if isinstance(s, Allocate) and s.input}


def _compile_all(plan: ExecPlan, devices: Sequence[Device]) -> None:
    for device in devices:  # devices that build programs build all of the plan's kernels at once
        with contextlib.suppress(Exception):  # a failing kernel's own compile() reports it, at its step
            device.compile_many([(s.kernel, s.variant) for s in plan.launches() if s.device == device.name])


def execute(plan: ExecPlan, devices: Sequence[Device], inputs: Mapping[str, np.ndarray], timed: bool = True
            ) -> Execution:
    """Run every step of ``plan``; inputs are host arrays by program input name.  ``timed``: each launch waits and
    reports its device time (what tuning and the cost models' feedback read); False: launches are queued, as a
    caller that only wants the outputs runs them.

    Raises InputError (before any step) when an input array is missing or of the wrong shape or dtype, and
    StepError when a step fails (after freeing the device buffers it holds).
    """
    run = _Run(_Layout(plan, devices), check_inputs(_declared(plan), inputs), timed)
    _compile_all(plan, devices)
    return run.all()


class _Layout:
    """What the runs of one plan on one set of devices look up: found once per ``execute``, once per ``Session``
    (its runs repeat none of these scans over the steps)."""

    def __init__(self, plan: ExecPlan, devices: Sequence[Device]) -> None:
        self.plan = plan
        self.by_name = {d.name: d for d in devices}
        self.by_pool = {d.pool: d for d in devices if d.pool != HOST}
        self.copied = {s.target for s in plan.steps if isinstance(s, Copy)}  # their Copy makes the buffer
        self.input_of = {s.value: s.input for s in plan.steps if isinstance(s, Allocate) and s.input}
        self.shapes = {name: _shape(plan, v) for name, v in plan.outputs.items()}
        """Each output's shape, by output name."""
        pools = {v[1] for s in plan.steps if isinstance(s, Copy) for v in (s.source, s.target)} - {HOST}
        launching = {s.device for s in plan.launches()}
        self.used = [d for d in devices if d.pool in pools or d.name in launching]
        """The devices some step of the plan runs on (what a run of queued launches waits for at its end)."""


class _Run:
    """The state of one execution: live buffers by value, kernels compiled so far, the session whose resident
    inputs it reads (if any)."""

    def __init__(self, layout: _Layout, inputs: Mapping[str, np.ndarray], timed: bool,
                 session: Session | None = None) -> None:
        self.layout = layout
        self.plan = layout.plan
        self.by_name, self.by_pool = layout.by_name, layout.by_pool
        self.copied, self.input_of = layout.copied, layout.input_of
        self.inputs = inputs
        self.timed = timed
        self.session = session
        self.handles: dict[Value, Any] = {}
        self.borrowed: set[Value] = set()
        """Values whose device buffer is the session's (a resident input, a kept buffer): never freed by this run."""
        self.compiled: dict[tuple[str, str, Variant], Any] = {} if session is None else session._compiled

    def all(self) -> Execution:
        """Run every step; the outputs and the times (StepError when one fails, its buffers freed)."""
        plan = self.plan
        times: list[float] = []
        start = time.perf_counter()
        for index, step in enumerate(plan.steps):
            try:
                times.append(self.step(step))
            except Exception as e:
                self.release()
                raise StepError(index, step, _step_device(step, self.by_pool), e) from e
        if not self.timed:
            for device in self.layout.used:
                device.finish()
        shapes = self.layout.shapes
        outputs = {name: np.asarray(self.handles[v]).reshape(shapes[name]) for name, v in plan.outputs.items()}
        if self.session is not None and self.session.reuse_outputs:
            self.session._host.update((v, self.handles[v]) for v in plan.outputs.values() if self._own(v))
        return Execution(outputs, tuple(times), time.perf_counter() - start, self.timed)

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
                kept = None if self.session is None else self.session._host.pop(step.value, None)
                handles[step.value] = kept if kept is not None else np.empty(step.buffer.shape, step.buffer.dtype.numpy)
            elif self.session is not None:
                handles[step.value] = self.session._device_buffer(step.value, by_pool[pool], step.buffer)
                self.borrowed.add(step.value)
            else:
                handles[step.value] = by_pool[pool].alloc(step.buffer)
            return 0.0
        if isinstance(step, Copy):
            start = time.perf_counter()
            src, dst = step.source[1], step.target[1]
            name = self.input_of.get(step.source)
            if self.session is not None and name is not None and dst != HOST:
                handles[step.target] = self.session._device_input(name, handles[step.source], by_pool[dst])
                self.borrowed.add(step.target)
                return time.perf_counter() - start
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
            if self.timed:
                return device.launch(self.compiled[key], ins, outs)
            if self.session is not None and self.borrowed.issuperset((*step.inputs, *step.outputs)):
                self.session._prepared(step, device, self.compiled[key], ins, outs)()
            else:
                device.launch_queued(self.compiled[key], ins, outs)
            return 0.0
        pool = step.value[1]
        handle = handles.pop(step.value)
        if pool == HOST and self.session is not None and self._own(step.value):
            self.session._host[step.value] = handle  # the next run writes it again: its pages are already mapped
        elif pool != HOST and step.value not in self.borrowed:
            by_pool[pool].free(handle)
        return 0.0

    def _own(self, value: Value) -> bool:
        """Whether ``value``'s buffer is one this run allocated on the host (not an input, not a download)."""
        return value[1] == HOST and value not in self.input_of and value not in self.copied

    def release(self) -> None:
        """Free every device buffer still held but the session's (after a failure; errors freeing are ignored)."""
        for value, handle in self.handles.items():
            if value[1] != HOST and value not in self.borrowed:
                with contextlib.suppress(Exception):
                    self.by_pool[value[1]].free(handle)
        self.handles.clear()


class Session:
    """Runs one plan again and again, keeping its inputs on the devices between runs; ``close`` (or leaving a
    ``with`` block) frees them.

    An input is uploaded again only when it changed.  **Unchanged** means: the array given for the input now has
    the dtype, the shape and, byte for byte, the contents of the array that was uploaded for it last.  Identity
    is neither needed nor trusted: a numpy array can be written in place through any view of its memory, and
    numpy keeps no version to tell, so every run compares the array with a private host snapshot taken at its
    upload (a read of the input on the host, on the copying threads, instead of a copy to the device).  The
    one exception costs nothing: the read-only array ``put`` returns, passed back as it is, is its own snapshot
    and cannot have changed (it is a view of memory only the session holds, and numpy refuses to make such a
    view writeable).  So a session never runs on stale data.

    Host buffers of intermediate values are kept from one run to the next: a freshly allocated buffer of a few
    MiB costs page faults on its first write, a kept one does not.  With ``reuse_outputs`` the outputs' host
    buffers are kept too, so each run overwrites the arrays the previous run returned (as a JIT that replays
    into the same buffers does); without it every run returns new arrays.

    Device buffers of the values the plan's kernels write are kept too, one per value for the session's life
    (so it holds all of them at once, where a single execution frees each after its last reader).  A launch
    whose every buffer is the session's (kept, or a resident input) is prepared once by its device
    (``Device.prepare``: the host work of a launch, such as operand views and scratch memory) and replayed in
    later runs; a new upload of an input drops the prepared launches, which are prepared again on its buffer.

    Launches are queued, not timed, unless ``timed`` (then each step's time is measured, as ``execute`` does,
    and nothing is prepared).
    ``uploads`` and ``reused`` count the input copies made and saved, per device pool.
    """

    def __init__(self, plan: ExecPlan, devices: Sequence[Device], timed: bool = False,
                 reuse_outputs: bool = False) -> None:
        self.plan = plan
        self.devices = list(devices)
        self.timed = timed
        self.reuse_outputs = reuse_outputs
        self._host: dict[Value, np.ndarray] = {}
        """Host buffers of the last run kept for the next, by value (see the class docstring)."""
        self.uploads = 0
        self.reused = 0
        self._declared = _declared(plan)
        self.inputs = tuple(self._declared)
        """The names of the inputs the plan reads (what ``run`` needs and ``put`` takes)."""
        self._compiled: dict[tuple[str, str, Variant], Any] = {}
        self._snapshots: dict[str, np.ndarray] = {}
        """Per input, the bytes last uploaded (read-only, private to the session)."""
        self._given: dict[str, np.ndarray] = {}
        """Per input, the read-only view of its snapshot that ``put`` handed out."""
        self._held: dict[tuple[str, str], tuple[Device, Any]] = {}
        """Device buffers of inputs by (input, pool)."""
        self._fresh: set[str] = set()
        """Inputs checked in the current run (each is compared once per run, whatever number of pools it goes to)."""
        self._buffers: dict[Value, tuple[Device, Any]] = {}
        """Device buffers of the values kernels write, kept from one run to the next."""
        self._launches: dict[int, tuple[Callable[[], None], tuple[Any, ...]]] = {}
        """Launches prepared on the session's buffers (``Device.prepare``), replayed by later runs, with the buffers
        they were prepared on, by the ``id`` of their step (the plan holds the steps: their ids stay theirs)."""
        self.closed = False
        self._layout = _Layout(plan, self.devices)
        _compile_all(plan, self.devices)

    def run(self, inputs: Mapping[str, np.ndarray]) -> Execution:
        """Run the plan on ``inputs`` (host arrays by input name), reusing the device copies of unchanged inputs.
        Raises InputError and StepError as ``execute`` does; after a StepError the resident inputs stay."""
        if self.closed:
            raise RuntimeError("the session is closed")
        checked = check_inputs(self._declared, inputs)
        self._fresh = set()
        return _Run(self._layout, checked, self.timed, self).all()

    def put(self, name: str, array: np.ndarray) -> np.ndarray:
        """Upload ``array`` as input ``name`` to every pool the plan copies it to, now, and return a read-only
        array of its contents: passed to ``run`` as it is, it is reused without comparing bytes."""
        if self.closed:
            raise RuntimeError("the session is closed")
        (checked,) = check_inputs({name: self._declared[name]}, {name: array}).values()
        self._renew(name, checked)
        layout = self._layout
        pools = {s.target[1] for s in self.plan.steps
                 if isinstance(s, Copy) and s.target[1] != HOST and layout.input_of.get(s.source) == name}
        for pool in sorted(pools):
            self._upload(name, checked, layout.by_pool[pool])
        return self._given[name]

    def _renew(self, name: str, array: np.ndarray) -> None:
        """Drop input ``name``'s device copies and take a new snapshot of ``array`` (and its read-only view)."""
        self._drop(name)
        snapshot = np.array(array, copy=True, order="C")
        snapshot.flags.writeable = False
        given = snapshot.view()
        self._snapshots[name], self._given[name] = snapshot, given
        self._fresh.add(name)

    def _unchanged(self, name: str, array: np.ndarray) -> bool:
        """Whether ``array`` is what was last uploaded for ``name`` (see the class docstring)."""
        if array is self._given.get(name):
            return True
        snapshot = self._snapshots.get(name)
        return snapshot is not None and identical(array, snapshot)

    def _upload(self, name: str, array: np.ndarray, device: Device) -> Any:
        handle = device.upload(array)
        self._held[(name, device.pool)] = (device, handle)
        self.uploads += 1
        return handle

    def _device_input(self, name: str, array: np.ndarray, device: Device) -> Any:
        """The buffer of ``device``'s pool holding input ``name`` as ``array``: the resident one when unchanged,
        else a fresh upload (replacing every pool's stale copy)."""
        if name not in self._fresh:
            if not self._unchanged(name, array):
                self._renew(name, array)
            self._fresh.add(name)
        held = self._held.get((name, device.pool))
        if held is not None:
            self.reused += 1
            return held[1]
        return self._upload(name, array, device)

    def _device_buffer(self, value: Value, device: Device, buffer: Buffer) -> Any:
        """The session's buffer for ``value`` in ``device``'s pool, allocated on its first run."""
        kept = self._buffers.get(value)
        if kept is None:
            kept = self._buffers[value] = (device, device.alloc(buffer))
        return kept[1]

    def _prepared(self, step: Launch, device: Device, compiled: Any, ins: list[Any], outs: list[Any]
                  ) -> Callable[[], None]:
        """``step`` prepared on the session's buffers ``ins`` and ``outs`` (see the class docstring)."""
        prepared = self._launches.get(id(step))
        if prepared is None:
            prepared = self._launches[id(step)] = (device.prepare(compiled, ins, outs), (*ins, *outs))
        return prepared[0]

    def _drop(self, name: str) -> None:
        """Free input ``name``'s device copies, and forget the launches prepared on them."""
        dropped = [self._held.pop(k) for k in [k for k in self._held if k[0] == name]]
        self._launches = {k: (queue, handles) for k, (queue, handles) in self._launches.items()
                          if not any(h is d for _, d in dropped for h in handles)}
        for device, handle in dropped:
            with contextlib.suppress(Exception):  # a lost device's buffer is gone with it
                device.free(handle)

    @property
    def resident(self) -> int:
        """Device buffers held for inputs now."""
        return len(self._held)

    def close(self) -> None:
        """Free every resident input buffer; the session runs no more."""
        for name in list(self._snapshots):
            self._drop(name)
        self._launches.clear()
        for device, handle in self._buffers.values():
            with contextlib.suppress(Exception):  # a lost device's buffer is gone with it
                device.free(handle)
        self._buffers.clear()
        self._snapshots.clear()
        self._given.clear()
        self._host.clear()
        self.closed = True

    def __enter__(self) -> Session:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def _shape(plan: ExecPlan, value: Value) -> tuple[int, ...]:
    for step in plan.steps:
        if isinstance(step, Allocate) and step.value == value:
            return step.buffer.shape
    raise AssertionError(value)

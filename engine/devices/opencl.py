"""OpenCL devices through pyopencl: every device of every platform found, each with its own context and queue.

Kernels are compiled from ``engine.kernel.render.opencl.generate``; built programs are
cached per device by source.  Buffers are ``pyopencl.Buffer`` handles (at least a
few bytes, so empty tensors have a handle too).  Launches use a 1-D range of
work items (``launch_size``: one per point, per upcast tile or per group
member), rounded up to the variant's local size, and report the event's
profiled device time.

Copies to and from a device whose memory is not the host's (a discrete GPU) go
through a pinned staging buffer: one ``ALLOC_HOST_PTR`` buffer per device, mapped
once, grown to the largest copy, in chunks so that the DMA overlaps the host's copy
(``engine.devices.staging``); a download reads straight into a pinned block lent as its result, where one is free
(``staging.Blocks``).  Where the runtime cannot make or map one, copies
quietly go from and to the numpy arrays as before; a device whose memory is the
host's (PoCL on the CPU) copies directly by default, since staging would only add
a host copy (``pinned=True`` forces staging there, as tests do).

Freed buffers are kept, by size, for the next allocation of that size (up to
``spare_bytes``): a plan run again allocates the same sizes, and a fresh buffer
costs its first touch (page faults on a CPU runtime) and its release.  Every
command goes through the device's one in-order queue, so a kept buffer that a
queued launch still reads is written again only after that launch.

A device that stops answering (removed, reset, a driver failure: OpenCL's
DEVICE_NOT_AVAILABLE and kin) is marked ``lost``; from then on every operation
on it raises DeviceLostError at once, and the tuner and planner stop using it.
``fault`` is the hook tests inject failures through.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from engine.devices import staging
from engine.devices.base import Device, Nominal, Source, sibling_refusal
from engine.devices.source import opencl_source
from engine.kernel.cost import work
from engine.kernel.ir import Buffer, Kernel
from engine.kernel.render.base import UnsupportedKernelError, check, extensions, function_name
from engine.kernel.render.opencl import generate
from engine.kernel.render.opencl import source as program_source
from engine.kernel.schedule import (
    DEFAULT_VARIANT,
    InvalidVariantError,
    Variant,
    launch_size,
    local_bytes,
    variant_error,
)

try:
    import pyopencl as cl
except ImportError:  # pragma: no cover - pyopencl is a dependency, but discovery must never raise
    cl = None

_MIN_BYTES = 8
"""Smallest allocation: an empty tensor still gets a valid buffer (of the widest element)."""
_REUSE_BYTES = 1 << 20
"""An upload of fewer bytes makes a new buffer filled as it is created (no queued copy and wait); a larger one
writes a kept buffer of its size, if there is one, through the queue (no first touch of new memory)."""


class KernelBuildError(RuntimeError):
    """An OpenCL program failed to build (the message holds the build log), or the device cannot run the kernel."""

    def __init__(self, message: str, source: str = "", log: str = "") -> None:
        super().__init__(message)
        self.source = source
        self.log = log


class DeviceLostError(RuntimeError):
    """The device stopped working; nothing more runs on it."""


_LOST_CODES = frozenset({-1, -2, -34, -36})
"""DEVICE_NOT_FOUND, DEVICE_NOT_AVAILABLE, INVALID_CONTEXT, INVALID_COMMAND_QUEUE: the device is gone."""

Fault = Callable[[str, Any], None]
"""Called before each ``build`` (with the source), ``launch`` (with the OpenCLKernel) and ``transfer`` (None);
what it raises, the operation raises (a DeviceLostError marks the device lost)."""


def nominal(device: Any) -> Nominal:
    """Rough speeds from a ``pyopencl.Device``'s attributes (compute units, clock, vector width, type).

    These are deliberately crude: the planner uses them only for kernels it has
    not timed; autotuning replaces them with measurements.
    """
    units = max(int(device.max_compute_units), 1)
    clock = (int(device.max_clock_frequency) or 1000) * 1e6
    lanes = max(int(device.preferred_vector_width_float), 1)
    if device.type & cl.device_type.GPU:
        return Nominal(
            bandwidth=min(max(units * 25e9, 50e9), 4e12),
            throughput=units * clock * 64,
            overhead=5e-6,
            transfer_bandwidth=20e9,
            transfer_overhead=10e-6,
            units=units,
            lanes=lanes,
        )
    try:  # OpenCL 3.0; older runtimes leave the model one item per group
        multiple = int(device.get_info(cl.device_info.PREFERRED_WORK_GROUP_SIZE_MULTIPLE))
    except (cl.Error, AttributeError):
        multiple = 1
    return Nominal(
        bandwidth=min(units * 8e9, 100e9),
        throughput=units * clock * lanes,
        overhead=20e-6,
        transfer_bandwidth=10e9,
        transfer_overhead=2e-6,
        units=units,
        lanes=lanes,
        group_multiple=max(multiple, 1),
        max_group=max(int(device.max_work_group_size), 1),
    )


@dataclass(frozen=True)
class OpenCLKernel:
    """A kernel built for one OpenCL device (what ``OpenCLDevice.compile`` returns)."""

    kernel: Kernel
    variant: Variant
    source: str
    program: Any = field(repr=False)
    function: Any = field(repr=False)
    """The ``pyopencl.Kernel`` of ``kernel.name``."""
    size: tuple[int, int | None] = (0, None)
    """Its ``launch_size`` (global, local), worked out once: every launch of a plan needs it."""


class OpenCLDevice(Device):
    """One OpenCL device: its own context, a profiling queue, a program cache keyed by source."""

    tunable = True

    def __init__(self, device: Any, name: str, pinned: bool | None = None) -> None:
        self.device = device
        self.name = name
        self.pool = name
        self.context = cl.Context([device])
        self.queue = cl.CommandQueue(self.context, device, properties=cl.command_queue_properties.PROFILING_ENABLE)
        self.programs: dict[str, Any] = {}
        """Built programs by source."""
        self.kernels: dict[str, OpenCLKernel] = {}
        """Compiled kernels by source, reused: PoCL specialises a kernel object for its launch size on its first
        launch, so the plan launches the object the tuner warmed up and timed."""
        self.builds = 0
        """How many programs were built (cache misses)."""
        self.nominal: Nominal = nominal(device)
        self.lost: str | None = None
        """Why the device stopped working, once it has (then every operation raises DeviceLostError)."""
        self.fault: Fault | None = None
        self.pinned = _discrete(device) if pinned is None else pinned
        """Whether copies go through the pinned staging buffer (it turns False, for good, where the runtime cannot
        make one)."""
        self._stage: tuple[Any, np.ndarray] | None = None
        self._block_buffers: list[tuple[Any, np.ndarray]] = []
        self._blocks = staging.Blocks(self._block)
        """Pinned blocks lent as downloads' arrays (their buffers and mappings in ``_block_buffers``)."""
        self._by_key: dict[tuple[str, Variant], OpenCLKernel] = {}
        self._spare: dict[int, list[Any]] = {}
        """Freed buffers by size, for reuse."""
        self.spare_bytes = min(int(device.global_mem_size) // 4, 1 << 31)
        """The most bytes of freed buffers kept for reuse."""
        self._kept = 0

    @contextmanager
    def _guard(self, what: str, detail: Any = None) -> Iterator[None]:
        """Run an operation: refused once lost; an error meaning the device is gone marks it lost."""
        if self.lost is not None:
            raise DeviceLostError(f"{self.name} is lost ({self.lost})")
        try:
            if self.fault is not None:
                self.fault(what, detail)
            yield
        except DeviceLostError as e:
            self.lost = f"{what}: {e}"
            raise
        except cl.Error as e:
            if _code(e) not in _LOST_CODES:
                raise
            self.lost = f"{what}: {e}"
            raise DeviceLostError(f"{self.name} was lost during {what}: {e}") from e

    def __repr__(self) -> str:
        return f"OpenCLDevice({self.name!r})"

    @property
    def driver_version(self) -> str:
        """Driver and platform version (part of the tuning cache's key)."""
        return f"{self.device.driver_version} / {self.device.platform.version}"

    @property
    def copies(self) -> str:  # type: ignore[override]
        return "pinned" if self.pinned else "pageable"

    @property
    def is_gpu(self) -> bool:
        return bool(self.device.type & cl.device_type.GPU)

    @property
    def barrier_loops(self) -> bool:  # type: ignore[override]
        return not self.is_gpu

    @property
    def cache_bytes(self) -> int:
        """The global memory cache (its last level) the runtime reports (the calibrated model's cache term)."""
        return int(self.device.global_mem_cache_size)

    @property
    def launch_overhead(self) -> float:
        return self.nominal.overhead

    def unsupported(self, kernel: Kernel) -> str | None:
        """Why this device cannot run ``kernel``, or None when it can: f16 is always supported (``vload_half`` is
        core), f64 needs ``cl_khr_fp64``."""
        if (refused := sibling_refusal(kernel)) is not None:
            return refused
        try:
            check(kernel)
        except UnsupportedKernelError as e:
            return str(e)
        missing = sorted(x for x in extensions(kernel) if x not in self.device.extensions.split())
        return f"needs {', '.join(missing)}" if missing else None

    def build(self, source: str) -> Any:
        """The built ``pyopencl.Program`` of ``source`` (cached); raises KernelBuildError with the build log."""
        program = self.programs.get(source)
        if program is None:
            self.builds += 1
            with self._guard("build", source):
                try:
                    program = cl.Program(self.context, source).build()
                except cl.Error as e:  # RuntimeError carries the log in its message
                    if _code(e) in _LOST_CODES:
                        raise
                    log = _build_log(e)
                    raise KernelBuildError(f"OpenCL build failed on {self.name}:\n{log}", source, log) from e
            self.programs[source] = program
        return program

    def variant_error(self, kernel: Kernel, variant: Variant) -> str | None:
        """Why ``variant`` cannot run ``kernel`` here (it does not apply, or exceeds a device limit), or None."""
        error = variant_error(kernel, variant)
        if error is not None:
            return error
        limit = int(self.device.max_work_group_size)
        local = variant.group if variant.group > 1 else variant.local_size
        if local is not None and not 0 < local <= limit:
            return f"local size {local} outside 1..{limit} on {self.name}"
        need = local_bytes(kernel, variant)
        if need > int(self.device.local_mem_size):
            return f"{variant} needs {need} bytes of local memory, {self.name} has fewer"
        return None

    def compile_many(self, items: list[tuple[Kernel, Variant]]) -> None:
        """Build every not yet built kernel of ``items`` in one program; later ``compile`` calls find them.

        Items this device cannot run are left out; if the joint build fails, each kernel is
        built on its own (by ``compile``), so the error names the one that fails.
        """
        todo = {}
        for kernel, variant in items:
            if (kernel.key, variant) in self._by_key:
                continue  # compiled before (``compile`` checks that its source is still the same)
            runs = self.unsupported(kernel) is None and self.variant_error(kernel, variant) is None
            if runs and generate(kernel, variant) not in self.programs:
                todo.setdefault(function_name(kernel, variant), (kernel, variant))
        if len(todo) < 2:
            return
        try:
            program = self.build(program_source(list(todo.values())))
        except KernelBuildError:
            return  # compile() builds them one by one and reports the culprit
        for kernel, variant in todo.values():
            self.programs[generate(kernel, variant)] = program

    def compile(self, kernel: Kernel, variant: Variant = DEFAULT_VARIANT) -> OpenCLKernel:
        """``kernel`` built in ``variant``; one compiled before is found by its key without checking it again (each
        plan execution compiles its launches), if its source (rendered once, ``generate`` is cached) is the same."""
        found = self._by_key.get((kernel.key, variant))
        if found is not None and found.source == generate(kernel, variant):
            return found
        reason = self.unsupported(kernel) or self.variant_error(kernel, variant)
        if reason is not None:
            raise KernelBuildError(f"{self.name} cannot run {kernel.name} ({variant}): {reason}")
        try:
            source = generate(kernel, variant)
        except (InvalidVariantError, UnsupportedKernelError) as e:
            raise KernelBuildError(str(e)) from e
        compiled = self.kernels.get(source)
        if compiled is None:
            program = self.build(source)
            compiled = OpenCLKernel(kernel, variant, source, program, cl.Kernel(program, function_name(kernel, variant)),
                                    launch_size(kernel, variant))
            self.kernels[source] = compiled
        self._by_key[(kernel.key, variant)] = compiled
        return compiled

    def source(self, kernel: Kernel, variant: Variant = DEFAULT_VARIANT) -> Source:
        return opencl_source(kernel, variant)

    def alloc(self, buffer: Buffer) -> Any:
        with self._guard("transfer"):
            return self._buffer(max(buffer.nbytes, _MIN_BYTES))

    def _buffer(self, nbytes: int) -> Any:
        """A buffer of ``nbytes``: a kept one of that size, else a new one."""
        kept = self._spare.get(nbytes)
        if kept:
            self._kept -= nbytes
            return kept.pop()
        return cl.Buffer(self.context, cl.mem_flags.READ_WRITE, nbytes)

    def _staging(self, nbytes: int) -> np.ndarray | None:
        """The mapped pinned staging buffer, at least ``nbytes`` long (grown in whole MiB), or None when copies do
        not stage or the runtime cannot make one (then they stop staging)."""
        if not self.pinned:
            return None
        if self._stage is not None and self._stage[1].size >= nbytes:
            return self._stage[1]
        self._drop_stage()
        self._stage = self._mapped(-(-max(nbytes, 1) // (1 << 20)) * (1 << 20))
        return None if self._stage is None else self._stage[1]

    def _mapped(self, size: int) -> tuple[Any, np.ndarray] | None:
        """A pinned (``ALLOC_HOST_PTR``) buffer of ``size`` bytes, mapped once for good, with its mapping; None
        where the runtime cannot make one (copies then stop staging)."""
        try:
            buf = cl.Buffer(self.context, cl.mem_flags.READ_WRITE | cl.mem_flags.ALLOC_HOST_PTR, size)
            host, _ = cl.enqueue_map_buffer(self.queue, buf, cl.map_flags.READ | cl.map_flags.WRITE, 0, (size,),
                                            np.uint8, is_blocking=True)
        except cl.Error as e:
            if _code(e) in _LOST_CODES:
                raise
            self.pinned = False
            return None
        return buf, host

    def _block(self, size: int) -> np.ndarray | None:
        """A pinned block for ``staging.Blocks`` (its buffer kept mapped as long as the device lives)."""
        mapped = self._mapped(size)
        if mapped is None:
            return None
        self._block_buffers.append(mapped)
        return mapped[1]

    def _drop_stage(self) -> None:
        """Unmap and release the staging buffer (before a larger one replaces it)."""
        if self._stage is not None:
            buf, host = self._stage
            self._stage = None
            host.base.release(self.queue)
            buf.release()

    def upload(self, array: np.ndarray) -> Any:
        data = np.ascontiguousarray(array)
        with self._guard("transfer"):
            stage = self._staging(data.nbytes) if data.nbytes >= _MIN_BYTES else None
            if stage is not None:
                handle = self._buffer(data.nbytes)
                events: list[Any] = []
                staging.copy_in(stage[:data.nbytes], staging.as_bytes(data), lambda a, b: events.append(
                    cl.enqueue_copy(self.queue, handle, stage[a:b], dst_offset=a, is_blocking=False)))
                events[-1].wait()  # an in-order queue: every chunk has landed
                return handle
            if data.nbytes < _MIN_BYTES:
                handle = self._buffer(_MIN_BYTES)
                if data.nbytes:
                    cl.enqueue_copy(self.queue, handle, data).wait()
                return handle
            if data.nbytes >= _REUSE_BYTES and self._spare.get(data.nbytes):
                handle = self._buffer(data.nbytes)
                cl.enqueue_copy(self.queue, handle, data).wait()
                return handle
            return cl.Buffer(self.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=data)

    def download(self, handle: Any, buffer: Buffer) -> np.ndarray:
        """``handle`` as a host array: read into a pinned block lent as the array itself where one is free
        (``staging.Blocks``), else in chunks through the staging buffer into a fresh array (or straight into it,
        where copies do not stage)."""
        with self._guard("transfer"):
            lease = self._blocks.take(buffer.nbytes) if self.pinned and buffer.nbytes >= _MIN_BYTES else None
            if lease is not None:
                cl.enqueue_copy(self.queue, lease.bytes, handle).wait()
                return lease.array(buffer.shape, buffer.dtype.numpy)
            out = np.empty(buffer.shape, buffer.dtype.numpy)
            stage = self._staging(out.nbytes) if out.nbytes >= _MIN_BYTES else None
            if stage is not None:
                parts = staging.spans(out.nbytes)
                events = [cl.enqueue_copy(self.queue, stage[a:b], handle, src_offset=a, is_blocking=False)
                          for a, b in parts]
                staging.copy_out(staging.as_bytes(out), stage, parts, lambda i: events[i].wait())
            elif out.nbytes:
                cl.enqueue_copy(self.queue, out, handle).wait()
        return out

    def free(self, handle: Any) -> None:
        """Keep ``handle`` for the next allocation of its size while the kept bytes stay under ``spare_bytes``,
        else release it."""
        if self.lost is None and self._kept + handle.size <= self.spare_bytes:
            self._spare.setdefault(handle.size, []).append(handle)
            self._kept += handle.size
        else:
            handle.release()

    def trim(self) -> None:
        """Release every kept buffer."""
        for kept in self._spare.values():
            for handle in kept:
                handle.release()
        self._spare.clear()
        self._kept = 0

    def launch(self, compiled: OpenCLKernel, inputs: list[Any], outputs: list[Any]) -> float:
        """Run ``compiled`` and wait; returns the profiled device time in seconds (0 for an empty shape)."""
        event = self._enqueue(compiled, inputs, outputs)
        if event is None:
            return 0.0
        with self._guard("launch", compiled):
            event.wait()
        return (event.profile.end - event.profile.start) * 1e-9

    def launch_queued(self, compiled: OpenCLKernel, inputs: list[Any], outputs: list[Any]) -> None:
        """Enqueue ``compiled`` and return: the queue is in order, so a later copy or ``finish`` waits for it."""
        self._enqueue(compiled, inputs, outputs)

    def prepare(self, compiled: OpenCLKernel, inputs: list[Any], outputs: list[Any]) -> Callable[[], None]:
        """``launch_queued`` with the buffers' sizes checked once: each call sets the arguments (a kernel object
        may serve two launches of one plan) and enqueues."""
        if not self._fits(compiled, inputs, outputs):
            return lambda: None
        return functools.partial(self._submit, compiled, (*inputs, *outputs))

    def finish(self) -> None:
        with self._guard("launch"):
            self.queue.finish()

    def _enqueue(self, compiled: OpenCLKernel, inputs: list[Any], outputs: list[Any]) -> Any:
        """The event of ``compiled`` enqueued on its buffers (None for an empty shape: nothing to run)."""
        return self._submit(compiled, (*inputs, *outputs)) if self._fits(compiled, inputs, outputs) else None

    @staticmethod
    def _fits(compiled: OpenCLKernel, inputs: list[Any], outputs: list[Any]) -> bool:
        """Whether ``compiled`` has work on these buffers (False for an empty shape); a ValueError for a buffer
        smaller than its declared shape (the kernel indexes by the declared shapes: never let it past an end)."""
        kernel = compiled.kernel
        assert len(inputs) == len(kernel.inputs) and len(outputs) == len(kernel.outputs)
        if kernel.numel == 0:
            return False
        for buffer, b in zip([*inputs, *outputs], [*kernel.inputs, *kernel.output_types]):
            if buffer.size < b.nbytes:
                raise ValueError(f"{kernel.name}: a buffer of {buffer.size} bytes where {b} ({b.nbytes} bytes) is declared")
        return True

    def _submit(self, compiled: OpenCLKernel, buffers: tuple[Any, ...]) -> Any:
        """The event of ``compiled`` enqueued on ``buffers`` (inputs, then outputs), already checked by ``_fits``."""
        size, local = compiled.size
        with self._guard("launch", compiled):
            compiled.function.set_args(*buffers)
            return cl.enqueue_nd_range_kernel(self.queue, compiled.function, (size,), None if local is None else (local,))

    def estimate(self, kernel: Kernel) -> float:
        """A roofline on nominal speeds (see ``nominal``); autotuning replaces it with measured times."""
        n = self.nominal
        return work(kernel).roofline(n.bandwidth, n.throughput, n.overhead)

    def transfer_estimate(self, nbytes: int) -> float:
        n = self.nominal
        return n.transfer_overhead + nbytes / n.transfer_bandwidth


def _discrete(device: Any) -> bool:
    """Whether ``device`` is a GPU with memory of its own (where pinned staging pays); False when unsure."""
    try:
        return bool(device.type & cl.device_type.GPU) and not bool(device.host_unified_memory)
    except Exception:  # a runtime that no longer answers the (deprecated) unified-memory query
        return False


def _code(error: Exception) -> int | None:
    """The OpenCL status code of a ``pyopencl.Error`` (None when it carries none)."""
    try:
        return int(error.code)  # type: ignore[attr-defined]
    except (AttributeError, TypeError, ValueError):
        return None


def _build_log(error: Exception) -> str:
    """The build log pyopencl put in its error (its message is the log, per device)."""
    text = str(error)
    return text if text.strip() else repr(error)


def _short_version(platform_version: str) -> str:
    return re.sub(r"\s+", " ", platform_version.split(",")[0]).strip()


def device_names(found: list[tuple[str, str]]) -> list[str]:
    """Unique, stable names for ``(device name, platform version)`` pairs, in order.

    ``opencl:<device name>``; where two devices share it (e.g. two PoCL platforms
    both offering ``pthread-<cpu>``), the platform version is added, and then an
    ordinal if that is not enough (identical GPUs of one platform).
    """
    base = [f"opencl:{d.strip()}" for d, _ in found]
    names = [b if base.count(b) == 1 else f"{b} ({_short_version(v)})" for b, (_, v) in zip(base, found)]
    seen: dict[str, int] = {}
    out = []
    for n in names:
        count = names.count(n)
        seen[n] = seen.get(n, 0) + 1
        out.append(n if count == 1 else f"{n} #{seen[n]}")
    return out


NO_RUNTIME = ("install an OpenCL runtime, e.g. `sudo apt-get install pocl-opencl-icd` "
              "or `pip install pocl-binary-distribution` (PoCL, for the CPU)")


def discover(notes: list[str] | None = None) -> list[OpenCLDevice]:
    """Every OpenCL device of every platform; an empty list (never an error) when there is none, and then one line
    in ``notes`` that says why and what to install.

    A platform that fails other than by having no device, or a device without a context (PoCL with an
    unwritable cache folder), is left out with a line in ``notes`` saying why.
    """
    found: list = []
    if cl is None:
        why = "pyopencl cannot be imported (`pip install pyopencl`)"
    else:
        try:
            platforms = cl.get_platforms()
        except Exception:  # no ICD loader / PLATFORM_NOT_FOUND_KHR
            platforms = []
        for platform in platforms:
            try:
                listed = platform.get_devices()
                found.extend((platform, d) for d in listed)
                if not listed and notes is not None:
                    notes.append(f"OpenCL platform {platform.name} offers no device (PoCL does so when its cache "
                                 "folder, $POCL_CACHE_DIR or ~/.cache/pocl, cannot be written)")
            except Exception as e:  # a platform without devices raises DEVICE_NOT_FOUND
                if notes is not None and _code(e) != cl.status_code.DEVICE_NOT_FOUND:
                    notes.append(f"OpenCL platform {platform.name} left out: {_first_line(e)}")
        why = "no OpenCL platform found" if not platforms else "no OpenCL device found" if not found else ""
        why += f": {NO_RUNTIME}" if why else ""
    if why and notes is not None:
        notes.append(f"OpenCL devices not offered: {why}")
    names = device_names([(d.name, p.version) for p, d in found])
    devices = []
    for (_, d), name in zip(found, names):
        try:
            devices.append(OpenCLDevice(d, name))
        except Exception as e:  # a device that cannot give a context is left out
            if notes is not None:
                notes.append(f"OpenCL device {name} left out: {_first_line(e)} (is its cache folder writable?)")
    return devices


def _first_line(error: Exception) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]

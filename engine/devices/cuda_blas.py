"""cuBLAS through cupy on a CUDA GPU: the library device for matmul-shaped kernels, with its own memory pool.

It runs what the host BLAS device runs, a kernel whose reduce is ``sum(a * b)``
of two affine float32 loads, as one batched ``cupy.matmul`` (cuBLAS SGEMM), and
only when the kernel's output is that sum itself (no epilogue).  Its buffers
are cupy arrays in the pool ``cuda:<index>``; moving them to or from the host
costs what ``measure_transfer`` timed at discovery.  TF32 stays off: cupy uses
TF32 only when ``CUPY_TF32`` is set, and the device is not offered then.
Absent, with a note, where cupy or a CUDA device is missing.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.devices.base import DEFAULT_VARIANT, Variant
from engine.devices.evaluate import Plan, plan
from engine.devices.numpy_device import contraction
from engine.kernel.ir import Acc, Buffer, Kernel, Load
from engine.program.dtypes import DType

NO_CUDA = "install cupy for the CUDA runtime of the machine (`pip install cupy-cuda12x` or `cupy-cuda13x`)"


@dataclass(frozen=True)
class Transfer:
    """Host<->GPU copy cost as measured: ``latency`` seconds per copy plus bytes over ``bandwidth`` (bytes/s)."""

    latency: float
    bandwidth: float

    def seconds(self, nbytes: int) -> float:
        return self.latency + nbytes / self.bandwidth


@dataclass(frozen=True)
class Matmul:
    """How a contraction kernel maps onto one batched matmul ``(batch, m, k) @ (batch, k, n)``.

    ``a`` and ``b`` are the factor loads; each axis list holds axis numbers of the split kernel (global axes
    first, then reduce axes); ``order`` is the global axes in the matmul result's order (batch, m, n).
    """

    kernel: Kernel
    variant: Variant
    split: Plan
    a: Load
    b: Load
    batch: tuple[int, ...]
    m: tuple[int, ...]
    n: tuple[int, ...]
    k: tuple[int, ...]
    order: tuple[int, ...]


def as_matmul(kernel: Kernel, variant: Variant = DEFAULT_VARIANT) -> Matmul | None:
    """``kernel`` as one batched matmul, or None: not a float32 contraction, an epilogue after the reduce, or a
    global axis that neither factor reads (its output would be a broadcast) or a reduce axis only one reads."""
    if kernel.stages or kernel.reduce is None or kernel.outputs != (Acc(kernel.reduce.dtype),):
        return None
    if kernel.reduce.dtype != DType.F32 or any(b.dtype != DType.F32 for b in (*kernel.inputs, *kernel.output_types)):
        return None
    p = plan(kernel)
    if p.factors is None:
        return None
    loads = contraction(p.kernel)
    if loads is None:
        return None
    a, b = loads
    axes = sorted(p.axes, key=p.axes.get)
    ng = len(p.kernel.vars)
    uses = [(a.index.coefficient(v) != 0, b.index.coefficient(v) != 0) for v in axes]
    if any(ua != ub for ua, ub in uses[ng:]) or not all(ua or ub for ua, ub in uses[:ng]):
        return None
    batch = tuple(i for i in range(ng) if all(uses[i]))
    m = tuple(i for i in range(ng) if uses[i] == (True, False))
    n = tuple(i for i in range(ng) if uses[i] == (False, True))
    k = tuple(i for i in range(ng, len(axes)) if uses[i][0])
    return Matmul(kernel, variant, p, a, b, batch, m, n, k, batch + m + n)


class CublasDevice:
    """cuBLAS SGEMM (TF32 off) through ``cupy.matmul`` on one CUDA device; its buffers are flat cupy arrays."""

    is_gpu = True
    launch_overhead = 8e-6
    """Nominal seconds per launch (a cupy call and its cuBLAS dispatch); autotuning measures real launches."""
    flops = 50e12
    """Nominal fp32 flop/s (no tensor cores) of an H100/H200-class GPU."""
    bandwidth = 3e12
    """Nominal bytes/s of its memory."""

    def __init__(self, cp: Any, index: int, label: str, transfer: Transfer) -> None:
        self._cp = cp
        self.index = index
        self.name = f"cublas:{label}"
        self.pool = f"cuda:{index}"
        self.transfer = transfer
        self.driver_version = f"cupy {cp.__version__} cuda {cp.cuda.runtime.runtimeGetVersion()}"
        self._plans: dict[str, Matmul | None] = {}

    def _matmul(self, kernel: Kernel) -> Matmul | None:
        if kernel.key not in self._plans:
            self._plans[kernel.key] = as_matmul(kernel)
        return self._plans[kernel.key]

    def supports(self, kernel: Kernel) -> bool:
        return self._matmul(kernel) is not None

    def compile(self, kernel: Kernel, variant: Variant = DEFAULT_VARIANT) -> Matmul:
        found = self._matmul(kernel)
        assert found is not None, "not a matmul-shaped kernel"
        return Matmul(**{**found.__dict__, "variant": variant})

    def alloc(self, buffer: Buffer) -> Any:
        with self._cp.cuda.Device(self.index):
            return self._cp.empty(buffer.numel, buffer.dtype.numpy)

    def upload(self, array: np.ndarray) -> Any:
        with self._cp.cuda.Device(self.index):
            return self._cp.asarray(np.ascontiguousarray(array).reshape(-1))

    def download(self, handle: Any, buffer: Buffer) -> np.ndarray:
        return self._cp.asnumpy(handle).astype(buffer.dtype.numpy, copy=False).reshape(buffer.shape)

    def free(self, handle: Any) -> None:
        pass  # cupy's pool takes the memory back when the last reference goes

    def _view(self, flat: Any, load: Load, mm: Matmul) -> Any:
        """``load`` over every axis of the split kernel as a zero-copy strided view (stride 0 where unused)."""
        axes = sorted(mm.split.axes, key=mm.split.axes.get)
        shape = tuple(v.size if load.index.coefficient(v) else 1 for v in axes)
        strides = tuple(load.index.coefficient(v) * flat.itemsize for v in axes)
        return self._cp.lib.stride_tricks.as_strided(flat[load.index.const:], shape, strides)

    def _run(self, mm: Matmul, inputs: list[Any], out: Any) -> None:
        cp = self._cp
        sizes = [v.size for v in sorted(mm.split.axes, key=mm.split.axes.get)]
        dims = [math.prod(sizes[i] for i in g) for g in (mm.batch, mm.m, mm.k, mm.n)]
        av = self._view(inputs[mm.a.input], mm.a, mm)
        bv = self._view(inputs[mm.b.input], mm.b, mm)
        rest_a = tuple(i for i in range(len(sizes)) if i not in (*mm.batch, *mm.m, *mm.k))
        rest_b = tuple(i for i in range(len(sizes)) if i not in (*mm.batch, *mm.k, *mm.n))
        am = av.transpose(mm.batch + mm.m + mm.k + rest_a).reshape(dims[0], dims[1], dims[2])
        bm = bv.transpose(mm.batch + mm.k + mm.n + rest_b).reshape(dims[0], dims[2], dims[3])
        ng = len(mm.split.kernel.vars)
        if mm.order == tuple(range(ng)):
            cp.matmul(am, bm, out=out.reshape(dims[0], dims[1], dims[3]))
            return
        c = cp.matmul(am, bm).reshape([sizes[i] for i in mm.order])
        out.reshape(sizes[:ng])[...] = c.transpose(np.argsort(mm.order))

    def launch(self, compiled: Matmul, inputs: list[Any], outputs: list[Any]) -> float:
        """Run the matmul and return its GPU time (CUDA events around it)."""
        cp = self._cp
        with cp.cuda.Device(self.index):
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            self._run(compiled, inputs, outputs[0])
            end.record()
            end.synchronize()
            return cp.cuda.get_elapsed_time(start, end) * 1e-3

    def estimate(self, kernel: Kernel) -> float:
        """Roofline: the matmul's flops at ``flops`` or its buffers' bytes at ``bandwidth``, plus the launch."""
        nbytes = sum(b.nbytes for b in (*kernel.inputs, *kernel.output_types))
        red = kernel.reduce.size if kernel.reduce is not None else 1
        return self.launch_overhead + max(2 * kernel.numel * red / self.flops, nbytes / self.bandwidth)

    def transfer_estimate(self, nbytes: int) -> float:
        return self.transfer.seconds(nbytes)


def measure_transfer(cp: Any, nbytes: int = 64 << 20, repeats: int = 3) -> Transfer:
    """Host<->GPU copy cost of ordinary (pageable) numpy arrays: best of ``repeats`` uploads and downloads of
    ``nbytes`` and of 4 bytes (the latency), averaged over the two directions."""
    def best(n: int) -> float:
        host = np.ones(n // 4, np.float32)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            cp.asnumpy(cp.asarray(host))
            times.append(time.perf_counter() - start)
        return min(times) / 2

    latency = best(4)
    return Transfer(latency, nbytes / max(best(nbytes) - latency, 1e-9))


def discover(notes: list[str] | None = None) -> list[CublasDevice]:
    """One cuBLAS device per CUDA device; an empty list (never an error) and a note saying why when cupy, a CUDA
    device or its runtime is missing, or when ``CUPY_TF32`` would let cuBLAS round fp32 inputs to TF32."""
    why = ""
    try:
        import cupy as cp
    except Exception:  # not installed, or a cupy built for another CUDA
        cp, why = None, f"cupy cannot be imported: {NO_CUDA}"
    devices: list[CublasDevice] = []
    if cp is not None:
        if os.environ.get("CUPY_TF32", "0") != "0":
            why = "CUPY_TF32 is set (cuBLAS would round fp32 inputs to TF32); unset it"
        else:
            try:
                for i in range(cp.cuda.runtime.getDeviceCount()):
                    with cp.cuda.Device(i):
                        label = cp.cuda.runtime.getDeviceProperties(i)["name"].decode()
                        devices.append(CublasDevice(cp, i, label, measure_transfer(cp)))
            except Exception as e:  # no driver, no device
                why = f"no CUDA device ({str(e).splitlines()[0] if str(e) else type(e).__name__})"
            if not devices and not why:
                why = "no CUDA device"
    if why and notes is not None:
        notes.append(f"cuBLAS devices not offered: {why}")
    return devices

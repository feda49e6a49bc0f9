"""Host devices: generic numpy evaluation of any kernel, and the BLAS library kernel for contractions.

Both keep their buffers in the host pool as numpy arrays.  Their ``estimate``
is a roofline with nominal numbers for a small CPU; autotuning measures real
launches and replaces it.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine import blas_threads
from engine.devices.base import Device, Source, sibling_refusal
from engine.devices.chunk_plan import CHUNK_ELEMENTS, MAX_ELEMENTS, Plan, plan, product_factors
from engine.devices.evaluate import run
from engine.devices.row_plan import RowPlan, plan_rows
from engine.devices.source import numpy_program
from engine.kernel.cost import work
from engine.kernel.ir import HOST, Buffer, Kernel, Load, Where
from engine.kernel.schedule import DEFAULT_VARIANT, Variant

PARALLEL_ELEMENTS = 1 << 20
"""Kernels over fewer points (outputs times reduce size) run on one thread: starting threads costs more, and
after a BLAS call its worker threads keep spinning for tens of milliseconds, taking a core of a small CPU."""


@dataclass(frozen=True)
class NumpyCompiled:
    """A kernel prepared for a host device: its evaluation plan (schedules, axes, chunks)."""

    kernel: Kernel
    variant: Variant
    plan: Plan | RowPlan


class HostMemory:
    """Buffers of the host pool: numpy arrays (shared by the devices that run on the host)."""

    def alloc(self, buffer: Buffer) -> np.ndarray:
        return np.empty(buffer.shape, buffer.dtype.numpy)

    def upload(self, array: np.ndarray) -> np.ndarray:
        return np.array(array, order="C", copy=True)

    def download(self, handle: np.ndarray, buffer: Buffer) -> np.ndarray:
        return np.array(handle, dtype=buffer.dtype.numpy, order="C", copy=True).reshape(buffer.shape)

    def free(self, handle: Any) -> None:
        pass


class NumpyDevice(HostMemory, Device):
    """Runs any kernel with the vectorised numpy evaluator (``engine.devices.evaluate``).

    Kernels are evaluated in L2-sized chunks on ``threads`` threads (one for small kernels), one numpy
    call per node per chunk; contractions go to ``np.matmul`` (BLAS).  Nominal
    numbers measured on a 2-core CPU: float32 ufuncs on L2-resident chunks take
    0.2-0.8 ns an element (exp2 the most), so about 1 G element-ops/s per
    thread; reduces of strided views stream at about 7 GB/s.
    """

    name = "numpy"
    pool = HOST
    driver_version = f"numpy {np.__version__} | openblas thread timeout {blas_threads.IN_EFFECT}"
    """numpy's version and OpenBLAS's thread timeout (``engine.blas_threads``): part of the tuning cache's key."""
    bandwidth = 7e9
    """Nominal bytes/s of host memory as numpy streams it."""
    throughput = 1.0e9
    """Nominal element-ops/s of one thread."""
    flops = 40e9
    """Nominal flop/s of a contraction (BLAS through np.matmul)."""
    launch_overhead = 20e-6
    """Seconds per launch."""
    op_overhead = 2e-6
    """Seconds per numpy call (one per node per chunk)."""

    def __init__(self, max_elements: int = CHUNK_ELEMENTS, threads: int | None = None,
                 view_elements: int | None = MAX_ELEMENTS, parallel_elements: int = PARALLEL_ELEMENTS) -> None:
        self.max_elements = max_elements
        self.threads = min(os.cpu_count() or 1, 8) if threads is None else threads
        self.view_elements = view_elements
        self.parallel_elements = parallel_elements
        self._plans: dict[str, Plan] = {}

    def unsupported(self, kernel: Kernel) -> str | None:
        return sibling_refusal(kernel)

    def _plan(self, kernel: Kernel) -> Plan:
        """The evaluation plan of ``kernel``, made once per kernel key (each execution compiles its launches)."""
        found = self._plans.get(kernel.key)
        if found is None:
            found = self._plans[kernel.key] = plan(kernel, self.max_elements, self.view_elements)
        return found

    def compile(self, kernel: Kernel, variant: Variant = DEFAULT_VARIANT) -> NumpyCompiled:
        planned = plan_rows(kernel, self.max_elements, self.view_elements) if kernel.stages else self._plan(kernel)
        return NumpyCompiled(kernel, variant, planned)

    def source(self, kernel: Kernel, variant: Variant = DEFAULT_VARIANT) -> Source:
        """The numpy calls of one chunk (a row kernel runs as the kernels it fuses: said, not listed)."""
        if kernel.stages:
            return Source("numpy program", "python", f"# {kernel.name}: a row kernel, evaluated stage by stage")
        return Source("numpy program", "python", numpy_program(self._plan(kernel), "numpy"))

    def threads_for(self, kernel: Kernel) -> int:
        """The threads a launch of ``kernel`` uses: one below ``parallel_elements`` points (outputs x reduce)."""
        points = kernel.numel * (kernel.reduce.size if kernel.reduce is not None else 1)
        return self.threads if points >= self.parallel_elements else 1

    def launch(self, compiled: NumpyCompiled, inputs: list[Any], outputs: list[Any]) -> float:
        start = time.perf_counter()
        run(compiled.plan, inputs, outputs, self.threads_for(compiled.kernel))
        return time.perf_counter() - start

    def estimate(self, kernel: Kernel) -> float:
        """Roofline of the plan: streamed bytes vs element-ops over the threads, plus per-call overheads.

        A contraction counts its flops at ``flops`` and its factors' nodes as element-ops
        (a ``Where``, two copies through a broadcast mask, as four).  A row kernel costs the kernels it fuses
        (``row_plan.unfused``: it runs as them), launched once.
        """
        if kernel.stages:
            parts = plan_rows(kernel, self.max_elements, self.view_elements).parts
            return sum(self.estimate(part.kernel) for part in parts) - (len(parts) - 1) * self.launch_overhead
        p = self._plan(kernel)
        w = work(kernel)
        ops = w.ops
        parallel = 1 if p.factors is not None else max(1, min(self.threads_for(kernel), p.chunk_count))  # 0 chunks: empty
        if p.factors is not None:
            assert kernel.reduce is not None
            sizes = [v.size for v in p.axes]
            ops = sum((4 if isinstance(e, Where) else 1) * math.prod(sizes[a] for a in p.spans[e])
                      for e in p.body if not isinstance(e, Load))
            ops += 2 * kernel.numel * kernel.reduce.size * self.throughput / self.flops
        calls = p.chunk_count * (sum(1 for e in (*p.body, *p.outputs) if not isinstance(e, Load)) + 1)
        overhead = self.launch_overhead + self.op_overhead * calls / parallel
        return overhead + max(w.bytes / self.bandwidth, ops / (self.throughput * parallel))

    def transfer_estimate(self, nbytes: int) -> float:
        return 0.0


def is_contraction_load(e: object) -> bool:
    return isinstance(e, Load) and e.dtype.is_float and e.index.is_affine and not e.clamped


def contraction(kernel: Kernel) -> tuple[Load, Load] | None:
    """The two loads of a kernel whose reduce is ``sum(a * b)`` of affine unclamped float loads (a matmul)."""
    factors = product_factors(kernel)
    if factors is None or not all(map(is_contraction_load, factors)):
        return None
    return factors  # type: ignore[return-value]


class LibraryDevice(NumpyDevice):
    """The BLAS library kernel: a matmul-shaped reduce (any layout, batched or not) by ``np.matmul``.

    Elementwise ops after the reduce (bias, activation) run on the numpy
    evaluator, in output chunks of at most ``max_elements``.  Nominal numbers:
    about 50 GFLOP/s on a 2-core CPU (a 1024^3 plan measured 37-45 ms).
    """

    name = "blas"
    pool = HOST
    flops = 50e9
    launch_overhead = 10e-6
    """Seconds per launch: less than the generic device, which evaluates its factors through the node machinery."""

    def __init__(self, max_elements: int = MAX_ELEMENTS, threads: int | None = None,
                 parallel_elements: int = PARALLEL_ELEMENTS) -> None:
        super().__init__(max_elements, threads, max_elements, parallel_elements)

    def unsupported(self, kernel: Kernel) -> str | None:
        if (refused := sibling_refusal(kernel)) is not None:
            return refused
        if kernel.stages:
            return "a row kernel (several reduce stages) is no library call"
        p = self._plan(kernel)  # on the kernel with split variables: heads read as g // k are affine there
        if contraction(p.kernel) is None or p.factors is None:
            return "not a contraction (a sum of a product of two affine loads)"
        return None

    def compile(self, kernel: Kernel, variant: Variant = DEFAULT_VARIANT) -> NumpyCompiled:
        assert self.supports(kernel), "not a contraction kernel"
        return super().compile(kernel, variant)

    def source(self, kernel: Kernel, variant: Variant = DEFAULT_VARIANT) -> Source:
        """The batched ``np.matmul`` of the contraction's factors, and the numpy calls around it."""
        if not self.supports(kernel):
            return Source("BLAS call", "python", f"# {kernel.name} is no contraction: the BLAS device does not run it")
        return Source("BLAS call (numpy matmul)", "python", numpy_program(self._plan(kernel), "blas"))

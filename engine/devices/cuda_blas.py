"""A CUDA GPU through cupy: cuBLAS for matmul-shaped kernels, NVRTC for the others, one memory pool.

A kernel whose reduce is ``sum(a * b)`` of two affine float32 loads runs as
one batched ``cupy.matmul`` (cuBLAS SGEMM); when its outputs do more than
store that sum (bias, activation, residual), the matmul writes a scratch
buffer and an epilogue kernel, compiled by NVRTC from ``engine.kernel.render.cuda``,
reads it.  Every other kernel (elementwise, reduces, row kernels) runs from
that source alone.  Buffers are flat cupy arrays in the pool ``cuda:<index>``.
Copies go through a page-locked staging buffer from cupy's pinned pool, in
chunks (``engine.devices.staging``): an upload copies the numpy array into it,
each chunk's DMA queued as it lands; a download queues every chunk's DMA into it
and copies each chunk out to a fresh numpy array as it lands, or, where a pinned block is free, its DMA lands in that
block, lent as the result (``staging.Blocks``).  Where the runtime gives no pinned memory, copies go
from and to pageable arrays (``cupy.asarray``, ``cupy.asnumpy``).  What copies
cost is measured by ``engine.tuning.links`` like any pool's, keyed by the path
they take (``transfer_estimate`` is the nominal figure used before that).  A
copy to an OpenCL pool on the same GPU goes through the host.  TF32 stays off:
cupy uses TF32 only when ``CUPY_TF32`` is set, and the device is not offered
then.  Absent where cupy is not installed; absent with a note where cupy is but
finds no GPU.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from engine.devices import staging
from engine.devices.base import GPU_THREADS, Device, Link, Source, sibling_refusal
from engine.devices.chunk_plan import Plan, plan
from engine.devices.numpy_device import contraction, is_contraction_load
from engine.devices.row_plan import unfused
from engine.devices.strided_gemm import Matrix, StridedCall, strided_call
from engine.kernel.index import flatten, var
from engine.kernel.ir import Acc, Buffer, Expr, Kernel, Load, Reduce, map_exprs, schedule
from engine.kernel.render import cuda, cuda_gemm
from engine.kernel.schedule import DEFAULT_VARIANT, Variant
from engine.program.dtypes import DType

NO_CUDA = "install cupy for the CUDA runtime of the machine (`pip install cupy-cuda12x` or `cupy-cuda13x`)"
NOMINAL_LINK = Link.line(20e-6, 4e9)
"""Host<->GPU copies before ``engine.tuning.links`` measures them: a pageable figure, low for the pinned path, so
that an unmeasured copy is never priced below what it may cost."""
HOLD = 200e-6
"""Seconds a timed launch keeps the GPU busy ahead of its start event, so that the host's work of queueing the
launch (cupy's matmul dispatch, NVRTC launches: tens of µs) overlaps it and the events time the GPU's work alone,
as an OpenCL device's profiling events do."""
GEMM_SEEDS = (Variant(local_size=256, upcast=4, tile=8, smem=8), Variant(local_size=256, upcast=4, tile=8, smem=16),
              Variant(local_size=128, upcast=4, tile=8, smem=16), Variant(local_size=256, upcast=8, tile=8, smem=8))
"""Implicit-GEMM variants timed first: ``local_size`` threads of ``tile x upcast`` outputs, k in slices of ``smem``."""
_ONE, _ZERO = np.ones(1, np.float32), np.zeros(1, np.float32)
"""cuBLAS's alpha and beta, read from the host."""
NOT_SIBLING_PRODUCTS = ("a siblings kernel of products that are not all cuBLAS calls (float32, with m and n axes), or "
                        "whose output has no CUDA source: one point per thread would read their operands again at every "
                        "point")
SPIN = 'extern "C" __global__ void spin(long long cycles) { long long t = clock64(); while (clock64() - t < cycles) {} }'


@dataclass(frozen=True)
class Nvrtc:
    """A kernel (or a matmul's epilogue) built by NVRTC."""

    kernel: Kernel
    variant: Variant
    function: Any
    geometry: tuple[tuple[int, int, int], int] | None = None
    """Blocks (x, y, z) and threads of an implicit GEMM's launch; None: ``cuda.grid``'s 1-D launch."""


@dataclass(frozen=True)
class Matmul:
    """How a contraction kernel maps onto one batched matmul ``(batch, m, k) @ (batch, k, n)``.

    ``a`` and ``b`` are the factor loads; each axis list holds axis numbers of the split kernel (global axes
    first, then reduce axes); ``order`` is the global axes in the matmul result's order (batch, m, n).
    ``epilogue`` is the kernel that turns the matmul's result (its last input) into the outputs, when they
    are more than that result.
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
    epilogue: Kernel | None
    prologues: tuple[Kernel, ...] = ()
    """Reduce-free kernels that write the factors the kernel computes (not bare loads) into scratch buffers, the
    split kernel's inputs after the kernel's own, so that cuBLAS reads them: rmsnorm's ``x * g * rsqrt(ms)``
    before a matmul, a padded convolution's im2col operand."""
    built: Nvrtc | None = None
    """The epilogue as compiled (``CublasDevice.compile``)."""
    built_prologues: tuple[Nvrtc, ...] = ()
    strided: StridedCall | None = None
    """The matmul as one cuBLAS call on the operands' and the output's own strides (``engine.devices.strided_gemm``);
    None: through ``cupy.matmul``, which copies strided operands and a permuted result."""
    gemm: cuda_gemm.Gemm | None = None
    """The same contraction as an implicit GEMM (``engine.kernel.render.cuda_gemm``): its factors as computed,
    gathered into shared memory by one NVRTC kernel that also evaluates the outputs; the ``smem`` variants."""


def epilogue(kernel: Kernel) -> Kernel | None:
    """``kernel``'s outputs as a reduce-free kernel reading the reduce's result from an extra last input (None
    when the outputs are that result itself)."""
    red = kernel.reduce
    assert red is not None
    if kernel.outputs == (Acc(red.dtype),):
        return None
    acc = Load(len(kernel.inputs), flatten([var(v) for v in kernel.vars], kernel.shape), kernel.numel, red.dtype)
    outputs = map_exprs(list(kernel.outputs), {Acc(red.dtype): acc})
    return Kernel((*kernel.inputs, Buffer(kernel.shape, red.dtype)), kernel.shape, kernel.vars, None, tuple(outputs))


def staged(p: Plan) -> tuple[Plan, tuple[Kernel, ...], dict[Expr, Expr]] | None:
    """``p`` with each factor of its contraction that is not a bare affine load read from a scratch buffer
    instead (a new input after the kernel's own, over the axes the factor spans, row-major), the reduce-free
    kernels that write those buffers, and the factor each scratch load stands for; None when a factor has no
    CUDA source."""
    assert p.factors is not None and p.kernel.reduce is not None
    k, red = p.kernel, p.kernel.reduce
    axes = sorted(p.axes, key=p.axes.get)
    swap: dict[Expr, Expr] = {}
    prologues: list[Kernel] = []
    for factor in p.factors:
        if is_contraction_load(factor):
            continue
        span = tuple(axes[i] for i in sorted(p.spans[factor]))
        shape = tuple(v.size for v in span)
        prologue = Kernel(k.inputs, shape, span, None, (factor,))
        if cuda.cuda_error(prologue) is not None:
            return None
        swap[factor] = Load(len(k.inputs) + len(prologues), flatten([var(v) for v in span], shape),
                            math.prod(shape), factor.dtype)
        prologues.append(prologue)
    if not prologues:
        return p, (), {}
    (body,) = map_exprs([red.body], swap)
    scratch = tuple(Buffer(pro.shape, pro.outputs[0].dtype) for pro in prologues)
    kernel = Kernel((*k.inputs, *scratch), k.shape, k.vars, Reduce(red.op, red.vars, body), k.outputs)
    split = plan(kernel, view_elements=sys.maxsize, windows=False)
    return split, tuple(prologues), {load: f for f, load in swap.items()}


def as_matmul(kernel: Kernel, variant: Variant = DEFAULT_VARIANT) -> Matmul | None:
    """``kernel`` as one batched matmul (after prologues, before an epilogue), or None: not a float32
    contraction, a prologue or epilogue without CUDA source, a global axis that neither factor reads (its output
    would be a broadcast), a reduce axis only one reads, or no m and n axes (batched dot products)."""
    if kernel.stages or kernel.reduce is None or kernel.reduce.dtype != DType.F32:
        return None
    after = epilogue(kernel)
    if after is not None and cuda.cuda_error(after) is not None:
        return None
    if any(b.dtype != DType.F32 for b in kernel.inputs):
        return None
    direct = plan(kernel, view_elements=sys.maxsize, windows=False)
    if direct.factors is None:
        return None
    found = staged(direct)
    if found is None:
        return None
    p, prologues, computed = found
    loads = contraction(p.kernel)
    if loads is None:
        return None
    a, b = loads
    axes = sorted(p.axes, key=p.axes.get)
    ng = len(p.kernel.vars)
    # a size-1 global axis is read by neither factor: count it as a's (an m axis of size 1)
    uses = [(a.index.coefficient(v) != 0 or (i < ng and v.size == 1), b.index.coefficient(v) != 0)
            for i, v in enumerate(axes)]
    if any(ua != ub for ua, ub in uses[ng:]) or not all(ua or ub for ua, ub in uses[:ng]):
        return None
    batch = tuple(i for i in range(ng) if all(uses[i]))
    m = tuple(i for i in range(ng) if uses[i] == (True, False))
    n = tuple(i for i in range(ng) if uses[i] == (False, True))
    k = tuple(i for i in range(ng, len(axes)) if uses[i][0])
    if all(axes[i].size == 1 for i in (*m, *n)):
        return None  # dot products (a row's sum of squares): NVRTC's block reductions beat cuBLAS's 1x1 GEMMs
    roles = [tuple(axes[i] for i in group) for group in (batch, m, n, k)]
    gemm = cuda_gemm.Gemm(direct.kernel, computed.get(a, a), computed.get(b, b), *roles)
    sizes = [v.size for v in axes]
    out_strides = [math.prod(sizes[i + 1:ng]) for i in range(ng)]
    strided = strided_call(sizes, a, b, out_strides, batch, m, n, k, axes)
    return Matmul(kernel, variant, p, a, b, batch, m, n, k, batch + m + n, after, prologues,
                  strided=strided, gemm=gemm)


@dataclass(frozen=True)
class Siblings:
    """A siblings kernel (``Kernel.siblings``) as cuBLAS products: each stage a ``Matmul`` into its slot of one
    scratch buffer, the prologues they share made once, then ``output`` (reading the kernel's inputs and each
    stage's result, in stage order) by NVRTC.

    Two stages whose strided calls differ only in where one operand starts (``paired`` names that side, ``p`` or
    ``q``: a gated unit's two weights beside one shared activation, or two slices of one fused weight) run as one
    strided-batched call of two.
    """

    kernel: Kernel
    stages: tuple[Matmul, ...]
    output: Kernel
    paired: str | None
    built: Nvrtc | None = None
    built_prologues: tuple[Nvrtc, ...] = ()
    """The distinct prologues of every stage, in order of first use."""

    @property
    def prologues(self) -> tuple[Kernel, ...]:
        return tuple({pro.key: pro for mm in self.stages for pro in mm.prologues}.values())


def as_siblings(kernel: Kernel) -> Siblings | None:
    """``kernel`` as cuBLAS products side by side, or None: not a siblings kernel, a stage that reads another's
    result or is not one product (``as_matmul``; its output is the bare sum), or an output kernel without CUDA
    source."""
    if not kernel.siblings or any(isinstance(e, Acc) for s in kernel.stages for e in schedule([s.body])):
        return None
    stages = tuple(as_matmul(Kernel(kernel.inputs, kernel.shape, kernel.vars, s, (Acc(s.dtype),)))
                   for s in kernel.stages)
    output = unfused(kernel)[-1]
    if any(mm is None for mm in stages) or cuda.cuda_error(output) is not None:
        return None
    return Siblings(kernel, stages, output, _paired(stages))  # type: ignore[arg-type]


def _paired(stages: tuple[Matmul, ...]) -> str | None:
    """The side (``p`` or ``q``) on which two stages' strided calls differ only in where the matrix starts (its
    buffer, or its offset in one buffer: two slices of a fused gate-and-up weight), or None."""
    if len(stages) != 2 or any(mm.strided is None or mm.strided.batch != 1 for mm in stages):
        return None
    first, second = (mm.strided for mm in stages)
    assert first is not None and second is not None

    def operand(mm: Matmul, side: str) -> tuple[object, ...]:
        m = getattr(mm.strided, side)
        n = len(mm.kernel.inputs)
        buffer = ("in", m.input) if m.input < n else ("prologue", mm.prologues[m.input - n].key)
        return buffer, m.offset, m.transposed, m.ld

    if replace(first, p=second.p, q=second.q) != second:
        return None
    for side, other in (("p", "q"), ("q", "p")):
        a, b = operand(stages[0], side), operand(stages[1], side)
        if operand(stages[0], other) == operand(stages[1], other) and a[:2] != b[:2] and a[2:] == b[2:]:
            return side
    return None


def _sizes(mm: Matmul) -> list[int]:
    """Sizes of the split kernel's axes (global, then reduce)."""
    return [v.size for v in sorted(mm.split.axes, key=mm.split.axes.get)]


def _dims(mm: Matmul) -> tuple[int, int, int, int]:
    """The batched matmul's (batch, m, k, n)."""
    sizes = _sizes(mm)
    batch, m, k, n = (math.prod(sizes[i] for i in g) for g in (mm.batch, mm.m, mm.k, mm.n))
    return batch, m, k, n


class CublasDevice(Device):
    """cuBLAS SGEMM (TF32 off) through ``cupy.matmul`` and NVRTC kernels on one CUDA device; its buffers are
    flat cupy arrays."""

    is_gpu = True
    tunable = True
    launch_overhead = 8e-6
    """Nominal seconds per launch (a cupy call and its dispatch); autotuning measures real launches."""
    flops = 50e12
    """Nominal fp32 flop/s (no tensor cores): cuBLAS measured 50.7 TFLOP/s at 4096^3 on an H200."""
    bandwidth = 3e12
    """Nominal bytes/s of its memory."""
    tile = 128
    """Side of the output tile one multiprocessor computes at a time (the roofline counts waves of tiles)."""
    gemm_efficiency = 0.5
    """Share of ``flops`` an implicit GEMM is assumed to reach until it is timed (fixed tiles, no library tuning):
    untimed, it is priced above cuBLAS on a plain GEMM and below it only where cuBLAS needs a scratch operand."""

    def __init__(self, cp: Any, index: int, label: str, link: Link = NOMINAL_LINK, units: int = 132,
                 clock_hz: float = 1.98e9, pinned: bool = True) -> None:
        self._cp = cp
        self.index = index
        self.units = units
        """Multiprocessors."""
        self.name = f"cublas:{label}"
        self.pool = f"cuda:{index}"
        self.link = link
        self.driver_version = f"cupy {cp.__version__} cuda {cp.cuda.runtime.runtimeGetVersion()}"
        self._plans: dict[str, Matmul | None] = {}
        self._sibling_plans: dict[str, Siblings | None] = {}
        self._built: dict[tuple[str, Variant], Nvrtc] = {}
        self._hold_cycles = int(HOLD * clock_hz)
        self._spin: Any = None
        self._blas_ready = False
        self.pinned = pinned
        """Whether copies go through pinned memory (it turns False, for good, where the runtime gives none)."""
        self._stage: np.ndarray | None = None
        self._blocks = staging.Blocks(self._pinned)
        """Pinned blocks lent as downloads' arrays."""
        self._grids: dict[tuple[str, Variant], tuple[int, int]] = {}

    @property
    def compute_units(self) -> int:
        return self.units

    @property
    def copies(self) -> str:  # type: ignore[override]
        return "pinned" if self.pinned else "pageable"

    def _matmul(self, kernel: Kernel) -> Matmul | None:
        if kernel.key not in self._plans:
            self._plans[kernel.key] = as_matmul(kernel)
        return self._plans[kernel.key]

    def _siblings(self, kernel: Kernel) -> Siblings | None:
        """``as_siblings(kernel)``, made once; None at once for a kernel that is no siblings kernel."""
        if not kernel.siblings:
            return None
        if kernel.key not in self._sibling_plans:
            self._sibling_plans[kernel.key] = as_siblings(kernel)
        return self._sibling_plans[kernel.key]

    def unsupported(self, kernel: Kernel) -> str | None:
        """A matmul-shaped kernel always runs (cuBLAS), and a siblings kernel of bare products (``as_siblings``);
        other siblings of products are declined; any other kernel needs CUDA source (``cuda.cuda_error``)."""
        if self._siblings(kernel) is not None or self._matmul(kernel) is not None:
            return None
        return NOT_SIBLING_PRODUCTS if sibling_refusal(kernel) is not None else cuda.cuda_error(kernel)

    def variant_error(self, kernel: Kernel, variant: Variant) -> str | None:
        """NVRTC's kernels and epilogues take ``cuda.variant_error``'s variants, as a siblings kernel's output
        kernel does; a bare cuBLAS call none."""
        if (sib := self._siblings(kernel)) is not None:
            return cuda.variant_error(sib.output, variant)
        found = self._matmul(kernel)
        if found is None:
            return cuda.variant_error(kernel, variant)
        if variant.smem:
            return "no implicit GEMM" if found.gemm is None else cuda_gemm.variant_error(found.gemm, variant)
        if found.epilogue is None:
            return None if variant == DEFAULT_VARIANT else "cuBLAS has no variants"
        return cuda.variant_error(found.epilogue, variant)

    def seeds(self, kernel: Kernel) -> list[Variant]:
        """A contraction's implicit-GEMM tiles (128 x 64, 64 x 64, 128 x 128 outputs per block), timed against
        cuBLAS with its prologues; a row kernel's row held in registers (``cuda.row_seeds``)."""
        if self._siblings(kernel) is not None:
            return []
        if kernel.stages:
            return cuda.row_seeds(kernel)
        found = self._matmul(kernel)
        if found is None or found.gemm is None:
            return []
        return [v for v in GEMM_SEEDS if cuda_gemm.variant_error(found.gemm, v) is None]

    def _code(self, kernel: Kernel, variant: Variant) -> tuple[str, str, tuple[tuple[int, int, int], int] | None]:
        """CUDA C, function name and launch geometry of ``kernel`` (an implicit GEMM in an ``smem`` variant)."""
        found = self._matmul(kernel) if variant.smem else None
        if found is not None and found.gemm is not None:
            return (*cuda_gemm.source(found.gemm, variant), cuda_gemm.grid(found.gemm, variant))
        return (*cuda.source(kernel, variant), None)

    def _build(self, kernel: Kernel, variant: Variant) -> Nvrtc:
        """The NVRTC build of ``kernel`` in ``variant``, made once: each plan execution compiles its launches,
        and a fresh module's first launch also loads it (lazily, inside the timed window)."""
        key = (kernel.key, variant)
        if key not in self._built:
            code, name, geometry = self._code(kernel, variant)
            with self._cp.cuda.Device(self.index):
                self._built[key] = Nvrtc(kernel, variant, self._cp.RawModule(code=code).get_function(name), geometry)
        return self._built[key]

    def compile(self, kernel: Kernel, variant: Variant = DEFAULT_VARIANT) -> Matmul | Nvrtc | Siblings:
        if (sib := self._siblings(kernel)) is not None:
            self._start_blas()
            return replace(sib, built=self._build(sib.output, variant),
                           built_prologues=tuple(self._build(pro, DEFAULT_VARIANT) for pro in sib.prologues))
        found = self._matmul(kernel)
        if found is None or variant.smem:
            return self._build(kernel, variant)
        self._start_blas()
        built = None if found.epilogue is None else self._build(found.epilogue, variant)
        prologues = tuple(self._build(pro, DEFAULT_VARIANT) for pro in found.prologues)
        return replace(found, variant=variant, built=built, built_prologues=prologues)

    def _start_blas(self) -> None:
        """Make cuBLAS's handle and workspace, which its first call does (0.1 s after an OpenCL context on the same
        GPU), here, so that no timed launch pays for them."""
        if not self._blas_ready:
            with self._cp.cuda.Device(self.index):
                one = self._cp.ones((2, 2), np.float32)
                self._cp.asnumpy(self._cp.matmul(one, one))
            self._blas_ready = True

    def source(self, kernel: Kernel, variant: Variant = DEFAULT_VARIANT) -> Source:
        """NVRTC's CUDA C; for a matmul-shaped kernel its prologues' CUDA C, the cuBLAS call (a comment) and its
        epilogue's CUDA C; for a siblings kernel its products' prologues and calls, then its output kernel."""
        if (sib := self._siblings(kernel)) is not None:
            return self._siblings_source(sib, variant)
        mm = self._matmul(kernel)
        if mm is None:
            return Source("CUDA C (NVRTC)", "cuda", cuda.source(kernel, variant)[0])
        if variant.smem and mm.gemm is not None:
            return Source("CUDA C (NVRTC), an implicit GEMM", "cuda", self._code(kernel, variant)[0])
        batch, m, k, n = _dims(mm)
        first = "".join(f"// prologue {i + 1}: writes the factor the GEMM reads as in{len(kernel.inputs) + i}\n"
                        f"{cuda.source(pro, DEFAULT_VARIANT)[0]}\n" for i, pro in enumerate(mm.prologues))
        how = (f"by cupy.matmul, {batch} x ({m} x {k}) @ ({k} x {n})" if mm.strided is None else
               f"on the buffers in place, {batch} x ({m} x {k}) @ ({k} x {n}):\n// {mm.strided.describe()}")
        call = first + (f"// {kernel.name}: cuBLAS SGEMM (TF32 off) {how}\n"
                        f"// of the strided views in{mm.a.input}[{mm.a.index}] and in{mm.b.input}[{mm.b.index}]\n")
        if mm.epilogue is None:
            return Source("CUDA C (NVRTC), then a cuBLAS call" if mm.prologues else "cuBLAS call", "cuda", call)
        then = f"// then its epilogue, reading the matmul's result as in{len(kernel.inputs)}:\n"
        return Source("cuBLAS call, then CUDA C (NVRTC)", "cuda", call + then + cuda.source(mm.epilogue, variant)[0])

    def _siblings_source(self, sib: Siblings, variant: Variant) -> Source:
        """The shared prologues' CUDA C, each product's call (paired or not) and the output kernel's CUDA C."""
        n = len(sib.kernel.inputs)
        keys = [pro.key for pro in sib.prologues]
        text = "".join(f"// prologue {i + 1}: writes a factor the products read\n{cuda.source(pro, DEFAULT_VARIANT)[0]}\n"
                       for i, pro in enumerate(sib.prologues))
        if sib.paired is not None:
            text += (f"// {sib.kernel.name}: its {len(sib.stages)} products as one cublasSgemmStridedBatched of 2, "
                     f"the two {'A' if sib.paired == 'p' else 'B'} operands one batch stride apart (the distance "
                     "between their starts):\n")
        for i, mm in enumerate(sib.stages):
            batch, m, k, nn = _dims(mm)
            reads = ", ".join(f"in{ld.input}" if ld.input < n else f"prologue {keys.index(mm.prologues[ld.input - n].key) + 1}"
                              for ld in (mm.a, mm.b))
            how = mm.strided.describe() if mm.strided is not None else "by cupy.matmul"
            text += f"// stage {i}: cuBLAS SGEMM (TF32 off) {batch} x ({m} x {k}) @ ({k} x {nn}) of {reads}: {how}\n"
        text += (f"// then the output kernel, reading stage i's result as in{n}+i (in the calls above, in{n} and up are "
                 "the prologues' scratch):\n"
                 f"{cuda.source(sib.output, variant)[0]}")
        return Source("cuBLAS calls, then CUDA C (NVRTC)", "cuda", text)

    def alloc(self, buffer: Buffer) -> Any:
        with self._cp.cuda.Device(self.index):
            return self._cp.empty(buffer.numel, buffer.dtype.numpy)

    def _pinned(self, nbytes: int) -> np.ndarray | None:
        """``nbytes`` of page-locked memory from cupy's pinned pool as a uint8 array, or None where the runtime gives
        none (copies then stop using it)."""
        if not self.pinned:
            return None
        try:
            memory = self._cp.cuda.alloc_pinned_memory(nbytes)
        except Exception:  # no pinned memory here (a runtime or container that refuses page-locking)
            self.pinned = False
            return None
        return np.ndarray((nbytes,), np.uint8, buffer=memory)

    def _staging(self, nbytes: int) -> np.ndarray | None:
        """The device's pinned upload staging buffer, at least ``nbytes`` long (grown in whole MiB), or None."""
        if self._stage is None or self._stage.size < nbytes:
            self._stage = None  # back to the pool before a larger one is taken
            self._stage = self._pinned(-(-nbytes // (1 << 20)) * (1 << 20))
        return self._stage

    def upload(self, array: np.ndarray) -> Any:
        """A flat cupy array holding ``array``: staged through pinned memory in chunks, each chunk's DMA queued on
        the current stream as it lands, then one wait (the staging buffer is free again on return)."""
        data = np.ascontiguousarray(array).reshape(-1)
        cp = self._cp
        with cp.cuda.Device(self.index):
            stage = self._staging(data.nbytes) if data.nbytes else None
            if stage is None:
                return cp.asarray(data)
            out = cp.empty(data.size, data.dtype)
            raw = out.view(np.uint8)
            stream = cp.cuda.get_current_stream()
            staging.copy_in(stage[:data.nbytes], staging.as_bytes(data),
                            lambda a, b: raw[a:b].set(stage[a:b], stream=stream))
            stream.synchronize()
            return out

    def download(self, handle: Any, buffer: Buffer) -> np.ndarray:
        """``handle`` as a host array (after the launches queued before it, on the same stream).  Its DMA lands
        in a pinned block lent as the array itself where one is free (``staging.Blocks``); else each chunk's DMA
        lands in the pinned staging buffer and is copied out to a fresh array on the copying threads.  A fresh
        pinned array per download would page-lock new memory every time, which costs several times the copy."""
        dtype = buffer.dtype.numpy
        if buffer.nbytes and handle.dtype == dtype and handle.size == buffer.numel:
            with self._cp.cuda.Device(self.index):
                lease = self._blocks.take(buffer.nbytes)
                if lease is not None:
                    handle.view(np.uint8).get(stream=self._cp.cuda.get_current_stream(), out=lease.bytes,
                                              blocking=True)
                    return lease.array(buffer.shape, dtype)
                stage = self._staging(buffer.nbytes)
                if stage is not None:
                    raw = handle.view(np.uint8)
                    stream = self._cp.cuda.get_current_stream()
                    out = np.empty(buffer.shape, dtype)
                    parts = staging.spans(buffer.nbytes)
                    landed = []
                    for a, b in parts:
                        raw[a:b].get(stream=stream, out=stage[a:b], blocking=False)
                        landed.append(stream.record())
                    staging.copy_out(staging.as_bytes(out), stage[:buffer.nbytes], parts,
                                     lambda i: landed[i].synchronize())
                    return out
        return self._cp.asnumpy(handle).astype(dtype, copy=False).reshape(buffer.shape)

    def free(self, handle: Any) -> None:
        pass  # cupy's pool takes the memory back when the last reference goes

    def _view(self, flat: Any, load: Load, mm: Matmul) -> Any:
        """``load`` over every axis of the split kernel as a zero-copy strided view (stride 0 where unused)."""
        axes = sorted(mm.split.axes, key=mm.split.axes.get)
        shape = tuple(v.size if load.index.coefficient(v) else 1 for v in axes)
        strides = tuple(load.index.coefficient(v) * flat.itemsize for v in axes)
        return self._cp.lib.stride_tricks.as_strided(flat[load.index.const:], shape, strides)

    def _sgemm_strided(self, call: StridedCall, p: Any, q: Any, x: Any) -> None:
        """Queue ``call`` on the current stream (cupy's cuBLAS binding sets it on the handle), TF32 off as
        cupy's handle keeps it."""
        from cupy_backends.cuda.libs import cublas

        ptr = [m.data.ptr + 4 * c.offset for m, c in ((p, call.p), (q, call.q), (x, call.x))]
        cublas.sgemmStridedBatched(
            self._cp.cuda.device.get_cublas_handle(), int(call.p.transposed), int(call.q.transposed),
            call.rows, call.cols, call.depth, _ONE.ctypes.data, ptr[0], call.p.ld, call.p.batch_stride,
            ptr[1], call.q.ld, call.q.batch_stride, _ZERO.ctypes.data, ptr[2], call.x.ld, call.x.batch_stride,
            call.batch)

    @staticmethod
    def _address(array: Any) -> int:
        return int(array.data.ptr)

    def _start(self, array: Any, matrix: Matrix) -> int:
        """The address of ``matrix``'s first element in ``array``."""
        return self._address(array) + 4 * matrix.offset

    def _sgemm_pair(self, calls: tuple[StridedCall, StridedCall], side: str, shared: Any, varying: tuple[Any, Any],
                    x: Any) -> None:
        """Two calls (each a batch of 1) that differ only in their ``side`` (``p`` or ``q``) matrix, read from
        ``varying`` (the second starting at the higher address), the other operand ``shared``: one
        strided-batched call of 2 whose batch stride on that side is the matrices' distance, the results
        ``rows * cols`` apart in ``x``."""
        first = calls[0]
        step = (self._start(varying[1], getattr(calls[1], side)) - self._start(varying[0], getattr(first, side))) // 4
        pair = replace(first, batch=2, x=replace(first.x, batch_stride=first.rows * first.cols),
                       p=replace(first.p, batch_stride=step if side == "p" else 0),
                       q=replace(first.q, batch_stride=step if side == "q" else 0))
        p, q = (varying[0], shared) if side == "p" else (shared, varying[0])
        self._sgemm_strided(pair, p, q, x)

    def _sibling_calls(self, sib: Siblings, inputs: list[Any], outputs: list[Any]) -> list[Callable[[], object]]:
        """Shared prologues, the products (one paired call where ``sib.paired``), then the output kernel."""
        cp = self._cp
        scratch = {pro.kernel.key: cp.empty(pro.kernel.numel, np.float32) for pro in sib.built_prologues}
        calls: list[Callable[[], object]] = [lambda pro=pro: self._nvrtc(pro, [*inputs, scratch[pro.kernel.key]])
                                             for pro in sib.built_prologues]
        operands = [[*inputs, *(scratch[pro.key] for pro in mm.prologues)] for mm in sib.stages]
        numel = sib.kernel.numel
        results = cp.empty(len(sib.stages) * numel, np.float32)
        slots = [results[i * numel:(i + 1) * numel] for i in range(len(sib.stages))]
        if sib.paired is None:
            calls += [self._gemm(mm, ops, slot) for mm, ops, slot in zip(sib.stages, operands, slots)]
        else:
            side = sib.paired
            strided = [mm.strided for mm in sib.stages]
            varying = [ops[getattr(c, side).input] for c, ops in zip(strided, operands)]
            other = getattr(strided[0], "q" if side == "p" else "p")
            if self._start(varying[1], getattr(strided[1], side)) < self._start(varying[0], getattr(strided[0], side)):
                for order in (strided, varying, slots):  # the stage whose matrix starts lower goes first
                    order.reverse()
            pair, both = (varying[0], varying[1]), (strided[0], strided[1])
            calls.append(lambda: self._sgemm_pair(both, side, operands[0][other.input], pair, results))
        built = sib.built
        assert built is not None
        calls.append(lambda: self._nvrtc(built, [*inputs, *slots, *outputs]))
        return calls

    def _gemm(self, mm: Matmul, inputs: list[Any], out: Any) -> Callable[[], object]:
        """The matmul as a call whose operand views are made already (cupy's host work stays out of the timed
        window): the strided cuBLAS call where it applies, else ``cupy.matmul`` (one 2-D GEMM when there is no
        batch)."""
        cp = self._cp
        call = mm.strided
        if call is not None and call.p.input is not None and call.q.input is not None:
            p, q = inputs[call.p.input], inputs[call.q.input]
            return lambda: self._sgemm_strided(call, p, q, out)
        sizes = _sizes(mm)
        batch, m, k, n = _dims(mm)
        av = self._view(inputs[mm.a.input], mm.a, mm)
        bv = self._view(inputs[mm.b.input], mm.b, mm)
        rest_a = tuple(i for i in range(len(sizes)) if i not in (*mm.batch, *mm.m, *mm.k))
        rest_b = tuple(i for i in range(len(sizes)) if i not in (*mm.batch, *mm.k, *mm.n))
        am = av.transpose(mm.batch + mm.m + mm.k + rest_a).reshape(batch, m, k)
        bm = bv.transpose(mm.batch + mm.k + mm.n + rest_b).reshape(batch, k, n)
        if batch == 1:
            am, bm = am[0], bm[0]
        ng = len(mm.split.kernel.vars)
        if mm.order == tuple(range(ng)):
            target = out.reshape(am.shape[:-1] + bm.shape[-1:])
            return lambda: cp.matmul(am, bm, out=target)
        permuted = out.reshape(sizes[:ng])
        back = tuple(int(i) for i in np.argsort(mm.order))

        def run() -> None:
            permuted[...] = cp.matmul(am, bm).reshape([sizes[i] for i in mm.order]).transpose(back)

        return run

    def _nvrtc(self, e: Nvrtc, args: list[Any]) -> None:
        if e.kernel.numel:
            if e.geometry is not None:
                e.function(e.geometry[0], (e.geometry[1],), tuple(args))
                return
            key = (e.kernel.key, e.variant)
            if key not in self._grids:  # worked out once: every launch of a plan needs it
                self._grids[key] = cuda.grid(e.kernel, e.variant)
            blocks, threads = self._grids[key]
            e.function((blocks,), (threads,), tuple(args))

    def _hold(self) -> None:
        """Queue a kernel that keeps the GPU busy for ``HOLD`` seconds (``SPIN``, built once)."""
        if self._spin is None:
            self._spin = self._cp.RawModule(code=SPIN).get_function("spin")
        self._spin((1,), (1,), (np.int64(self._hold_cycles),))

    def _calls(self, compiled: Matmul | Nvrtc | Siblings, inputs: list[Any],
               outputs: list[Any]) -> list[Callable[[], object]]:
        """The launches of one kernel (prologues, matmul, epilogue), ready to queue in order."""
        cp = self._cp
        if isinstance(compiled, Siblings):
            return self._sibling_calls(compiled, inputs, outputs)
        if isinstance(compiled, Nvrtc):
            return [lambda: self._nvrtc(compiled, [*inputs, *outputs])]
        scratch = [cp.empty(pro.kernel.numel, np.float32) for pro in compiled.built_prologues]
        calls: list[Callable[[], object]] = [lambda pro=pro, s=s: self._nvrtc(pro, [*inputs, s])
                                             for pro, s in zip(compiled.built_prologues, scratch)]
        operands = [*inputs, *scratch]
        if compiled.built is None:
            calls.append(self._gemm(compiled, operands, outputs[0]))
        else:
            acc = cp.empty(compiled.kernel.numel, np.float32)
            epilogue = compiled.built
            calls += [self._gemm(compiled, operands, acc), lambda: self._nvrtc(epilogue, [*inputs, acc, *outputs])]
        return calls

    def launch_queued(self, compiled: Matmul | Nvrtc | Siblings, inputs: list[Any], outputs: list[Any]) -> None:
        """Queue the kernel on the current stream and return: no hold, no events, no wait (a later download or
        ``finish`` waits; cupy's pool reuses a scratch buffer only after the stream's earlier work)."""
        self.prepare(compiled, inputs, outputs)()

    def prepare(self, compiled: Matmul | Nvrtc | Siblings, inputs: list[Any], outputs: list[Any]) -> Callable[[], None]:
        """The kernel's calls built once (operand views, scratch buffers, grids), queued on the current stream by
        each call of the function returned; its scratch lives as long as the function, and each replay reuses it
        after the stream's earlier work, in order."""
        with self._cp.cuda.Device(self.index):
            calls = self._calls(compiled, inputs, outputs)

        def queue() -> None:
            with self._cp.cuda.Device(self.index):
                for call in calls:
                    call()

        return queue

    def finish(self) -> None:
        with self._cp.cuda.Device(self.index):
            self._cp.cuda.get_current_stream().synchronize()

    def launch(self, compiled: Matmul | Nvrtc | Siblings, inputs: list[Any], outputs: list[Any]) -> float:
        """Run the kernel (prologues, matmul, epilogue) and return its GPU time: CUDA events around it, queued
        behind ``_hold`` so that the host's dispatch is not counted."""
        cp = self._cp
        with cp.cuda.Device(self.index):
            start, end = cp.cuda.Event(), cp.cuda.Event()
            calls = self._calls(compiled, inputs, outputs)
            self._hold()
            start.record()
            for call in calls:
                call()
            end.record()
            end.synchronize()
            return cp.cuda.get_elapsed_time(start, end) * 1e-3

    def estimate(self, kernel: Kernel) -> float:
        """Roofline plus the launch: a matmul's flops in waves of ``tile``-square output tiles, one per
        multiprocessor at ``flops / units`` (a small matmul leaves most of them idle); any other kernel's
        reduce flops at ``flops``; either's buffers' bytes at ``bandwidth``.  A siblings kernel's products count
        their tiles together where they are one paired call, each its own waves and launch where they are not."""
        nbytes = kernel.moved_bytes
        seconds = max(nbytes / self.bandwidth, 2 * kernel.numel * sum(r.size for r in kernel.reduces) / self.flops)
        sib = self._siblings(kernel)
        mm = self._matmul(kernel) if kernel.reduce is not None else None
        products = sib.stages if sib is not None else (mm,) if mm is not None else ()
        if products:
            tiles = [(self._tiles(p), _dims(p)[2]) for p in products]
            if sib is not None and sib.paired is None:
                gemm = sum(self._waves(t, k) for t, k in tiles) + self.launch_overhead * (len(tiles) - 1)
            else:
                gemm = self._waves(sum(t for t, _ in tiles), tiles[0][1])
            prologues = sib.prologues if sib is not None else mm.prologues  # type: ignore[union-attr]
            seconds = max(seconds, gemm)
            seconds += sum(self.launch_overhead + self._prologue_bytes(pro) / self.bandwidth for pro in prologues)
        return self.launch_overhead + seconds

    def _tiles(self, mm: Matmul) -> int:
        """The ``tile``-square output tiles of one product."""
        batch, m, _, n = _dims(mm)
        return batch * math.ceil(m / self.tile) * math.ceil(n / self.tile)

    def _waves(self, tiles: int, depth: int) -> float:
        """Seconds of ``tiles`` output tiles over a sum of ``depth``, one per multiprocessor at a time."""
        return math.ceil(tiles / self.units) * 2 * self.tile * self.tile * depth * self.units / self.flops

    @staticmethod
    def _prologue_bytes(prologue: Kernel) -> int:
        """What a prologue moves: the inputs it reads, its scratch buffer written, then read by the GEMM."""
        read = {load.input for load in prologue.loads()}
        return sum(prologue.inputs[i].nbytes for i in read) + 2 * prologue.output_bytes

    def predict(self, kernel: Kernel, variant: Variant = DEFAULT_VARIANT) -> float:
        """``estimate`` over the share of the GPU an NVRTC launch fills: fewer threads than the multiprocessors
        hold (``GPU_THREADS`` each) leave the rest idle, as a row per thread on 1024 rows does (0.4% of an H200); an
        implicit GEMM by ``_gemm_estimate``; cuBLAS's products (a siblings kernel's too) by ``estimate``."""
        mm = self._matmul(kernel)
        if mm is not None and variant.smem and mm.gemm is not None:
            return self._gemm_estimate(mm.gemm, variant)
        if mm is not None or self._siblings(kernel) is not None:
            return self.estimate(kernel)
        blocks, threads = cuda.grid(kernel, variant)
        fill = min(1.0, max(blocks * threads, 1) / (self.units * GPU_THREADS))
        return self.launch_overhead + (self.estimate(kernel) - self.launch_overhead) / fill

    def _gemm_estimate(self, gemm: cuda_gemm.Gemm, variant: Variant) -> float:
        """An implicit GEMM: its inputs read and outputs written once, its flops at ``gemm_efficiency`` of
        ``flops`` over the share of the multiprocessors its blocks fill."""
        kernel = gemm.kernel
        nbytes = kernel.moved_bytes
        (bx, by, bz), _ = cuda_gemm.grid(gemm, variant)
        fill = min(1.0, bx * by * bz / self.units)
        batch, m, n, k = gemm.sizes
        rate = self.flops * self.gemm_efficiency * fill
        return self.launch_overhead + max(nbytes / self.bandwidth, 2 * batch * m * n * k / rate)

    def transfer_estimate(self, nbytes: int) -> float:
        return self.link.seconds(nbytes)


def discover(notes: list[str] | None = None) -> list[CublasDevice]:
    """One device per CUDA device; an empty list, never an error.  Where cupy is not installed (an optional
    extra) nothing is said; where it is but cannot be imported, finds no device, or ``CUPY_TF32`` would let
    cuBLAS round fp32 inputs to TF32, one line in ``notes`` says why."""
    try:
        import cupy as cp
    except ModuleNotFoundError as e:
        if e.name == "cupy":
            return []
        cp, why = None, f"cupy cannot be imported ({e}): {NO_CUDA}"
    except Exception as e:  # a cupy built for another CUDA
        cp, why = None, f"cupy cannot be imported ({str(e).splitlines()[0] if str(e) else type(e).__name__}): {NO_CUDA}"
    devices: list[CublasDevice] = []
    if cp is not None:
        why = ""
        if os.environ.get("CUPY_TF32", "0") != "0":
            why = "CUPY_TF32 is set (cuBLAS would round fp32 inputs to TF32); unset it"
        else:
            try:
                for i in range(cp.cuda.runtime.getDeviceCount()):
                    props = cp.cuda.runtime.getDeviceProperties(i)
                    devices.append(CublasDevice(cp, i, props["name"].decode(), units=props["multiProcessorCount"],
                                                clock_hz=props["clockRate"] * 1e3))
            except Exception as e:  # no driver, no device
                why = f"no CUDA device ({str(e).splitlines()[0] if str(e) else type(e).__name__})"
            if not devices and not why:
                why = "no CUDA device"
    if why and notes is not None:
        notes.append(f"cuBLAS devices not offered: {why}")
    return devices

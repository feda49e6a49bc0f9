"""CUDA C source of a kernel for NVRTC: the OpenCL emitter's code under a prelude that names OpenCL's words.

The CUDA device (``engine.devices.cuda_blas``) runs what cuBLAS does not: elementwise kernels, reduces,
row kernels (softmax, norms) and the epilogue of a matmul (bias, activation).  Their variants are
OpenCL's but ``smem``: ``local_size`` is the block's threads, ``group`` a block per output whose tree
reduction runs in shared memory (``__local``), ``upcast``/``tile`` outputs per thread, read and written as
scalars (OpenCL's ``vloadN`` and vector literals have no CUDA spelling).  One variant is CUDA's alone: a row
kernel's ``group`` with ``unroll`` = the row's length over the group (``row_error``), which reads the row once
into registers (``CudaRowEmitter.held``) instead of once per stage, and reduces by warp shuffles.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace

from engine.kernel.ir import Acc, Expr, Kernel, Load, schedule
from engine.kernel.lanes import flat_reduce, rewrite, substitute
from engine.kernel.render.base import COMPUTE, UnsupportedKernelError, check, function_name, program_source
from engine.kernel.render.opencl import OpenCLEmitter
from engine.kernel.render.rows import RowEmitter
from engine.kernel.schedule import Variant, launch_size
from engine.kernel.schedule import variant_error as schedule_variant_error
from engine.program.dtypes import DType

PRELUDE = """typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef unsigned long ulong;
#define __kernel extern "C" __global__
#define __global
#define get_global_id(d) ((long)blockIdx.x * blockDim.x + threadIdx.x)
#define get_group_id(d) ((long)blockIdx.x)
#define get_local_id(d) ((long)threadIdx.x)
#define __local __shared__
#define barrier(fence) __syncthreads()
#define INFINITY __int_as_float(0x7f800000)
#define NAN __int_as_float(0x7fffffff)
#define INT_MIN (-2147483647 - 1)
#define LONG_MIN (-9223372036854775807LL - 1)
"""

BLOCK = 256
"""Threads per block of a launch."""


class _Cuda:
    """Scalar loads and stores: OpenCL's ``vloadN`` has no CUDA twin (``long`` is 64-bit on Linux in both)."""

    vectors = False

    def parts(self) -> tuple[list[str], str]:
        """OpenCL's parts without the work-group size attribute (the launch sets the block size)."""
        head, function = super().parts()  # type: ignore[misc]
        return head, function.replace(f"__attribute__((reqd_work_group_size({self.local_size}, 1, 1))) ", "")  # type: ignore[attr-defined]


class CudaEmitter(_Cuda, OpenCLEmitter):
    """The OpenCL emitter of ordinary kernels, for NVRTC."""


class CudaRowEmitter(_Cuda, RowEmitter):
    """The OpenCL emitter of row kernels, for NVRTC, and the row held in registers (``unroll > 1``)."""

    def __init__(self, kernel: Kernel, variant: Variant) -> None:
        super().__init__(kernel, replace(variant, unroll=1))  # the shared schedule knows no unrolled row kernel
        self.variant = variant

    def parts(self) -> tuple[list[str], str]:
        """The row in registers reads its inputs through the read-only path (``__restrict__``: a plan never
        passes one buffer as both an input and an output)."""
        head, function = super().parts()
        return head, restrict(function) if self.variant.unroll > 1 else function

    def body(self) -> None:
        if self.variant.unroll > 1:
            self.held()
        else:
            super().body()

    def held(self) -> None:
        """A block of ``group`` threads per row, each holding the row's points ``lid + j * group`` (``j <
        unroll``): the loads that more than one pass reads are read once into register arrays, each stage is an
        unrolled loop over them and a warp-shuffle reduction (then one shared-memory step across warps), and the
        outputs are stored from them, coalesced."""
        k, it, g, u = self.kernel, self.itype, self.variant.group, self.variant.unroll
        size = k.row_size
        self.lines.append(f"  const {it} grp = ({it})get_group_id(0);")
        self.lines.append("  const int lid = threadIdx.x;")
        self.decompose("grp", k.vars)
        flat, sub = flat_reduce(k.row)
        self.vars[flat] = "ri"
        bodies = []
        for stage in k.stages:
            _, stage_sub = flat_reduce(stage.vars)  # the same variable as ``flat``: the stages span the row
            bodies.append(rewrite([stage.body], stage_sub)[0])
        outputs = rewrite(list(k.outputs), sub)
        at = substitute(self.store_index(), sub)
        passes = [{e for e in schedule(roots) if isinstance(e, Load) and flat in e.index.variables()}
                  for roots in ([b] for b in [*bodies, *outputs])]
        reads = [e for e in dict.fromkeys(e for p in passes for e in sorted(p, key=str))
                 if sum(e in p for p in passes) > 1]
        guard = size % g != 0
        head = [f"for (int j = 0; j < {u}; ++j) {{", f"const {it} ri = lid + j * {g};" + (
            f" if (ri < {size}) {{" if guard else " {")]
        for n, e in enumerate(reads):
            self.lines.append(f"  {COMPUTE[e.dtype]} zx_h{n}[{u}];")
        if reads:
            self.lines += ["  #pragma unroll", f"  {head[0]}", f"    {head[1]}"]
            self.lines += [f"      zx_h{n}[j] = {self.load(e)};" for n, e in enumerate(reads)]
            self.lines += ["    }", "  }"]
        for n, e in enumerate(reads):
            self.names[e] = f"zx_h{n}[j]"
        for i, (stage, body) in enumerate(zip(k.stages, bodies)):
            acc, t = f"acc{i}", COMPUTE[stage.dtype]
            self.scoped_loop([body], {flat}, head, [f"{t} {acc} = {self.init(stage)};", "#pragma unroll"],
                             lambda acc=acc, stage=stage, body=body: [
                                 f"{acc} = {self.combine(stage, acc, self.names[body])};"])
            self.shuffle(stage, acc, f"zx_w{i}")
            self.names[Acc(stage.dtype, i)] = acc
        self.scoped_loop(outputs, {flat}, head, ["#pragma unroll"], lambda: [
            self.put(o, e.dtype, self.index(at), self.names[e]) for o, e in enumerate(outputs)])

    def shuffle(self, stage: Expr, acc: str, part: str) -> None:
        """``acc`` combined over the block: within each warp by ``__shfl_xor_sync``, then each thread combines
        the warps' results from shared memory."""
        g, t = self.variant.group, COMPUTE[stage.dtype]  # type: ignore[attr-defined]
        other = f"{part}_o"
        self.lines += [
            "  #pragma unroll",
            "  for (int o = 16; o > 0; o >>= 1) {",
            f"    const {t} {other} = __shfl_xor_sync(0xffffffffu, {acc}, o);",
            f"    {acc} = {self.combine(stage, acc, other)};",  # type: ignore[arg-type]
            "  }",
        ]
        if g > 32:
            self.lines += [
                f"  __shared__ {t} {part}[{g // 32}];",
                f"  if (lid % 32 == 0) {part}[lid / 32] = {acc};",
                "  __syncthreads();",
                f"  {acc} = {part}[0];",
                "  #pragma unroll",
                f"  for (int w = 1; w < {g // 32}; ++w) {acc} = {self.combine(stage, acc, f'{part}[w]')};",  # type: ignore[arg-type]
            ]


def cuda_error(kernel: Kernel) -> str | None:
    """Why ``kernel`` has no CUDA source here (None when it has one)."""
    dtypes = {b.dtype for b in (*kernel.inputs, *kernel.output_types)} | {e.dtype for e in schedule(kernel.exprs())}
    if DType.F16 in dtypes or DType.F64 in dtypes:
        return "f16 or f64 values"
    try:
        check(kernel)
    except UnsupportedKernelError as e:
        return str(e)
    return None


def restrict(function: str) -> str:
    """``function`` with its input pointers ``__restrict__``."""
    return re.sub(r"(__global const \w+\*) (in\d+)", r"\1 __restrict__ \2", function)


def row_error(kernel: Kernel, variant: Variant) -> str | None:
    """Why the row-in-registers variant ``variant`` (a row kernel's ``group`` with ``unroll > 1``) cannot run
    ``kernel`` (None when it can): every stage must span the row, ``unroll`` be the row's points per thread."""
    g, u = variant.group, variant.unroll
    if not (32 <= g <= 1024 and g & (g - 1) == 0):
        return "the row in registers needs a group of 32 to 1024 threads, a power of two"
    if (variant.upcast, variant.tile, variant.smem) != (1, 1, 0) or variant.local_size not in (None, g):
        return "the row in registers has no upcast, tile, smem or other local size"
    if any(stage.size != kernel.row_size for stage in kernel.stages):
        return "a stage does not span the row"
    if u != -(-kernel.row_size // g) or u > 64:
        return f"unroll is the row's {kernel.row_size} points over the group's {g} threads (at most 64)"
    if any(stage.dtype in (DType.BOOL, DType.F16, DType.F64) for stage in kernel.stages):
        return "warp shuffles of bool, f16 or f64 stages"
    return cuda_error(kernel)


def row_seeds(kernel: Kernel) -> list[Variant]:
    """The row-in-registers variants worth timing for row kernel ``kernel``: 2 to 32 points per thread, a warp
    per row for short rows up to 1024 threads for long ones."""
    out = [Variant(group=g, unroll=-(-kernel.row_size // g)) for g in (32, 128, 256, 512, 1024)
           if 2 <= -(-kernel.row_size // g) <= 32 and (g > 32 or kernel.row_size <= 256)]
    return [v for v in out if row_error(kernel, v) is None]


def variant_error(kernel: Kernel, variant: Variant) -> str | None:
    """Why ``variant`` cannot run ``kernel`` here (None when it can)."""
    if kernel.stages and variant.unroll > 1:
        return row_error(kernel, variant)
    if variant.smem:
        return "smem stages operands with OpenCL's vector reads (a contraction's smem is the device's implicit GEMM)"
    return cuda_error(kernel) or schedule_variant_error(kernel, variant)


def source(kernel: Kernel, variant: Variant) -> tuple[str, str]:
    """The CUDA C source of ``kernel`` in ``variant`` and its function's name."""
    assert variant_error(kernel, variant) is None, variant_error(kernel, variant)
    emitter = CudaRowEmitter if kernel.stages else CudaEmitter
    return PRELUDE + program_source([(kernel, variant)], emitter), function_name(kernel, variant)


def grid(kernel: Kernel, variant: Variant) -> tuple[int, int]:
    """Blocks and threads per block of a launch (OpenCL's global size in blocks of its local size)."""
    size, local = launch_size(kernel, variant)
    threads = local or BLOCK
    return math.ceil(size / threads), threads

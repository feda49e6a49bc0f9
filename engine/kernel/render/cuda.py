"""CUDA C source of a kernel for NVRTC: the OpenCL emitter's code under a prelude that names OpenCL's words.

The CUDA device (``engine.devices.cuda_blas``) runs what cuBLAS does not: elementwise kernels, reduces,
row kernels (softmax, norms) and the epilogue of a matmul (bias, activation).  Their variants are
OpenCL's but ``smem``: ``local_size`` is the block's threads, ``group`` a block per output whose tree
reduction runs in shared memory (``__local``), ``upcast``/``tile`` outputs per thread, read and written as
scalars (OpenCL's ``vloadN`` and vector literals have no CUDA spelling).
"""

from __future__ import annotations

import math

from engine.kernel.ir import Kernel, schedule
from engine.kernel.render.base import UnsupportedKernelError, check, function_name, program_source
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
    """The OpenCL emitter of row kernels, for NVRTC."""


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


def variant_error(kernel: Kernel, variant: Variant) -> str | None:
    """Why ``variant`` cannot run ``kernel`` here (None when it can)."""
    if variant.smem:
        return "smem stages operands with OpenCL's vector reads (cuBLAS runs matmuls here)"
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

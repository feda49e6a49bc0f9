"""CUDA C source of a kernel for NVRTC: the OpenCL emitter's code under a prelude that names OpenCL's words.

The CUDA device (``engine.devices.cuda_blas``) runs what cuBLAS does not: elementwise kernels and the
epilogue of a matmul (bias, activation), one thread per output point, in the default variant only (no
vector loads, work-groups or local memory, whose OpenCL spellings the prelude does not cover).
"""

from __future__ import annotations

from engine.devices.base import DEFAULT_VARIANT
from engine.kernel.ir import Kernel, schedule
from engine.kernel.opencl import _Emitter, function_name, program_source
from engine.program.dtypes import DType

PRELUDE = """typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef unsigned long ulong;
#define __kernel extern "C" __global__
#define __global
#define get_global_id(d) ((long)blockIdx.x * blockDim.x + threadIdx.x)
#define INFINITY __int_as_float(0x7f800000)
#define NAN __int_as_float(0x7fffffff)
#define INT_MIN (-2147483647 - 1)
#define LONG_MIN (-9223372036854775807LL - 1)
"""

BLOCK = 256
"""Threads per block of a launch."""


class CudaEmitter(_Emitter):
    """Scalar loads and stores: OpenCL's ``vloadN`` has no CUDA twin (``long`` is 64-bit on Linux in both)."""

    vectors = False


def cuda_error(kernel: Kernel) -> str | None:
    """Why ``kernel`` has no CUDA source here (None when it has one)."""
    if kernel.stages:
        return "a row kernel"
    if kernel.reduce is not None:
        return "a reduce (only cuBLAS contractions run reduces on this device)"
    dtypes = {b.dtype for b in (*kernel.inputs, *kernel.output_types)} | {e.dtype for e in schedule(kernel.exprs())}
    if DType.F16 in dtypes or DType.F64 in dtypes:
        return "f16 or f64 values"
    return None


def source(kernel: Kernel) -> tuple[str, str]:
    """The CUDA C source of ``kernel`` (one thread per point) and its function's name."""
    assert cuda_error(kernel) is None, cuda_error(kernel)
    return PRELUDE + program_source([(kernel, DEFAULT_VARIANT)], CudaEmitter), function_name(kernel, DEFAULT_VARIANT)

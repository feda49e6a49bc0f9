"""Times many variants of one fp32 matmul kernel on the first OpenCL GPU, next to torch (TF32 off).

``python benchmarks/matmul_sweep.py [--m 4096] [--variants 'local=256 upcast=4 tile=8 unroll=4 smem=16' ...]``
(on the H200: ``bash benchmarks/h200.sh --sweep [args]``; without a GPU it uses the first OpenCL device).  Per variant: the best and median
kernel time of ``--repeats`` launches (profiled events), TFLOP/s, and the largest error of its outputs
against a float64 product and against numpy's float32 BLAS on a sample of rows.  ``--sum-block`` sets
the emitters' ``sum_block`` (``engine.kernel.render.base.SUM_BLOCK``) (0: sequential accumulation) to measure the blocked sum's cost.
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

from engine.devices.opencl import discover
from engine.kernel.index import Var, add, scale, var
from engine.kernel.ir import Acc, Buffer, Kernel, Load, Op, Reduce
from engine.kernel.render import opencl
from engine.kernel.render.base import SUM_BLOCK, CStyleEmitter
from engine.kernel.schedule import Variant
from engine.program.dtypes import DType

DEFAULT = [
    "local=64 upcast=8 tile=8 unroll=2",
    "local=256 upcast=4 tile=8 unroll=4 smem=16",
    "local=256 upcast=4 tile=8 unroll=8 smem=8",
    "local=256 upcast=8 tile=8 unroll=4 smem=8",
    "local=256 upcast=8 tile=8 unroll=8 smem=16",
    "local=128 upcast=8 tile=8 unroll=4 smem=16",
    "local=256 upcast=4 tile=4 unroll=4 smem=16",
]


def matmul(m: int, n: int, k: int) -> Kernel:
    """``a[m, k] @ b[k, n]`` as the kernelizer writes it."""
    g0, g1, r = Var("g0", m), Var("g1", n), Var("r0", k)
    a = Load(0, add(scale(var(g0), k), var(r)), m * k, DType.F32)
    b = Load(1, add(scale(var(r), n), var(g1)), k * n, DType.F32)
    body = Op("mul", (a, b), DType.F32)
    return Kernel((Buffer((m, k), DType.F32), Buffer((k, n), DType.F32)), (m, n), (g0, g1),
                  Reduce("sum", (r,), body), (Acc(DType.F32),))


def parse(text: str) -> Variant:
    fields = dict(part.split("=") for part in text.split())
    local = fields.pop("local", "auto")
    return Variant(local_size=None if local == "auto" else int(local), **{k: int(v) for k, v in fields.items()})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--m", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--rows", type=int, default=64, help="rows checked against float64 and BLAS")
    parser.add_argument("--sum-block", type=int, default=SUM_BLOCK)
    parser.add_argument("--variants", nargs="*", default=DEFAULT)
    parser.add_argument("--source", action="store_true", help="print the first variant's OpenCL C")
    args = parser.parse_args()
    CStyleEmitter.sum_block = args.sum_block
    found = discover()
    gpu = next((d for d in found if d.is_gpu), found[0])
    m = args.m
    kernel = matmul(m, m, m)
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((m, m)).astype(np.float32) for _ in range(2))
    rows = np.r_[0 : args.rows // 2, m - args.rows // 2 : m]
    exact = a[rows].astype(np.float64) @ b.astype(np.float64)
    blas = a[rows] @ b
    print(f"device {gpu.name}; {m}^3 fp32; SUM_BLOCK {args.sum_block}; "
          f"BLAS rows vs float64: max error {np.abs(blas - exact).max():.2e}")
    variants = [parse(t) for t in args.variants]
    if args.source:
        print(opencl.generate(kernel, variants[0]))
    gpu.compile_many([(kernel, v) for v in variants if gpu.variant_error(kernel, v) is None])
    ins = [gpu.upload(a), gpu.upload(b)]
    out = gpu.alloc(kernel.output_types[0])
    flops = 2.0 * m**3
    for v in variants:
        error = gpu.variant_error(kernel, v)
        if error:
            print(f"| {v} | - | {error} |")
            continue
        try:
            compiled = gpu.compile(kernel, v)
        except Exception as e:  # a build failure is reported, the sweep goes on
            print(f"| {v} | build failed: {str(e).splitlines()[0][:200]} |")
            continue
        times = [gpu.launch(compiled, ins, [out]) for _ in range(args.repeats + 1)][1:]
        got = gpu.download(out, kernel.output_types[0])[rows].astype(np.float64)
        best = min(times)
        ok = np.isclose(got, blas, rtol=2e-4, atol=2e-5)
        print(f"| {v} | {best * 1e3:.3f} ms (median {statistics.median(times) * 1e3:.3f}) | "
              f"{flops / best / 1e12:.1f} TFLOP/s | vs float64 {np.abs(got - exact).max():.2e} | "
              f"vs BLAS {np.abs(got - blas).max():.2e}, {int((~ok).sum())} outside f32 tolerance |", flush=True)
    try:
        import torch
    except ImportError:
        return
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    ta, tb = torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda()
    ta @ tb
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(args.repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        c = ta @ tb
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) * 1e-3)
    got = c[torch.from_numpy(rows).cuda()].double().cpu().numpy()
    print(f"| torch fp32 (TF32 off) | {best * 1e3:.3f} ms | {flops / best / 1e12:.1f} TFLOP/s | "
          f"vs float64 {np.abs(got - exact).max():.2e} | vs BLAS {np.abs(got - blas).max():.2e} |")


if __name__ == "__main__":
    main()

"""The numpy/BLAS devices' plans vs numpy eager: ``python benchmarks/cpu_numpy_device.py [SAMPLE ...] [--repeats N]``.

Every large sample graph (default: all) is compiled for ``NumpyDevice`` and
``LibraryDevice`` with ``Options(tune=False)``, verified once against the
reference interpreter, then its plan is executed ``N`` times; the figure is the
best total of its kernel launches (allocation and compile excluded).  Numpy
eager is the reference interpreter (one numpy call per primitive op), best of N,
its runs interleaved with the plan's so that load from other processes hits both;
``paired`` is the middle half of the eager / plan ratios of those pairs (the
spread a shared machine gives).

Measured 2026-12-03 on the 2-core Xeon (float32, ``--repeats 7``, ms), before
(commit 169d86c: 4M-element chunks, one temporary per op, one thread, a gather
for every non-affine load) and after (L2-sized chunks with ``out=`` buffers,
2 threads, split variables, padded views, matmul contractions).  The machine
was shared (load average 3-4): BLAS-bound rows vary by +-30% from run to run.

| sample | eager | before | after | after / eager | tinygrad best (issue 9) |
|---|---|---|---|---|---|
| attention | 614 | 14458 | 562 | 1.09x | |
| conv_relu | 117 | 4582 | 71 | 1.65x | |
| elementwise (16M) | 231 | 256 | 61 | 3.82x | 23 (BEAM=2) |
| gelu_ffn | 240 | 204 | 203 | 1.18x | |
| layernorm (4096^2) | 184 | 309 | 149 | 1.24x | 33 (clang) |
| matmul (1024^3) | 34 | 72 | 46 | 0.74x (0.9-1.35x in other runs) | 208 (BEAM=2) |
| mlp | 124 | 304 | 167 | 0.74x (0.9x in other runs) | |
| reductions | 195 | 204 | 183 | 1.06x | |
| residual_mlp | 134 | 4549 | 146 | 0.92x | |
| softmax (4096^2) | 160 | 289 | 118 | 1.35x | 133 (BEAM=2) |
| sum (16M) | 10.3 | 12.9 | 10.5 | 0.98x | 14 (PoCL) |
| swiglu_mlp | 248 | 9764 | 278 | 0.89x | |
| transpose_fusion | 43 | 83 | 56 | 0.77x | |

The BLAS-bound rows, 2026-12-03 (branch wt-split): the matmul writes straight into the output (no
temporary, no copy; the epilogue runs in place, spread over the threads), computed factors take their
input's layout (a factor written transposed to its input ran 10x slower), a kernel is planned once per key
(each execution re-planned every launch), kernels under 2^20 points run on one thread (OpenBLAS's workers
spin for 60-90 ms after every call, taking one of the two cores).  ``--repeats 7``, best-of ms and the
middle half of the paired ratios; before = commit 4401eb8 at load 0.4, after at load 0.9 (a later pair at
load 1-1.5 put both versions at 0.6-1.4x: the machine is shared):

| sample | before eager | before plan | before x (paired) | after eager | after plan | after x (paired) |
|---|---|---|---|---|---|---|
| matmul | 31.2 | 31.9 | 0.98x (0.84-0.99) | 11.9 | 10.3 | 1.16x (1.12-1.19) |
| mlp | 103.5 | 154.1 | 0.67x (0.65-0.69) | 49.9 | 48.3 | 1.03x (1.02-1.18) |
| transpose_fusion | 23.7 | 31.8 | 0.74x (0.74-0.75) | 12.6 | 11.9 | 1.06x (1.08-1.14) |
| residual_mlp | 57.3 | 60.9 | 0.94x (0.79-1.23) | 49.5 | 50.2 | 0.99x (0.98-1.00) |
| swiglu_mlp | 92.7 | 89.6 | 1.03x (0.62-1.04) | 87.4 | 88.7 | 0.99x (0.72-0.88) |
| sum | 8.8 | 9.7 | 0.90x (0.90-0.98) | 9.1 | 9.5 | 0.96x (0.64-0.93) |

Single-threaded (``OPENBLAS_NUM_THREADS=1``, ``--threads 1``), CPU time, which load hardly moves: eager /
plan went from 0.89-1.10x (matmul and transpose_fusion 0.89-0.97x) to 1.00-1.23x on matmul, mlp,
transpose_fusion, residual_mlp and swiglu_mlp.
"""

from __future__ import annotations

import argparse
import time

import sample_graphs
from engine import load
from engine.devices.numpy_device import LibraryDevice, NumpyDevice
from engine.pipeline import Options, compile_program, run
from engine.plan import Launch, execute
from engine.program.reference import evaluate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("samples", nargs="*", default=[n for n in sample_graphs.names() if "." not in n])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="numpy device threads (default: every core)")
    args = parser.parse_args()
    devices = [NumpyDevice(threads=args.threads), LibraryDevice(threads=args.threads)]
    print(f"{'sample':<18}{'eager ms':>10}{'plan ms':>10}{'speedup':>9}{'paired':>15}{'kernels':>9}  verified")
    for name in args.samples:
        program = load(sample_graphs.path(name))
        inputs = program.input_values()
        graph = program.lower()
        c = compile_program(program, devices, Options(tune=False, execute=False))
        ok = run(c, inputs).ok
        assert c.plan is not None
        launches = [i for i, s in enumerate(c.plan.steps) if isinstance(s, Launch)]
        eager, plan = [], []
        for _ in range(args.repeats + 1):  # interleaved, so that load from elsewhere hits both alike
            start = time.perf_counter()
            evaluate(graph, inputs)
            eager.append(time.perf_counter() - start)
            times = execute(c.plan, devices, inputs).step_times
            plan.append(sum(times[i] for i in launches))
        ratios = sorted(e / p for e, p in zip(eager[1:], plan[1:]))
        spread = f"{ratios[len(ratios) // 4]:.2f}-{ratios[(3 * len(ratios)) // 4]:.2f}x"
        print(f"{name:<18}{min(eager) * 1e3:>10.1f}{min(plan) * 1e3:>10.1f}{min(eager) / min(plan):>8.2f}x{spread:>15}"
              f"{len(launches):>9}  {'ok' if ok else 'WRONG'}", flush=True)


if __name__ == "__main__":
    main()

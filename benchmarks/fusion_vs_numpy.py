"""Fused kernels vs numpy eager: ``python benchmarks/fusion_vs_numpy.py [SAMPLE ...] [--repeats N]``.

For each sample graph (default: the elementwise chain, softmax and layernorm at
full size) this compiles a plan for each device on its own, runs it, checks it
against the reference, and reports the best-of-N time of the plan's kernel
launches (transfers of inputs and outputs excluded, compile excluded) next to
numpy eager: the reference interpreter, one numpy call per primitive op.
Also prints the bytes the plan's kernels move and the bandwidth that implies.
"""

from __future__ import annotations

import argparse
import time

import sample_graphs
from engine import load
from engine.devices import discover
from engine.pipeline import Options, compile_program, run
from engine.plan import Launch
from engine.program.reference import evaluate

DEFAULT = ["elementwise", "softmax", "layernorm"]


def best_of(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("samples", nargs="*", default=DEFAULT)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    devices = [d for d in discover() if d.name != "blas"]
    print(f"devices: {', '.join(d.name for d in devices)}")
    for name in args.samples:
        program = load(sample_graphs.path(name))
        inputs = program.input_values()
        graph = program.lower()
        eager = best_of(lambda g=graph, i=inputs: evaluate(g, i), args.repeats)
        print(f"\n{name}: numpy eager {eager * 1e3:.1f} ms ({len(graph.nodes)} primitive ops)")
        for device in devices:
            compilation = compile_program(program, [device], Options(execute=False))
            launches = [s for s in compilation.plan.steps if isinstance(s, Launch)]
            kernel_time = []
            for _ in range(args.repeats + 1):
                verification = run(compilation, inputs)
                times = compilation.execution.step_times
                kernel_time.append(sum(t for s, t in zip(compilation.plan.steps, times) if isinstance(s, Launch)))
            best = min(kernel_time[1:])
            moved = sum(s.kernel.moved_bytes for s in launches)
            status = "ok" if verification.ok else "WRONG"
            print(f"  {device.name}: {len(launches)} kernels, {best * 1e3:.1f} ms, {eager / best:.2f}x numpy eager, "
                  f"{moved / best / 1e9:.1f} GB/s over {moved / 1e6:.0f} MB, verified {status}")


if __name__ == "__main__":
    main()

"""Saturation speed on big programs: ``python benchmarks/egraph_saturation.py [--layers N]``.

Builds a deep transformer-style stack (layernorm, attention-free gated MLP with
residuals, transposed matmuls) of about 10k primitive nodes, lowers it to an
e-graph and saturates it with the default rules, printing sizes, iterations,
the stop reason and the time of each phase.
"""

from __future__ import annotations

import argparse
import time

from engine import Init, Tensor, from_tensors
from engine.egraph import Limits, check_semantics, from_program, saturate


def deep_stack(layers: int, width: int = 16, batch: int = 8):
    x = Tensor.input("x", (batch, width), init=Init.normal(seed=1))
    for i in range(layers):
        w = Tensor.input(f"w{i}", (width, width), init=Init.normal(seed=i + 2, std=width**-0.5))
        v = Tensor.input(f"v{i}", (width, width), init=Init.normal(seed=i + 1000, std=width**-0.5))
        h = x.layernorm(axis=-1)
        gate = (h @ w).sigmoid() * (h @ v.transpose().transpose())
        x = x + (gate * 0.5 + 0.0) * 1.0
        if i % 4 == 3:
            x = (w.transpose() @ x.transpose()).transpose().softmax(axis=-1) - x * 1.0
    return from_tensors([x.named("y")], "deep_stack", f"{layers} gated residual layers")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--layers", type=int, default=110)
    parser.add_argument("--semantic", action="store_true", help="also run the semantic check")
    args = parser.parse_args()
    t0 = time.perf_counter()
    program = deep_stack(args.layers)
    prims = program.lower()
    t1 = time.perf_counter()
    egraph = from_program(program)
    t2 = time.perf_counter()
    print(f"program: {len(program.nodes)} nodes, {len(prims.nodes)} primitives (built+lowered in {t1 - t0:.2f} s)")
    print(f"e-graph: {egraph.num_nodes} nodes, {egraph.num_classes} classes (from primitives in {t2 - t1:.2f} s)")
    result = saturate(egraph, limits=Limits(iterations=60, nodes=1_000_000, seconds=120))
    print(f"saturate: {result.stop.value} after {len(result.iterations)} iterations in {result.seconds:.2f} s -> "
          f"{egraph.num_nodes} nodes, {egraph.num_classes} classes")
    for it in result.iterations:
        print(f"  iteration {it.index:2d}: {it.nodes:7d} nodes {it.classes:6d} classes "
              f"{len(it.merges):5d} merges {it.congruences:5d} congruences {it.seconds:6.2f} s")
    if args.semantic:
        t3 = time.perf_counter()
        report = check_semantics(egraph)
        print(f"semantic check: ok={report.ok}, {report.forms} forms in {time.perf_counter() - t3:.2f} s")


if __name__ == "__main__":
    main()

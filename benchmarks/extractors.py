"""Extractors side by side: ``python benchmarks/extractors.py [SAMPLE ...] [--repeats N] [--no-opencl] [--scale]``.

For every sample graph (default: all, full and small) this compiles up to the
kernelized stage on the numpy and BLAS devices and every OpenCL device found
(several memory pools, so transfers matter), then runs greedy, dag and ilp on
the same kernel times and reports greedy's tree and DAG cost, dag's and ilp's
DAG cost, ilp's status, dag's gap to the optimum, and the best-of-N time of
each extractor.  Costs are predicted microseconds of the plan.

``--scale`` runs the scale set instead (egraph-serialize e-graphs, as ``zyx-explore extract`` reads them):
greedy on chains listed parents first (its work must be linear), dag against ilp on egglog's e-graphs,
our samples' extraction problems and random e-graphs with sharing, dag on 40k-node e-graphs, and
each extractor's wall time against its time limit on problems the ILP cannot finish.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import sample_graphs
from engine import load
from engine.devices import discover
from engine.extract import Extraction, dag, greedy, ilp
from engine.pipeline import Options, compile_program, transfer_estimate


def timed(fn: Callable[[], Extraction], repeats: int) -> tuple[Extraction, float]:
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    assert result is not None
    return result, best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("samples", nargs="*", default=sample_graphs.names())
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--time-limit", type=float, default=10.0, help="ILP time limit, seconds")
    parser.add_argument("--no-opencl", action="store_true")
    parser.add_argument("--scale", action="store_true", help="run the scale set instead (see above)")
    args = parser.parse_args()
    if args.scale:
        scale_set(args.repeats)
        return
    devices = discover(opencl=not args.no_opencl)
    print("devices:", ", ".join(d.name for d in devices))
    import scipy.optimize  # noqa: F401  (its import is not the ILP's time)

    head = (
        f"| {'sample':24} | greedy tree µs | greedy DAG µs | dag µs | ilp µs | ilp status | dag/ilp | "
        "greedy ms | dag ms | ilp ms |"
    )
    print(head)
    print("|" + "|".join("-" * (len(c)) for c in head.split("|")[1:-1]) + "|")
    for name in args.samples:
        c = compile_program(load(sample_graphs.path(name)), devices, Options(execute=False))
        a = (c.egraph, c.device_pools, c.kernel_times.__getitem__, transfer_estimate(c.devices))
        g, tg = timed(lambda a=a: greedy(*a), args.repeats)
        d, td = timed(lambda a=a: dag(*a), args.repeats)
        i, ti = timed(lambda a=a: ilp(*a, time_limit=args.time_limit), args.repeats)
        status = i.status + (f" ({i.note})" if i.note else "")
        print(
            f"| {name:24} | {g.tree_cost * 1e6:14.2f} | {g.dag_cost * 1e6:13.2f} | {d.dag_cost * 1e6:6.2f} | "
            f"{i.dag_cost * 1e6:6.2f} | {status:10} | {d.dag_cost / i.dag_cost:7.4f} | "
            f"{tg * 1e3:9.2f} | {td * 1e3:6.2f} | {ti * 1e3:6.1f} |"
        )


def scale_set(repeats: int) -> None:
    """The ``--scale`` report (see the module docstring); small e-graphs are committed, big ones generated."""
    import json
    import statistics
    from pathlib import Path

    from engine.extract import solve
    from engine.interop import parse_serialized, problem_document, problem_of
    from tests.interop.graphs import chain, egglog_arith, random_egraph

    def problem(doc):
        return problem_of(parse_serialized(doc)).problem

    def best_of(fn, n=repeats):
        times = []
        for _ in range(n):
            start = time.perf_counter()
            out = fn()
            times.append(time.perf_counter() - start)
        return out, min(times)

    print("## greedy on a chain listed parents first\n")
    print("| classes | nodes | greedy s (solve: integer form, greedy, extraction) |\n|--:|--:|--:|")
    for n in (2_000, 8_000, 16_000, 100_000):
        fresh = iter([problem(chain(n)) for _ in range(repeats)])  # solve builds each one's integer form
        _, t = best_of(lambda fresh=fresh: solve(next(fresh), "greedy"))
        print(f"| {n:,} | {n:,} | {t:.3f} |")

    print("\n## dag against the ILP's proven optimum\n")
    sets: dict[str, list] = {"egglog arith (committed)": [json.loads(Path(__file__).with_name("egraphs")
                                                          .joinpath("egglog_arith.json").read_text())],
                             "egglog arith, 8 iterations, 3 terms": [egglog_arith(8, 3)]}
    devices = discover(opencl=False)
    docs = []
    for name in ("attention", "residual_mlp", "swiglu_mlp", "gelu_ffn", "layernorm", "softmax"):
        c = compile_program(load(sample_graphs.path(name)), devices, Options(execute=False, tune=False))
        docs.append(problem_document(c.egraph, c.device_pools, c.kernel_times.__getitem__, c.transfer_time()))
    sets["our samples, kernelized (6)"] = docs
    sets["random, 200 classes, leafy (20 seeds)"] = [random_egraph(s, 200) for s in range(20)]
    sets["random, 150 classes, dense (20 seeds)"] = [random_egraph(s, 150, leaves=0.0) for s in range(20)]
    sets["random, 1000 classes, leafy (5 seeds)"] = [random_egraph(s, 1000) for s in range(5)]
    print("| set | nodes | ILP optimal | greedy/opt | dag/opt (geo) | dag/opt (max) | dag at opt | dag s (max) |")
    print("|---|--:|--:|--:|--:|--:|--:|--:|")
    for name, group in sets.items():
        ratios, greedy_ratios, times, proven = [], [], [], 0
        for doc in group:
            p = problem(doc)
            i = solve(p, "ilp", time_limit=30.0)
            if i.status != "optimal":
                continue
            proven += 1
            d, t = best_of(lambda p=p: solve(p, "dag"))
            ratios.append(d.dag_cost / i.dag_cost if i.dag_cost else 1.0)
            greedy_ratios.append(solve(p, "greedy").dag_cost / i.dag_cost if i.dag_cost else 1.0)
            times.append(t)
        if not ratios:
            print(f"| {name} | | 0/{len(group)} | | | | | |")
            continue
        print(f"| {name} | {max(len(doc['nodes']) for doc in group):,} | {proven}/{len(group)} | "
              f"{statistics.geometric_mean(greedy_ratios):.4f} | {statistics.geometric_mean(ratios):.4f} | "
              f"{max(ratios):.4f} | {sum(r <= 1 + 1e-9 for r in ratios)}/{len(ratios)} | {max(times):.3f} |")

    print("\n## dag on 40k-node e-graphs (its default 2 s limit)\n")
    print("| e-graph | nodes | greedy DAG | dag DAG | dag s | note |\n|---|--:|--:|--:|--:|---|")
    for name, doc in (("random leafy", random_egraph(0, 16_000)), ("random dense", random_egraph(0, 16_000, leaves=0.0))):
        p = problem(doc)
        g = solve(p, "greedy")
        d, t = best_of(lambda p=p: solve(p, "dag"))
        print(f"| {name} | {len(doc['nodes']):,} | {g.dag_cost:g} | {d.dag_cost:g} | {t:.3f} | {d.note} |")

    print("\n## wall time against the time limit (worst of N)\n")
    print("| e-graph | nodes | extractor | limit s | wall s | wall/limit | note |\n|---|--:|---|--:|--:|--:|---|")
    hard = (("random dense 1000", random_egraph(1, 1000, leaves=0.0)), ("random dense 16000", random_egraph(1, 16_000, leaves=0.0)))
    for name, doc in hard:
        for method, limit in (("dag", 1.0), ("ilp", 2.0), ("ilp", 5.0)):
            worst, note = 0.0, ""
            for _ in range(repeats):
                p = problem(doc)  # a fresh problem: building its integer form counts too
                start = time.perf_counter()
                out = solve(p, method, time_limit=limit)
                wall = time.perf_counter() - start
                worst, note = max(worst, wall), out.note
            print(f"| {name} | {len(doc['nodes']):,} | {method} | {limit:g} | {worst:.2f} | {worst / limit:.2f} | "
                  f"{note} |")


if __name__ == "__main__":
    main()

"""Extractors side by side: ``python benchmarks/extractors.py [SAMPLE ...] [--repeats N] [--no-opencl]``.

For every sample graph (default: all, full and small) this compiles up to the
kernelized stage on the numpy and BLAS devices and every OpenCL device found
(several memory pools, so transfers matter), then runs greedy, dag and ilp on
the same kernel times and reports greedy's tree and DAG cost, dag's and ilp's
DAG cost, ilp's status, dag's gap to the optimum, and the best-of-N time of
each extractor.  Costs are predicted microseconds of the plan.
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
    args = parser.parse_args()
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


if __name__ == "__main__":
    main()

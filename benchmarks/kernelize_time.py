"""Kernelizer time on real and deep programs: ``python benchmarks/kernelize_time.py [--repeat N]``.

Lowers and saturates each program once, then times ``kernelize`` alone (the best of ``--repeat`` runs) and
prints its candidates: what recording the fusion decisions and naming the kernels costs is the difference
between two checkouts run with this script.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import sample_graphs
from benchmarks.egraph_saturation import deep_stack
from engine import load, load_onnx
from engine.egraph import from_program, saturate
from engine.kernel.kernelize import kernelize


def programs():
    yield "attention", load(sample_graphs.path("attention"))
    yield "layernorm", load(sample_graphs.path("layernorm"))
    yield "gpt.onnx", load_onnx(Path(sample_graphs.__file__).parent / "gpt.onnx")
    yield "deep_stack(40)", deep_stack(40)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    for name, program in programs():
        egraph = from_program(program)
        saturate(egraph)
        best = float("inf")
        for _ in range(args.repeat):
            began = time.perf_counter()
            kz = kernelize(egraph)
            best = min(best, time.perf_counter() - began)
        print(f"{name}: {egraph.num_classes} classes, {len(kz.candidates)} candidates, kernelize {best * 1e3:.1f} ms")


if __name__ == "__main__":
    main()

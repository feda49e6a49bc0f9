"""A what-if measured against its prediction: ``python benchmarks/what_if.py [SAMPLE ...] [--repeats N]``.

For each sample (default: mlp.small and attention.small) this compiles for numpy and BLAS without tuning (cost-
model times, as ``--no-tune``), pins the output class to its slowest kernel form, and runs the pinned plan beside
the real one as the explorer's ``r`` does (``pipeline.run_what_if``): predicted and measured deltas, the spread of
the runs, the verification.
"""

from __future__ import annotations

import argparse

import sample_graphs
from engine import load, units
from engine.devices import LibraryDevice, NumpyDevice
from engine.extract import Pins
from engine.pipeline import Options, compile_program, run_what_if, what_if


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("samples", nargs="*", default=["mlp.small", "attention.small"])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    for name in args.samples:
        c = compile_program(load(sample_graphs.path(name)), [NumpyDevice(), LibraryDevice()],
                            Options(tune=False, tune_cache=False))
        assert c.egraph is not None and c.kernelization is not None
        out = next(iter(c.egraph.output_classes().values()))
        slow = max((n for n in c.egraph.eclass(out).nodes if c.egraph.node(n).op == "kernel"),
                   key=lambda n: c.kernel_times[c.egraph.node(n).param])
        r = run_what_if(c, what_if(c, Pins().node(c.egraph, slow, c.kernelization)).compilation, args.repeats)
        s = units.seconds
        print(f"{name}: c{out} pinned to n{slow}: predicted {s(r.predicted[0])} -> {s(r.predicted[1])} "
              f"({s(r.predicted_delta, signed=True)}); measured {s(r.measured[0])} -> {s(r.measured[1])} "
              f"({s(r.measured_delta, signed=True)}, spread {s(r.spread)}); verification "
              f"{'ok' if r.verification.ok else 'FAILED'}")


if __name__ == "__main__":
    main()

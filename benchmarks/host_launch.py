"""What a host plan's launch costs next to its trials, by what differs: fresh outputs (dropped or kept), inputs
from memory, and inside ``execute`` (the native C device; samples whose plan is one host launch).

    python benchmarks/host_launch.py [SAMPLE ...]      # default: elementwise softmax

Per sample, the plan is compiled for the native device alone (tuned, as a user's); then its one launch is timed,
median of 5 each:
- hot: reused outputs, inputs cached (what a trial times);
- fresh, dropped: each launch on new outputs, freed after it (what calibration's first-touch term timed);
- fresh, kept: each launch on new outputs, all kept until the end (what a plan's outputs are);
- cold: reused outputs, inputs pushed out of the caches first;
- cold, fresh kept: both;
- in execute: the launch step of ``execute``, every run's outputs kept.
Also printed: the plan's price for the launch (its trial time plus ``output_cost``).
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sample_graphs
from engine import load, units
from engine.devices import native
from engine.pipeline import Options, compile_program
from engine.plan import Launch, execute
from engine.tuning.calibrate import Evictor
from engine.tuning.measure import Bench

REPEATS = 5


def median(times: list[float]) -> str:
    return units.seconds(statistics.median(times))


def main(names: list[str]) -> None:
    (device,), note = native.discover()
    evict = Evictor()
    print(f"native device; note: {note}")
    print("| sample | hot | fresh, dropped | fresh, kept | cold | cold, fresh kept | in execute | priced |")
    print("|---|---|---|---|---|---|---|---|")
    for name in names:
        c = compile_program(load(sample_graphs.path(name)), [device], Options(execute=False))
        (launch,) = [s for s in c.plan.steps if isinstance(s, Launch)]
        kernel = launch.kernel
        compiled = device.compile(kernel, launch.variant)
        bench = Bench(device, kernel)

        def new(kernel=kernel):
            return [device.alloc(b) for b in kernel.output_types]

        reused = new()
        device.launch(compiled, bench.inputs, reused)
        kept: list = []
        rows = {k: [] for k in ("hot", "dropped", "kept", "cold", "cold kept")}
        for _ in range(REPEATS):
            rows["hot"].append(device.launch(compiled, bench.inputs, reused))
            outs = new()
            rows["dropped"].append(device.launch(compiled, bench.inputs, outs))
            bench.free(outs)
            outs = new()
            rows["kept"].append(device.launch(compiled, bench.inputs, outs))
            kept.append(outs)
            evict()
            rows["cold"].append(device.launch(compiled, bench.inputs, reused))
            evict()
            outs = new()
            rows["cold kept"].append(device.launch(compiled, bench.inputs, outs))
            kept.append(outs)
        inputs = dict(c.program.input_values())
        index = c.plan.steps.index(launch)
        runs = [execute(c.plan, [device], inputs) for _ in range(REPEATS)]
        in_execute = [r.step_times[index] for r in runs]
        print(f"| {name} | " + " | ".join(median(t) for t in rows.values())
              + f" | {median(in_execute)} | {units.seconds(launch.predicted)} |")
        del kept, runs
        bench.close()


if __name__ == "__main__":
    main(sys.argv[1:] or ["elementwise", "softmax"])

"""What a host plan's launch costs next to its trials, by what differs: fresh outputs (dropped or kept), inputs
from memory, and inside ``execute`` (every launch of a plan for the native C device alone).

    python benchmarks/host_launch.py [SAMPLE ...]      # default: elementwise softmax

Per sample, the plan is compiled for the native device alone (tuned, as a user's) and run 5 times; then each of
its launches is timed alone, median of 5 in each condition:
- hot: reused outputs, inputs cached (what a trial times);
- fresh, dropped: each launch on new outputs, freed after it (what calibration's first-touch term timed);
- fresh, kept: each launch on new outputs, all kept until the end (what a plan's outputs are);
- cold: reused outputs, inputs pushed out of the caches first;
- cold, fresh kept: both;
- in execute: the launch step of ``execute``, every run's outputs kept.
Also printed: the plan's price for the launch (its trial time plus ``output_cost``). Last, in the same
process, what the calibration's first-touch term reads (``calibrate._first_touch`` on its 64 MiB micro-benchmark,
each variant it could time it with) beside what each launch above paid per fresh output byte (kept less hot): the
two should agree if the term prices a plan's first touches.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sample_graphs
from engine import load, units
from engine.devices import native
from engine.egraph.egraph import Scalar
from engine.kernel.index import Var
from engine.kernel.ir import Buffer, Const, Kernel
from engine.pipeline import Options, compile_program
from engine.plan import Launch, execute
from engine.program.dtypes import DType
from engine.tuning import calibrate
from engine.tuning.calibrate import Evictor
from engine.tuning.measure import Bench

REPEATS = 5


def median(times: list[float]) -> str:
    return units.seconds(statistics.median(times))


def conditions(device, compiled, bench: Bench, evict: Evictor) -> dict[str, list[float]]:
    """``REPEATS`` launches of ``compiled`` in each condition, taking turns; fresh outputs kept when so named."""
    kernel = bench.kernel

    def new() -> list:
        return [device.alloc(b) for b in kernel.output_types]

    reused = new()
    device.launch(compiled, bench.inputs, reused)
    kept: list = []
    rows: dict[str, list[float]] = {k: [] for k in ("hot", "dropped", "kept", "cold", "cold kept")}
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
    return rows


def per_byte(seconds: float) -> str:
    return f"{seconds * 1e12:.1f} ps/byte"


def calibration_term(device) -> None:
    """The calibration's first-touch term, timed 3 times with each variant of its micro-benchmark (``a + b``),
    then with the same loop on one input (``a + a``) and on none (a fill): whether the reads a launch does
    beside its first touches hide some of them."""
    n = calibrate.LARGE
    g = Var("g0", n)
    fill = Kernel((Buffer((n,), DType.F32),), (n,), (g,), None, (Const(Scalar(1.0, DType.F32), DType.F32),))
    for name, kernel in (("a + b", calibrate.micro_kernels()[1]), ("a + a", calibrate._elementwise(n, "twice")),
                         ("fill", fill)):
        bench = Bench(device, kernel, arrays=calibrate.halves(kernel))
        for variant in calibrate.family_variants(kernel, device):
            compiled = device.compile(kernel, variant)
            reads = [calibrate._first_touch(bench, compiled, calibrate.FRESH_PAIRS) for _ in range(3)]
            print(f"first-touch term on `{name}`, `{variant.tag}`: " + ", ".join(per_byte(r) for r in reads))
        bench.close()


def main(names: list[str]) -> None:
    (device,), _ = native.discover()
    evict = Evictor()
    print(f"native device ({device.driver_version})")
    print("| sample | launch | hot | fresh, dropped | fresh, kept | cold | cold, fresh kept | in execute | priced |")
    print("|---|---|---|---|---|---|---|---|---|")
    paid: list[str] = []
    for name in names:
        c = compile_program(load(sample_graphs.path(name)), [device], Options(execute=False))
        inputs = dict(c.program.input_values())
        runs = [execute(c.plan, [device], inputs) for _ in range(REPEATS)]
        for index, launch in enumerate(c.plan.steps):
            if not isinstance(launch, Launch):
                continue
            bench = Bench(device, launch.kernel)
            rows = conditions(device, device.compile(launch.kernel, launch.variant), bench, evict)
            bench.close()
            in_execute = [r.step_times[index] for r in runs]
            print(f"| {name} | {launch.name} | " + " | ".join(median(t) for t in rows.values())
                  + f" | {median(in_execute)} | {units.seconds(launch.predicted)} |", flush=True)
            extra = statistics.median(rows["kept"]) - statistics.median(rows["hot"])
            paid.append(f"{name} {launch.name}: {per_byte(extra / launch.kernel.output_bytes)}")
    print("fresh outputs, kept less hot, per byte: " + "; ".join(paid))
    calibration_term(device)


if __name__ == "__main__":
    main(sys.argv[1:] or ["elementwise", "softmax"])

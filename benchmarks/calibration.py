"""Honest costs: cold compile time, cost-model error per device, predicted vs measured plans, tuning vs budget.

    python benchmarks/calibration.py                     # every full-size sample, every device found
    python benchmarks/calibration.py mlp attention --gpu # some samples; --gpu: GPUs only for OpenCL
    python benchmarks/calibration.py --quick-start       # the explorer on the default sample, to "done"
    python benchmarks/calibration.py --record run.pickle # also keep every refit of the model, to replay offline
    bash benchmarks/h200.sh --calibration                # the same on the H200 device machine

Each sample compiles with an empty cache (a fresh ``ZYX_EXPLORE_CACHE``: copy links, device calibration and
tuning all measured again) under the default budget, runs and verifies.  Printed as Markdown tables:

- per device: what its calibration (the micro-benchmarks on first use) costs, and its first-touch cost;
- per sample: wall time (in process, imports excluded), tuning time vs budget, launches timed, plan predicted
  vs measured (the pipeline's: its first run and the median of its reruns; then the median of 3 more runs);
- per device: the cost model's error |log2(predicted / measured)| over every (kernel, device) the tuner timed,
  for the prediction made before the kernel's first trial on the device (out of sample) and for each trial's
  prediction made right before it ran (refitted by the trials before it);
- per device pool: the copies measured at each size, each way (what the plan's copies are priced by);
- per device: the calibrated parameters.

``--record`` keeps, per sample, every measurement the model was refitted with (micro-benchmarks, trials, executed
steps: kernel, device, variant, seconds) and each device's measured overhead and op costs, in order, so that
``calibration_replay.py`` can score another model on the same measurements (the trials a search chose stay as
they were).
"""

from __future__ import annotations

import argparse
import math
import os
import pickle
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from calibration_replay import profile

import sample_graphs
from engine import load, units
from engine.devices import discover
from engine.devices.base import Device
from engine.pipeline import Compilation, Options, compile_program
from engine.plan import Copy, ExecPlan, Execution, Launch, execute
from engine.tuning import OK
from engine.tuning.calibrate import Calibrations
from engine.tuning.search import _Search


def short(device: str) -> str:
    return device.split("-")[0] if device.startswith("opencl:") else device


def ms(seconds: float | None) -> str:
    return "-" if seconds is None or not math.isfinite(seconds) else units.seconds(seconds)


def barrier(device: Device, seconds: float) -> str:
    """The calibrated barrier cost in its device's unit: per work item on a CPU's OpenCL, per round of groups on a
    GPU."""
    if not seconds:
        return "-"
    return f"{units.seconds(seconds)} per {'item' if device.barrier_loops else 'round of groups'}"


def error(predicted: float, measured: float) -> float:
    return abs(math.log2(predicted / measured))


class Recorder:
    """Every ``Calibrations.observe`` call, marked ``trial`` when a search made it (else a micro-benchmark's or an
    executed step's), as (kind, kernel, device name, variant, seconds)."""

    def __init__(self) -> None:
        self.events: list[tuple] = []
        observe = Calibrations.observe
        recorder = self

        def recording(self, kernel, device, variant, seconds):
            caller = sys._getframe(1).f_code
            kind = "trial" if caller is _Search.run.__code__ else "other"
            recorder.events.append((kind, kernel, device.name, variant, seconds))
            return observe(self, kernel, device, variant, seconds)

        Calibrations.observe = recording  # type: ignore[method-assign]


def compile_cold(name: str, devices: list) -> tuple[Compilation, float, list[Execution]]:
    with tempfile.TemporaryDirectory() as cache:
        os.environ["ZYX_EXPLORE_CACHE"] = cache
        start = time.perf_counter()
        c = compile_program(load(sample_graphs.path(name)), devices, Options())
        wall = time.perf_counter() - start
    assert c.plan is not None
    inputs = dict(c.program.input_values())
    reruns = [execute(c.plan, devices, inputs) for _ in range(3)]
    return c, wall, reruns


def split(plan: ExecPlan, run: Execution) -> str:
    """Where a plan's total goes: its launches and its copies, each predicted / measured."""
    sums = {Launch: [0.0, 0.0], Copy: [0.0, 0.0]}
    for step, seconds in zip(plan.steps, run.step_times, strict=True):
        if isinstance(step, Launch | Copy):
            sums[type(step)][0] += step.predicted
            sums[type(step)][1] += seconds
    return " | ".join(f"{ms(p)} / {ms(m)}" for p, m in sums.values())


def quick_start() -> None:
    """Open the explorer (headless, 140x40) on the default sample with an empty cache; time it to "done"."""
    import asyncio

    from zyx_explorer.app import ExplorerApp
    from zyx_explorer.cli import default_file

    async def run() -> float:
        path = default_file()
        app = ExplorerApp(load(path), path)
        start = time.perf_counter()
        async with app.run_test(size=(140, 40)) as pilot:
            while app.running or "executed" not in app.session.done:
                if app.session.failed:
                    raise SystemExit(f"failed: {app.session.failed}")
                await pilot.pause(0.1)
            took = time.perf_counter() - start
            c = app.session.compilation
            print(f"quick start ({path.name}, empty cache): done in {took:.1f} s; tuned stage "
                  f"{c.tune_seconds:.1f} s of a {c.budget.total:g} s budget; plan {c.plan.coverage()}, "
                  f"{len(c.plan.launches())} launches on {len({s.device for s in c.plan.launches()})} devices")
        return took

    with tempfile.TemporaryDirectory() as cache:
        os.environ["ZYX_EXPLORE_CACHE"] = cache
        asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("samples", nargs="*", help="sample names (default: every full-size sample)")
    parser.add_argument("--gpu", action="store_true", help="OpenCL GPUs only (the CPU runtime left out)")
    parser.add_argument("--quick-start", action="store_true", help="time the explorer on the default sample instead")
    parser.add_argument("--record", type=Path, help="write every refit of the model here (see calibration_replay.py)")
    args = parser.parse_args()
    if args.quick_start:
        return quick_start()
    names = args.samples or [n for n in sample_graphs.names() if not n.endswith(".small")]
    devices = discover()
    if args.gpu:
        devices = [d for d in devices if not d.name.startswith("opencl:") or getattr(d, "is_gpu", False)]
    print("devices:", ", ".join(d.name for d in devices))
    print("\n| device | calibration | first touch of fresh outputs | thread wake-up | cache | out of cache / in it "
          "| streamed from memory | barrier |\n|---|---|---|---|---|---|---|---|")
    for d in devices:
        start = time.perf_counter()
        cal = Calibrations(persist=False).get(d)
        print(f"| {short(d.name)} | {time.perf_counter() - start:.2f} s | {cal.fresh * 1e12:.3g} ps/byte | "
              f"{ms(cal.parallel)} | {cal.cache / 2**20:.3g} MiB | {cal.stream:.3g}x | {cal.bandwidth / 1e9:.3g} GB/s | "
              f"{barrier(d, cal.barrier)} |",
              flush=True)
    print("\n| sample | wall | tuning / budget | launches timed | plan predicted | measured (pipeline: first run / reruns) | measured "
          "(median of 3 more) | measured / predicted | launches: predicted / measured | copies: predicted / measured "
          "| verified |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    first: dict[str, list[float]] = {}
    every: dict[str, list[float]] = {}
    ratios = []
    calibrations = {}
    copy_links = {}
    recorder = Recorder() if args.record else None
    recorded = []
    for name in names:
        if recorder is not None:
            recorder.events = []
        c, wall, reruns = compile_cold(name, devices)
        if recorder is not None:
            assert c.calibrations is not None
            fitted = {d: cal.to_json() for d, cal in c.calibrations.by_device.items()}
            recorded.append((name, fitted, recorder.events, [profile(d, recorder.events) for d in devices]))
        assert c.plan is not None and c.execution is not None and c.budget is not None
        middle = sorted(reruns, key=lambda r: r.total)[len(reruns) // 2]
        rerun = middle.total
        ratios.append(rerun / c.plan.predicted)
        print(f"| {name} | {wall:.1f} s | {c.tune_seconds:.1f} / {c.budget.total:g} s | "
              f"{len(c.plan.launches()) - c.plan.unmeasured} of {len(c.plan.launches())} | {ms(c.plan.predicted)} | "
              f"{ms(c.execution.first)} / {ms(c.execution.total)} | {ms(rerun)} | {rerun / c.plan.predicted:.2f} | "
              f"{split(c.plan, middle)} | {c.verification.ok if c.verification else '-'} |", flush=True)
        for result in c.tuning.values():
            timed = [t for t in result.trials if t.status == OK and t.seconds]
            if timed:
                first.setdefault(result.device, []).append(error(timed[0].predicted, timed[0].seconds))
                every.setdefault(result.device, []).extend(error(t.predicted, t.seconds) for t in timed)
        assert c.calibrations is not None
        calibrations.update(c.calibrations.by_device)
        copy_links.update(c.links)
    if args.record:
        args.record.write_bytes(pickle.dumps(recorded))
    print("\n| device | pairs timed | median \\|log2(pred/meas)\\|, before its first trial | p90 | trials | median, "
          "each trial | within 2x (each trial) |")
    print("|---|---|---|---|---|---|---|")
    for device, errors in sorted(first.items()):
        each = every[device]
        p90 = sorted(errors)[int(0.9 * (len(errors) - 1))]
        print(f"| {short(device)} | {len(errors)} | {statistics.median(errors):.2f} | {p90:.2f} | {len(each)} | "
              f"{statistics.median(each):.2f} | {sum(e < 1 for e in each) / len(each):.0%} |")
    worst = max(ratios, key=lambda r: abs(math.log2(r)))
    print(f"\nplans: measured/predicted from {min(ratios):.2f} to {max(ratios):.2f} (worst {worst:.2f}); "
          f"{sum(abs(math.log2(r)) > 1 for r in ratios)} of {len(ratios)} more than 2x off")
    print("\n| pool | uploads measured | downloads measured |\n|---|---|---|")
    for pool, link in sorted(copy_links.items()):
        print(f"| {short(pool)} | {link.up.describe()} | {link.down.describe()} |")
    print("\n| device | launch overhead | factor: device | elementwise | transcendental | reduce | matmul | row "
          "| observations |")
    print("|---|---|---|---|---|---|---|---|---|")
    for device, cal in sorted(calibrations.items()):
        overall = cal.device.factor(1.0)
        shapes = [f"{cal.shapes[s].factor(overall):.3g}" if s in cal.shapes else "-"
                  for s in ("elementwise", "transcendental", "reduce", "matmul", "row")]
        print(f"| {short(device)} | {cal.overhead * 1e6:.3g} µs | {overall:.3g} | {' | '.join(shapes)} | "
              f"{cal.observations} |")


if __name__ == "__main__":
    main()

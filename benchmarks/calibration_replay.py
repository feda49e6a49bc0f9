"""Replay what ``calibration.py --record`` kept under the cost model as it is now: its error on the same trials.

    python benchmarks/calibration.py --record /tmp/run.pickle   # measure once
    python benchmarks/calibration_replay.py /tmp/run.pickle     # score the model (after each change), in seconds

Per sample, each device starts from the recorded calibration's measured terms (overhead, first-touch and op
costs: what the micro-benchmarks measured) with no fitted factors, then is refitted with every recorded
measurement in order, as the run did; each trial is predicted right before its refit.  The searches' choices of
variants stay those of the recorded run (a model that ranks differently would have timed other variants), so
this scores prediction, not search.  A device of the recording that is not on this machine is replayed from its
recorded profile (``RecordedDevice``: what the calibrated model reads of a device), so that a GPU run replays here.
"""

from __future__ import annotations

import argparse
import math
import pickle
import statistics
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.devices import discover
from engine.devices.base import Device, Nominal
from engine.kernel.ir import Kernel
from engine.kernel.schedule import Variant
from engine.tuning.calibrate import Calibration, Calibrations, cache_bytes, shape


@dataclass
class RecordedDevice:
    """What the calibrated model reads of a device, kept by ``calibration.py --record``: its attributes, and its own
    predictions and thread counts for the (kernel, variant) pairs the recording measured."""

    name: str
    nominal: Nominal | None
    is_gpu: bool
    tunable: bool
    barrier_loops: bool
    launch_overhead: float
    cache_bytes: float
    pool: str
    compute_units: int = 1
    own: dict[tuple[str, Variant], tuple[float, int]] = field(default_factory=dict)
    """By (kernel key, variant): (the device's own ``predict``, its ``workers``)."""

    def predict(self, kernel: Kernel, variant: Variant) -> float:
        return self.own[kernel.key, variant][0]

    def workers(self, kernel: Kernel, variant: Variant) -> int:
        return self.own[kernel.key, variant][1]


def profile(device: Device, events: list) -> RecordedDevice:
    """``device`` as the calibrated model reads it, for the events of ``events`` on it."""
    own = {(kernel.key, variant): (device.predict(kernel, variant), device.workers(kernel, variant))
           for _, kernel, name, variant, _ in events if name == device.name}
    return RecordedDevice(device.name, device.nominal, device.is_gpu, device.tunable, device.barrier_loops,
                          device.launch_overhead, cache_bytes(device), device.pool, device.compute_units, own)


def replay(recorded: list, devices: dict, show: bool = False) -> dict[str, tuple[list[float], list[float]]]:
    """Per device: (errors before each kernel's first trial, errors of every trial), |log2(predicted/measured)|;
    ``show``: print every trial."""
    errors: dict[str, tuple[list[float], list[float]]] = {}
    live = devices
    for sample, fitted, events, *recorded_devices in recorded:
        if recorded_devices:  # the recording's own devices stand in for those not on this machine
            devices = {**{d.name: d for d in recorded_devices[0]}, **live}
        calibrations = Calibrations(persist=False, fit=False)
        measured = {d: Calibration.from_json({**data, **_UNFITTED}) for d, data in fitted.items() if d in devices}
        for d, cal in measured.items():
            if not cache_bytes(devices[d]):  # the model now takes no cache term for it
                cal.cache, cal.stream = 0.0, 1.0
            calibrations.by_device[d] = replace(cal, ops={})  # op costs are measured after the micro-benchmarks'
            # refits
        seen: set[tuple[str, str]] = set()
        for kind, kernel, name, variant, seconds in events:
            if name not in measured:
                continue
            device = devices[name]
            if kind == "trial":
                cal = calibrations.by_device[name]
                cal.ops = measured[name].ops
                predicted = calibrations.predict(kernel, device, variant)
                error = abs(math.log2(predicted / seconds))
                first, every = errors.setdefault(name, ([], []))
                new = (kernel.key, name) not in seen
                if new:
                    first.append(error)
                    seen.add((kernel.key, name))
                every.append(error)
                if show:
                    print(f"{sample:14} {name.split('-')[0]:8} {shape(kernel):14} {kernel.name[:28]:28} {variant!s:32} "
                          f"{'first' if new else '':5} pred {predicted * 1e3:9.4f} ms "
                          f"meas {seconds * 1e3:9.4f} ms  {math.log2(predicted / seconds):+.2f}")
            calibrations.observe(kernel, device, variant, seconds)
    return errors


_UNFITTED = {"device": [0.0, 0.0], "shapes": {}, "kernels": {}, "families": {}, "observations": 0}
"""A recorded calibration's fitted fields, emptied (the rest are measured by micro-benchmarks and kept)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("recording", type=Path)
    parser.add_argument("--show", action="store_true", help="print every trial's prediction")
    args = parser.parse_args()
    recorded = pickle.loads(args.recording.read_bytes())
    devices = {d.name: d for d in discover()}
    print("| device | pairs | median before first trial | p90 | trials | median, each trial | within 2x |")
    print("|---|---|---|---|---|---|---|")
    for name, (first, every) in sorted(replay(recorded, devices, args.show).items()):
        p90 = sorted(first)[int(0.9 * (len(first) - 1))]
        print(f"| {name.split('-')[0]} | {len(first)} | {statistics.median(first):.2f} | {p90:.2f} | {len(every)} | "
              f"{statistics.median(every):.2f} | {sum(e < 1 for e in every) / len(every):.0%} |")


if __name__ == "__main__":
    main()

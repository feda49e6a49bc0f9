"""Row sums split across work-groups next to one work item per row: calibrated predictions beside measured launches.

    python benchmarks/group_reduce.py [--device NAME]      # default: every tunable device

Per tunable device (calibrated afresh, not read from the cache), per row-sum shape, per variant (the default, an
unrolled loop, groups of 16, 64 and 256 items): the calibrated model's prediction, the best and the median of
``LAUNCHES`` launches, and log2(predicted / median).  On a CPU's OpenCL a work-group barrier is a loop over the
group's items, so a group reduce costs per item per barrier (``Calibration.barrier``, printed per device); a GPU
waits in hardware.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine import units
from engine.devices import discover
from engine.kernel.schedule import DEFAULT_VARIANT, Variant
from engine.tuning.calibrate import Calibrations, halves, row_sum
from engine.tuning.measure import Bench

SHAPES = [(1, 4096), (1, 1 << 22), (64, 256), (512, 1024), (4096, 256), (2048, 2048)]
VARIANTS = [DEFAULT_VARIANT, Variant(unroll=4), Variant(group=16), Variant(group=64), Variant(group=256)]
LAUNCHES = 9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="", help="only devices whose name contains this")
    args = parser.parse_args()
    calibrations = Calibrations(persist=False)
    for device in discover():
        if not device.tunable or args.device not in device.name:
            continue
        c = calibrations.get(device)
        print(f"\n{device.name}: barrier {c.barrier * 1e9:.2f} ns per item, launch {units.seconds(c.overhead)}")
        print("| rows x columns | variant | predicted | measured: best | median | log2(pred/median) |")
        print("|---|---|---|---|---|---|")
        for rows, cols in SHAPES:
            kernel = row_sum(rows, cols)
            for variant in VARIANTS:
                if variant.group > cols or device.variant_error(kernel, variant) is not None:
                    continue
                bench = Bench(device, kernel, arrays=halves(kernel))
                outs = [device.alloc(b) for b in kernel.output_types]
                try:
                    compiled = device.compile(kernel, variant)
                    device.launch(compiled, bench.inputs, outs)  # warm-up
                    times = [device.launch(compiled, bench.inputs, outs) for _ in range(LAUNCHES)]
                finally:
                    bench.free(outs)
                    bench.close()
                predicted, median = calibrations.predict(kernel, device, variant), statistics.median(times)
                print(f"| {rows} x {cols} | {variant} | {units.seconds(predicted)} | {units.seconds(min(times))} | "
                      f"{units.seconds(median)} | {math.log2(predicted / median):+.2f} |", flush=True)


if __name__ == "__main__":
    main()

"""Why a plan runs slower than its tuned kernels: its launches write freshly allocated outputs (first touch).

    python benchmarks/first_touch.py layernorm softmax     # samples (default: layernorm softmax)

Each sample compiles (empty cache, default budget), then its plan runs N times (``N``, default 7) with fresh
outputs as always, interleaved with N runs whose host outputs are touched when allocated (allocation steps are
not timed), so the difference per launch is the first-touch cost the tuner's trials (reused outputs) never pay.
Printed per launch: the plan's prediction (with the calibrated first-touch part), and the medians of both runs.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

import engine.plan as plan_module
import sample_graphs
from engine import load
from engine.devices import discover
from engine.pipeline import Options, compile_program


def touched(shape, dtype=float):
    array = np.empty(shape, dtype)
    array.fill(0)
    return array


def main() -> None:
    devices = discover()
    runs = int(os.environ.get("N", 7))
    for name in sys.argv[1:] or ["layernorm", "softmax"]:
        with tempfile.TemporaryDirectory() as cache:
            os.environ["ZYX_EXPLORE_CACHE"] = cache
            c = compile_program(load(sample_graphs.path(name)), devices, Options())
        assert c.plan is not None and c.calibrations is not None
        inputs = dict(c.program.input_values())
        fresh, pre = [], []
        for _ in range(runs):
            fresh.append(plan_module.execute(c.plan, devices, inputs))
            plan_module.np.empty = touched  # the executor's host allocations
            try:
                pre.append(plan_module.execute(c.plan, devices, inputs))
            finally:
                plan_module.np.empty = np.empty
        print(f"{name}: plan predicted {c.plan.predicted * 1e3:.1f} ms; measured {statistics.median(r.total for r in fresh) * 1e3:.1f} ms "
              f"(fresh outputs), {statistics.median(r.total for r in pre) * 1e3:.1f} ms (outputs touched first)")
        by_name = {d.name: d for d in devices}
        for i, step in enumerate(c.plan.steps):
            if isinstance(step, plan_module.Launch):
                part = c.calibrations.output_cost(step.kernel, by_name[step.device])
                print(f"  {step.device:10.10} {step.kernel.name[:28]:28} predicted {step.predicted * 1e3:7.2f} ms "
                      f"(first touch {part * 1e3:5.2f}); fresh {statistics.median(r.step_times[i] for r in fresh) * 1e3:7.2f}, "
                      f"touched first {statistics.median(r.step_times[i] for r in pre) * 1e3:7.2f}")


if __name__ == "__main__":
    main()

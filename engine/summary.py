"""A compilation's plan in numbers: what ``zyx-explore compile --json`` prints and the benchmarks record.

Every time is in seconds and says where it comes from: a launch's ``predicted_s`` is the tuner's measurement
when ``timed`` (``launches_measured`` counts them), else the calibrated cost model's; ``measured_s`` is the
time of that step when the plan ran.
"""

from __future__ import annotations

import math
from typing import Any

from engine.pipeline import Compilation
from engine.plan import Copy, Launch


def _number(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else x


def summary(c: Compilation) -> dict[str, Any]:
    """The plan summary of ``c`` (compiled through ``plan``; ``executed`` adds the measured times)."""
    assert c.plan is not None
    times = c.execution.step_times if c.execution is not None else None
    launches = []
    copies = 0.0
    for i, step in enumerate(c.plan.steps):
        took = times[i] if times is not None else None
        if isinstance(step, Launch):
            launches.append({"kernel": step.kernel.name, "name": step.name, "device": step.device,
                             "variant": str(step.variant), "predicted_s": _number(step.predicted), "timed": step.measured, "measured_s": took})
        elif isinstance(step, Copy):
            copies += step.predicted
    return {
        "verified": c.verification.ok if c.verification is not None else None,
        "devices": [d.name for d in c.devices],
        "extractor": c.extractor,
        "resident_inputs": bool(c.resident),
        "launches": len(launches),
        "launches_measured": sum(launch["timed"] for launch in launches),
        "coverage": c.plan.coverage(),
        "predicted_s": _number(c.plan.predicted),
        "copies_predicted_s": copies,
        "measured_s": c.execution.total if c.execution is not None else None,
        "first_run_s": c.execution.first if c.execution is not None else None,
        "reruns": c.execution.reruns if c.execution is not None else 0,
        "tune_s": c.tune_seconds,
        "budget_s": _number(c.budget.total) if c.budget is not None else None,
        "tuning_cancelled": c.cancelled,
        "kernels_tuned": len(c.tuning),
        "variants_timed": sum(len(r.trials) for r in c.tuning.values()),
        "skipped": [{"kernel": kn.candidate, "device": kn.device, "why": str(s)} for kn, s in c.skipped.items()],
        "problems": list(c.problems),
        "plan": launches,
    }

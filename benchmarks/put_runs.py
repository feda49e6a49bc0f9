"""A Session's put runs (inputs resident, launches prepared) on this machine's OpenCL device: the host's cost of
running a plan again, to compare two trees of the engine on one machine.

    python benchmarks/put_runs.py [SAMPLE ...]                             # this tree
    PYTHONPATH=/path/to/other/tree python benchmarks/put_runs.py [SAMPLE ...]  # another tree's engine

Per sample, the median over 7 rounds of the mean wall time of 100 runs (after 20 warm-up runs), and the Python
function calls one run makes (counted by cProfile over 100 more runs: a figure the machine's noise does not move,
where a shared machine's times do). The plan is compiled for resident inputs with a token tuning budget, so two
compilations may still pick different plans: compare rows of the same step count.
"""

from __future__ import annotations

import cProfile
import pstats
import statistics
import sys
import time

import sample_graphs
from engine import load
from engine.devices.opencl import discover
from engine.pipeline import Options, compile_program
from engine.plan import Session
from engine.tuning import Budget


def main() -> None:
    devices = list(discover())
    for name in sys.argv[1:] or ["gelu_ffn.small", "attention.small", "mlp.small"]:
        program = load(sample_graphs.path(name))
        inputs = program.input_values()
        options = Options(execute=False, tune_cache=False, resident_inputs=True,
                          tune_budget=Budget(variants=1, seconds=0.2, total=1))
        plan = compile_program(program, devices, options).plan
        assert plan is not None
        with Session(plan, devices) as session:
            frozen = {k: session.put(k, inputs[k]) for k in session.inputs}
            for _ in range(20):
                session.run(frozen)
            rounds = []
            for _ in range(7):
                start = time.perf_counter()
                for _ in range(100):
                    session.run(frozen)
                rounds.append((time.perf_counter() - start) / 100)
            profiler = cProfile.Profile()
            profiler.enable()
            for _ in range(100):
                session.run(frozen)
            profiler.disable()
        calls = pstats.Stats(profiler).total_calls / 100  # type: ignore[attr-defined]
        print(f"{name}: {len(plan.steps)} steps, put run {statistics.median(rounds) * 1e3:.3f} ms, "
              f"{calls:.0f} Python calls", flush=True)


if __name__ == "__main__":
    main()

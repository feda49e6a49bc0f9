"""CPU plans under OpenMP's default wait policy (threads spin a while after a parallel loop) and under PASSIVE
(they sleep at once: what the native device sets), in alternating processes.

    python benchmarks/wait_policy.py [SAMPLE ...] [--rounds N]     # default: every full-size sample, 2 rounds

Each process compiles the sample for the numpy, BLAS and native devices (tuned; one tuning cache per policy,
shared by its rounds, so the first round of each policy tunes and later ones reuse its choices), then runs the
plan ``RUNS`` times with ``execute`` and prints the best and the median wall time. The policies take turns, so
a drifting load falls on both alike.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import sample_graphs  # noqa: E402

RUNS = 9
POLICIES = {"default": "", "passive": "PASSIVE"}
"""Label -> ``OMP_WAIT_POLICY``; an empty value is none of libgomp's names, so it keeps its default."""


def child(name: str) -> None:
    from engine import load
    from engine.devices import LibraryDevice, NumpyDevice
    from engine.devices.native import discover
    from engine.pipeline import Options, compile_program
    from engine.plan import Launch, execute

    devices = [NumpyDevice(), LibraryDevice(), *discover()[0]]
    program = load(sample_graphs.path(name))
    c = compile_program(program, devices, Options(execute=False))
    assert c.plan is not None
    inputs = program.input_values()
    walls = []
    for _ in range(RUNS):
        start = time.perf_counter()
        execute(c.plan, devices, inputs)
        walls.append(time.perf_counter() - start)
    print(json.dumps({"best": min(walls), "median": statistics.median(walls), "predicted": c.plan.predicted,
                      "devices": " ".join(s.device for s in c.plan.steps if isinstance(s, Launch))}))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("samples", nargs="*", default=[n for n in sample_graphs.names() if not n.endswith(".small")])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child)
        return
    with tempfile.TemporaryDirectory() as root:
        print("| sample | policy | plan's launches | predicted ms | best ms per round | median ms per round |")
        print("|---|---|---|---|---|---|")
        for name in args.samples:
            results: dict[str, list[dict]] = {label: [] for label in POLICIES}
            for _ in range(args.rounds):
                for label, policy in POLICIES.items():
                    env = dict(os.environ, OMP_WAIT_POLICY=policy, ZYX_EXPLORE_CACHE=os.path.join(root, label))
                    out = subprocess.run([sys.executable, __file__, "--child", name], env=env, check=True,
                                         capture_output=True, text=True).stdout
                    results[label].append(json.loads(out.strip().splitlines()[-1]))
            for label, rounds in results.items():
                print(f"| {name} | {label} | {rounds[-1]['devices']} | {rounds[-1]['predicted'] * 1e3:.2f} | "
                      + " / ".join(f"{r['best'] * 1e3:.2f}" for r in rounds) + " | "
                      + " / ".join(f"{r['median'] * 1e3:.2f}" for r in rounds) + " |", flush=True)


if __name__ == "__main__":
    main()

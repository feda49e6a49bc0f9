"""Where a plan's end-to-end time goes: ``python benchmarks/end_to_end.py [SAMPLE ...] [--gpu] [--repeats N]``.

For each sample it compiles a plan (tuned, without the disk cache) on every OpenCL device found (``--gpu``: the
first OpenCL GPU and the CUDA device), then runs it from host arrays to host arrays four ways, each best of
``--repeats`` after a warm-up:

* ``timed``: ``execute``, every launch waited for and timed on its device (what tuning and feedback read);
* ``queued``: ``execute(timed=False)``, launches queued (what a caller wanting the outputs pays);
* ``resident``: a ``Session`` given the same arrays again (unchanged inputs found by comparing bytes);
* ``put``: a ``Session`` given the read-only arrays ``Session.put`` returned (reused without a comparison).

Each run's wall time is split into its steps (allocate, upload, launch, download, free) and the rest (Python:
input checks, kernel lookups, the outputs' reshaping), by timing ``_Run.step``.  Then each device's copy link is
measured both ways, through pinned staging and pageable arrays (``engine.tuning.links.measure``).

``--resident`` plans for inputs resident on the devices (``Options.resident_inputs``, as ``compare.py --gpu``
does); ``--torch`` adds torch eager's best wall time from host arrays (``.cuda()`` + call + ``.cpu()``) and from
tensors on the GPU (call + ``.cpu()``), as compare.py measures them; ``--profile`` prints where the host's time
goes in the ``put`` runs (cProfile, the functions of most own time).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

import compare
import numpy as np

import sample_graphs
from engine import load
from engine import plan as plan_module
from engine.devices import cuda_blas
from engine.devices.base import Device
from engine.devices.opencl import discover as opencl_devices
from engine.kernel.ir import HOST
from engine.pipeline import Options, compile_program
from engine.plan import Allocate, Copy, Execution, Launch, Session, execute
from engine.tuning import Budget
from engine.tuning.links import measure

PARTS = ("allocate", "upload", "launch", "download", "free")


def part(step: plan_module.Step) -> str:
    if isinstance(step, Allocate):
        return "allocate"
    if isinstance(step, Copy):
        return "download" if step.target[1] == HOST else "upload"
    return "launch" if isinstance(step, Launch) else "free"


@contextmanager
def split(into: dict[str, float]):
    """Add the wall seconds of every plan step run inside the block to ``into`` by part."""
    original = plan_module._Run.step

    def timed(self: Any, step: plan_module.Step) -> float:
        start = time.perf_counter()
        try:
            return original(self, step)
        finally:
            into[part(step)] = into.get(part(step), 0.0) + time.perf_counter() - start

    plan_module._Run.step = timed  # type: ignore[method-assign]
    try:
        yield
    finally:
        plan_module._Run.step = original  # type: ignore[method-assign]


def best(fn: Callable[[], Execution], repeats: int) -> tuple[float, dict[str, float]]:
    """The best wall seconds of ``fn`` (after one warm-up) and that run's split."""
    fn()
    found: tuple[float, dict[str, float]] = (float("inf"), {})
    for _ in range(repeats):
        parts: dict[str, float] = {}
        with split(parts):
            start = time.perf_counter()
            fn()
            wall = time.perf_counter() - start
        if wall < found[0]:
            found = (wall, parts)
    return found


def profile(fn: Callable[[], object], runs: int) -> None:
    """Print the functions of most own time over ``runs`` calls of ``fn``, per call."""
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(runs):
        fn()
    profiler.disable()
    stats = pstats.Stats(profiler)
    rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:15]  # type: ignore[attr-defined]
    print(f"put, cProfile over {runs} runs, per run: own ms, cumulative ms, calls, function")
    for (path, line, name), (_, calls, own, cumulative, _) in rows:
        print(f"  {own / runs * 1e3:7.3f} {cumulative / runs * 1e3:7.3f} {calls / runs:6.1f}  "
              f"{path.rsplit('/', 2)[-1]}:{line} {name}")


def row(label: str, wall: float, parts: dict[str, float]) -> str:
    cells = [f"{parts.get(p, 0.0) * 1e3:.3f}" for p in PARTS]
    return f"| {label} | {wall * 1e3:.3f} | " + " | ".join(cells) + f" | {(wall - sum(parts.values())) * 1e3:.3f} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("samples", nargs="*", default=["sum", "mlp", "attention", "conv_relu"])
    parser.add_argument("--gpu", action="store_true", help="the first OpenCL GPU and the CUDA device")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=4.0, help="tuning seconds per kernel")
    parser.add_argument("--resident", action="store_true", help="plan for inputs resident on the devices")
    parser.add_argument("--torch", action="store_true", help="torch eager's round trips beside ours (a CUDA GPU)")
    parser.add_argument("--profile", action="store_true", help="cProfile the put runs")
    args = parser.parse_args()
    torch = compare._torch() if args.torch else None
    devices: list[Device] = list(opencl_devices())
    if args.gpu:
        devices = [d for d in devices if d.is_gpu][:1] + list(cuda_blas.discover())
    print("devices:", ", ".join(f"{d.name} (copies {d.copies})" for d in devices))
    budget = Budget(variants=8, seconds=args.seconds, total=5 * args.seconds)
    for name in args.samples:
        program = load(sample_graphs.path(name))
        inputs = program.input_values()
        c = compile_program(program, devices, Options(execute=False, tune_cache=False, tune_budget=budget,
                                                      resident_inputs=args.resident))
        plan = c.plan
        assert plan is not None
        nbytes = sum(v.nbytes for v in inputs.values())
        launches = " ".join(sorted({s.device.removeprefix("opencl:")[:12] for s in plan.launches()}))
        print(f"\n{name}: {len(plan.launches())} launches on {launches}, inputs {nbytes / 1e6:.1f} MB, "
              f"kernels predicted {sum(s.predicted for s in plan.launches()) * 1e3:.3f} ms")
        print("| run | wall ms | " + " | ".join(f"{p} ms" for p in PARTS) + " | rest ms |")
        print("|---|---|" + "---|" * len(PARTS) + "---|")
        print(row("timed", *best(lambda p=plan, i=inputs: execute(p, devices, i), args.repeats)), flush=True)
        print(row("queued", *best(lambda p=plan, i=inputs: execute(p, devices, i, timed=False), args.repeats)))
        with Session(plan, devices) as session:
            print(row("resident", *best(lambda s=session, i=inputs: s.run(i), args.repeats)))
            frozen = {k: session.put(k, inputs[k]) for k in session.inputs}
            print(row("put", *best(lambda s=session, i=frozen: s.run(i), args.repeats)))
            outputs = session.run(frozen).outputs
            if args.profile:
                profile(lambda s=session, i=frozen: s.run(i), 20 * args.repeats)
        kernels = sum(t for s, t in zip(plan.steps, execute(plan, devices, inputs).step_times) if isinstance(s, Launch))
        print(f"kernels (a timed run's launches): {kernels * 1e3:.3f} ms")
        if torch is not None:
            trip = compare._torch_round_trip(torch, program, inputs, args.repeats)
            kept = compare._torch_round_trip(torch, program, inputs, args.repeats, resident=True)
            print(f"torch eager: .cuda() + call + .cpu() {compare.ms(trip)} ms; call + .cpu() {compare.ms(kept)} ms")
        fresh = execute(plan, devices, inputs).outputs
        same = all(np.array_equal(fresh[k], outputs[k]) for k in fresh)
        print(f"resident outputs equal to a fresh run's: {same}")
    print()
    for d in devices:
        pinned = getattr(d, "pinned", None)
        ways = (True, False) if pinned is not None else (None,)
        for way in ways:
            if way is not None:
                d.pinned = way  # type: ignore[attr-defined]
            link = measure(d)
            print(f"{d.name} copies {d.copies}: {link.describe()}")
        if pinned is not None:
            d.pinned = pinned  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()

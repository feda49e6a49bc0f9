"""Autotuning the kernels of full-size samples: ``python benchmarks/autotune.py [SAMPLE ...] [--variants N]``.

For each OpenCL device found (or those whose name contains ``--device``) and
each sample's plan kernels (the plan the cost model picks, untuned), tunes without the disk cache and prints the
default variant's median time, the best verified variant's, the speed-up, the
achieved bandwidth of the best, how many variants were tried / wrong / failed,
and the tuning time.  Kernels of equal key are tuned once.
"""

from __future__ import annotations

import argparse
import time

import sample_graphs
from engine import load
from engine.devices.opencl import discover
from engine.pipeline import Options, compile_program
from engine.tuning import FAILED, WRONG, Budget, predict, tune

DEFAULT = ["elementwise", "softmax", "layernorm", "sum", "matmul"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("samples", nargs="*", default=DEFAULT)
    parser.add_argument("--variants", type=int, default=24, help="variants timed per kernel (budget)")
    parser.add_argument("--seconds", type=float, default=60.0, help="seconds per kernel (budget)")
    parser.add_argument("--device", default="", help="only devices whose name contains this")
    args = parser.parse_args()
    budget = Budget(variants=args.variants, seconds=args.seconds)
    devices = [d for d in discover() if args.device in d.name]
    if not devices:
        raise SystemExit("no OpenCL device found")
    for device in devices:
        print(f"device: {device.name} ({device.driver_version})")
        print(f"{'sample':18} {'kernel':10} {'shape':>12} {'default ms':>10} {'tuned ms':>9} {'x':>6} "
              f"{'GB/s':>7} {'tried':>5} {'wrong':>5} {'fail':>4} {'tune s':>6}  best")
        seen: set[str] = set()
        total = [0.0, 0.0, 0.0]
        for name in args.samples:
            plan = compile_program(load(sample_graphs.path(name)), [device], Options(execute=False, tune=False)).plan
            for launch in plan.launches():
                k = launch.kernel
                if k.key in seen:
                    continue
                seen.add(k.key)
                start = time.perf_counter()
                result = tune(k, device, budget)
                elapsed = time.perf_counter() - start
                default = result.default
                base = default.seconds if default is not None and default.seconds else predict(k, device)
                moved = k.moved_bytes
                wrong = sum(t.status == WRONG for t in result.trials)
                failed = sum(t.status == FAILED for t in result.trials)
                shape = "x".join(map(str, k.shape)) or "()"
                total = [total[0] + base, total[1] + result.seconds, total[2] + elapsed]
                print(f"{name:18} {k.name[2:10]:10} {shape:>12} {base * 1e3:10.3f} {result.seconds * 1e3:9.3f} "
                      f"{base / result.seconds:6.1f} {moved / result.seconds / 1e9:7.1f} {len(result.trials):5d} "
                      f"{wrong:5d} {failed:4d} {elapsed:6.1f}  {result.best}")
                for t in result.trials:
                    if t.status in (WRONG, FAILED):
                        print(f"    {t.status} {t.variant}: {t.reason.splitlines()[0] if t.reason else ''}")
        print(f"total: default {total[0] * 1e3:.2f} ms, tuned {total[1] * 1e3:.2f} ms "
              f"({total[0] / total[1]:.1f}x), tuning {total[2]:.1f} s\n")


if __name__ == "__main__":
    main()

"""What a GPU->host copy costs, by the path it takes (cupy on a CUDA GPU).

    python benchmarks/download_paths.py [--dropped]   # on a machine with cupy and a CUDA GPU (h200.sh: the set-up)

Per size, the median of 21 downloads of one device array, every result kept (as a plan's outputs are; with
``--dropped``, each result let go before the next, as a loop that consumes its outputs does):
- fresh pinned: page-locked memory from cupy's pinned pool, one DMA into it (what the cuBLAS device did before);
- staged + copy: one DMA into a reused pinned buffer, then a copy to a fresh numpy array;
- pageable: ``cupy.asnumpy``;
- reused pinned: one DMA into the same pinned buffer each time (the result not kept: what a round trip that drops
  its result times, and so what the copy links measured before they kept every download);
- the cuBLAS device's ``download`` (``engine.devices.cuda_blas``) as it is: one DMA into a pinned block lent as
  the result while one is free (results dropped; kept, a few are made, then it stages);
- the same with no blocks to lend: chunks staged through pinned memory and copied out on threads (what it did
  before 2026-12-07 19:00 UTC, and does while a caller keeps every block lent);
- torch's ``.cpu()`` of a CUDA tensor of the same size (the peer's round trip ends with it).
"""

from __future__ import annotations

import functools
import statistics
import sys
import time

import cupy as cp
import numpy as np
import torch

from engine.devices import cuda_blas, staging
from engine.kernel.ir import Buffer
from engine.program.dtypes import DType

SIZES_MIB = (1, 4, 16, 64, 256)
DROPPED = "--dropped" in sys.argv[1:]
"""Whether each result is let go before the next (otherwise kept until the path's last run)."""


def median_ms(fn, keep: bool = not DROPPED, repeats: int = 21) -> float:
    """The median wall ms of ``fn``, its results kept until the last run when ``keep``."""
    times, kept = [], []
    for _ in range(repeats):
        cp.cuda.Device(0).synchronize()
        start = time.perf_counter()
        result = fn()
        if keep:
            kept.append(result)
        del result
        cp.cuda.Device(0).synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def fresh_pinned(device, stage: np.ndarray) -> np.ndarray:
    out = np.ndarray(stage.shape, np.float32, buffer=cp.cuda.alloc_pinned_memory(stage.nbytes))
    return device.get(out=out)


def staged_copy(device, stage: np.ndarray) -> np.ndarray:
    device.get(out=stage)
    return stage.copy()


def pageable(device, stage: np.ndarray) -> np.ndarray:
    return cp.asnumpy(device)


def reused_pinned(device, stage: np.ndarray) -> None:
    device.get(out=stage)


def staged(ours: cuda_blas.CublasDevice, download):
    """``download`` run with no pinned block to lend (the device's blocks put back after)."""
    def run():
        kept, ours._blocks = ours._blocks, staging.Blocks(lambda size: None)
        try:
            return download()
        finally:
            ours._blocks = kept
    return run


def main() -> None:
    ours = cuda_blas.discover()[0]
    print(f"results {'dropped' if DROPPED else 'kept'}; median of 21, ms")
    print("| size | fresh pinned | staged + copy | pageable | reused pinned (result dropped) | ours | ours, staged "
          "| torch .cpu() |\n|---|---|---|---|---|---|---|---|")
    for mib in SIZES_MIB:
        n = (mib << 20) // 4
        device = cp.arange(n, dtype=cp.float32)
        stage = np.ndarray((n,), np.float32, buffer=cp.cuda.alloc_pinned_memory(n * 4))
        download = functools.partial(ours.download, device, Buffer((n,), DType.F32))
        figures = [median_ms(functools.partial(path, device, stage))
                   for path in (fresh_pinned, staged_copy, pageable, reused_pinned)]
        figures += [median_ms(download), median_ms(staged(ours, download))]
        figures.append(median_ms(torch.arange(n, dtype=torch.float32, device="cuda").cpu))
        print(f"| {mib} MiB | " + " | ".join(f"{t:.2f} ms" for t in figures) + " |", flush=True)
        cp.get_default_pinned_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()

"""What a host->GPU copy costs, by the path it takes (cupy on a CUDA GPU).

    python benchmarks/upload_paths.py   # on a machine with cupy and a CUDA GPU (h200.sh --uploads: the set-up)

Per size, the median of 21 uploads of one host array (each device copy let go before the next, as a plan's
fresh run frees its inputs):
- pageable: ``cupy.asarray``, the driver's own staging;
- the cuBLAS device's ``upload`` (``engine.devices.cuda_blas``): chunks copied into pinned memory on threads, each
  chunk's DMA queued as it lands, with several staging settings: the copying threads, and the fewest bytes per
  chunk (256 KiB was the floor before 2026-12-07, 1 MiB since);
- torch's ``.cuda()`` of a CPU tensor over the same array (the peer's round trip starts with it).
"""

from __future__ import annotations

import functools

import cupy as cp
import numpy as np
import torch
from download_paths import SIZES_MIB, median_ms

from engine.devices import cuda_blas, staging

SETTINGS = ((staging.THREADS, 256 << 10), (staging.THREADS, 1 << 20), (staging.THREADS, 4 << 20), (1, 0))
"""(copying threads, fewest bytes per chunk) of the cuBLAS device's upload columns."""


def with_staging(threads: int, floor: int, copy):
    """``copy`` run with ``threads`` copying threads and chunks of at least ``floor`` bytes (the device's own
    settings put back after)."""
    def run():
        kept, (staging.THREADS, staging.MIN_CHUNK) = (staging.THREADS, staging.MIN_CHUNK), (threads, floor)
        try:
            return copy()
        finally:
            staging.THREADS, staging.MIN_CHUNK = kept
    return run


def main() -> None:
    ours = cuda_blas.discover()[0]
    print("uploads, median of 21, ms")
    settings = " | ".join(f"ours, {t} threads, chunks >= {f >> 10} KiB" for t, f in SETTINGS)
    print(f"| size | pageable | {settings} | torch .cuda() |\n|---|---|" + "---|" * len(SETTINGS) + "---|")
    for mib in SIZES_MIB:
        host = np.arange((mib << 20) // 4, dtype=np.float32)
        figures = [median_ms(functools.partial(cp.asarray, host), keep=False)]
        figures += [median_ms(with_staging(t, f, functools.partial(ours.upload, host)), keep=False)
                    for t, f in SETTINGS]
        figures.append(median_ms(torch.from_numpy(host).cuda, keep=False))
        print(f"| {mib} MiB | " + " | ".join(f"{t:.2f} ms" for t in figures) + " |", flush=True)


if __name__ == "__main__":
    main()

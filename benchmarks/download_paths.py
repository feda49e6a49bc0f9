"""What a GPU->host copy costs, by the path it takes (cupy on a CUDA GPU).

    python benchmarks/download_paths.py [--dropped]   # on a machine with cupy and a CUDA GPU (h200.sh: the set-up)

Per size, the median of 9 downloads of one device array, every result kept (as a plan's outputs are; with
``--dropped``, each result let go before the next, as a loop that consumes its outputs does):
- fresh pinned: page-locked memory from cupy's pinned pool, one DMA into it (what the cuBLAS device did before);
- staged + copy: one DMA into a reused pinned buffer, then a copy to a fresh numpy array;
- pageable: ``cupy.asnumpy``;
- reused pinned: one DMA into the same pinned buffer each time (the result not kept: what a round trip that drops
  its result times, and so what the copy links measured before they kept every download);
- the cuBLAS device's ``download`` (``engine.devices.cuda_blas``): chunks staged through pinned memory, copied out on
  threads; as it is, then with chunks of at least 1 MiB and at least 4 MiB (fewer thread hand-offs);
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
CHUNK_FLOORS = (staging.MIN_CHUNK, 1 << 20, 4 << 20)
DROPPED = "--dropped" in sys.argv[1:]


def median_ms(fn, kept: list, repeats: int = 9) -> float:
    times = []
    for _ in range(repeats):
        cp.cuda.Device(0).synchronize()
        start = time.perf_counter()
        result = fn()
        if not DROPPED:
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


def with_chunk_floor(floor: int, download):
    """``download`` run with staging chunks of at least ``floor`` bytes (the device's own setting put back after)."""
    def run():
        kept_floor, staging.MIN_CHUNK = staging.MIN_CHUNK, floor
        try:
            return download()
        finally:
            staging.MIN_CHUNK = kept_floor
    return run


def main() -> None:
    ours = cuda_blas.discover()[0]
    print(f"results {'dropped' if DROPPED else 'kept'}; median of 9, ms")
    floors = " | ".join(f"ours, chunks >= {f >> 10} KiB" for f in CHUNK_FLOORS)
    print(f"| size | fresh pinned | staged + copy | pageable | reused pinned (result dropped) | {floors} | torch .cpu() |\n"
          "|---|---|---|---|---|" + "---|" * len(CHUNK_FLOORS) + "---|")
    for mib in SIZES_MIB:
        n = (mib << 20) // 4
        device = cp.arange(n, dtype=cp.float32)
        stage = np.ndarray((n,), np.float32, buffer=cp.cuda.alloc_pinned_memory(n * 4))
        kept: list = []
        download = functools.partial(ours.download, device, Buffer((n,), DType.F32))
        figures = [median_ms(functools.partial(path, device, stage), kept)
                   for path in (fresh_pinned, staged_copy, pageable, reused_pinned)]
        figures += [median_ms(with_chunk_floor(f, download), kept) for f in CHUNK_FLOORS]
        figures.append(median_ms(torch.arange(n, dtype=torch.float32, device="cuda").cpu, kept))
        print(f"| {mib} MiB | " + " | ".join(f"{t:.2f} ms" for t in figures) + " |", flush=True)
        kept.clear()
        cp.get_default_pinned_memory_pool().free_all_blocks()


if __name__ == "__main__":
    main()

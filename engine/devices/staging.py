"""Host copies in chunks, for devices whose copies go through page-locked (pinned) staging memory, and a byte
comparison of host arrays.

A copy from a pageable numpy array to a device through pinned memory has two legs: a host copy into the
page-locked buffer, then the device's DMA from it (and the reverse for a download).  Cut into chunks, the DMA of one
chunk runs while the host copies the next, and the host copies run on a few threads (numpy drops the GIL for a
large copy), so the pair costs little more than its slower leg.  The caller's thread copies a chunk too (it is
awake, where a thread must first be woken), and arrays of one chunk are copied on it alone: a thread hand-off costs
more than their copy.

A download can skip the host leg: its DMA lands in a page-locked block (``Blocks``) that the caller is handed as its
array, and the block comes back to the device when that array dies.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

CHUNK = 4 << 20
"""The most bytes per chunk: large enough that a chunk's thread hand-off and DMA launch are a small part of it,
small enough that the first DMA starts early."""
MIN_CHUNK = 1 << 20
"""The fewest bytes per chunk (but for the last): a chunk's thread hand-off must cost little beside its copy, so a
copy of 1 MiB or less runs on the caller's thread, and one of a few MiB on a few threads."""
THREADS = max(1, min(4, os.cpu_count() or 1))
"""Threads copying chunks at once (host memory bandwidth is shared; a few threads fill it)."""

_pool: ThreadPoolExecutor | None = None


def _threads() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(THREADS, thread_name_prefix="zyx-staging")
    return _pool


def as_bytes(array: np.ndarray) -> np.ndarray:
    """A flat uint8 view of a C-contiguous ``array`` (no copy)."""
    assert array.flags.c_contiguous, "staging copies need a C-contiguous array"
    return array.reshape(-1).view(np.uint8)


def spans(nbytes: int, chunk: int | None = None) -> list[tuple[int, int]]:
    """``(start, stop)`` byte ranges of ``chunk`` bytes covering ``nbytes`` (none for 0); by default two chunks per
    thread, in whole 64 KiB, between ``MIN_CHUNK`` and ``CHUNK``."""
    step = chunk or min(CHUNK, max(MIN_CHUNK, -(-nbytes // (2 * THREADS * 65536)) * 65536))
    return [(a, min(a + step, nbytes)) for a in range(0, nbytes, step)]


def _copy(dst: np.ndarray, src: np.ndarray) -> None:
    np.copyto(dst, src)


def copy_in(dst: np.ndarray, src: np.ndarray, then: Callable[[int, int], None], chunk: int | None = None) -> None:
    """Copy the bytes of ``src`` into ``dst`` (flat uint8 arrays of one size), calling ``then(start, stop)`` on the
    caller's thread as each chunk has landed, in order (where a device starts that chunk's DMA)."""
    assert dst.size == src.size
    parts = spans(src.size, chunk)
    if len(parts) <= 1 or THREADS == 1:
        for a, b in parts:
            _copy(dst[a:b], src[a:b])
            then(a, b)
        return
    pool = _threads()
    futures = [pool.submit(_copy, dst[a:b], src[a:b]) for a, b in parts[1:]]
    try:
        a, b = parts[0]
        _copy(dst[a:b], src[a:b])  # the caller is awake: its chunk lands before a thread's would
        then(a, b)
        for (a, b), f in zip(parts[1:], futures):
            f.result()
            then(a, b)
    finally:
        for f in futures:
            f.cancel()
        _wait(futures)


def copy_out(dst: np.ndarray, src: np.ndarray, parts: list[tuple[int, int]], landed: Callable[[int], None]) -> None:
    """Copy chunks ``parts`` of ``src`` into ``dst`` (flat uint8 arrays of one size), each after ``landed(i)``
    returns (where a device waits for chunk ``i``'s DMA), on the copying threads."""
    if len(parts) <= 1 or THREADS == 1:
        for i, (a, b) in enumerate(parts):
            landed(i)
            _copy(dst[a:b], src[a:b])
        return
    pool = _threads()
    futures: list[Future] = []
    try:
        for i, (a, b) in enumerate(parts[:-1]):
            landed(i)
            futures.append(pool.submit(_copy, dst[a:b], src[a:b]))
        a, b = parts[-1]
        landed(len(parts) - 1)
        _copy(dst[a:b], src[a:b])  # the caller copies the last chunk while the threads wake
    finally:
        _wait(futures)


def _wait(futures: list[Future]) -> None:
    """Wait for ``futures`` and raise the first error among them (none left running on the staging memory)."""
    error = None
    for f in futures:
        if not f.cancelled():
            try:
                f.result()
            except Exception as e:
                error = error or e
    if error is not None:
        raise error


class Blocks:
    """Page-locked host blocks lent out as downloads' results.

    A download into a lent block is one DMA: no copy out of a staging buffer, and no fresh pages of a new array
    to fault in.  The caller gets the block as its array; the block is free again once the last view of that
    array is gone.  Page-locking memory costs several times copying it, so only ``PER_SIZE`` blocks are made per
    size (a caller holds the previous run's outputs while the next run downloads its own; the compilation keeps its
    three verified runs' outputs) and ``LIMIT`` bytes in all.  When none is free (a caller that keeps its
    results), ``take`` says so and the download stages as before.
    """

    PER_SIZE = 8
    LIMIT = 256 << 20

    def __init__(self, allocate: Callable[[int], np.ndarray | None]) -> None:
        self._allocate = allocate
        """Makes a page-locked block of so many bytes (a flat uint8 array), or None where the runtime refuses."""
        self._free: dict[int, list[np.ndarray]] = {}
        self._made: dict[int, int] = {}
        self._bytes = 0
        self._lock = threading.Lock()  # blocks come back from whichever thread drops the last view

    def take(self, nbytes: int) -> Lease | None:
        """A block of at least ``nbytes`` (whole MiB), free or newly made; None when none may be made."""
        size = -(-nbytes // (1 << 20)) * (1 << 20)
        with self._lock:
            free = self._free.get(size)
            if free:
                return Lease(self, free.pop(), nbytes)
            if self._made.get(size, 0) >= self.PER_SIZE or self._bytes + size > self.LIMIT:
                return None
            self._made[size] = self._made.get(size, 0) + 1
            self._bytes += size
        block = self._allocate(size)
        if block is None:
            with self._lock:
                self._made[size] -= 1
                self._bytes -= size
            return None
        return Lease(self, block, nbytes)

    def _give_back(self, block: np.ndarray) -> None:
        with self._lock:
            self._free.setdefault(block.size, []).append(block)


class Lease:
    """One block taken from ``Blocks``: ``bytes`` to download into, then ``array`` to hand out.  numpy keeps the
    lease as the base of that array (through ``__array_interface__``), so the block goes back when the array and
    every view of it are gone, or when the lease is dropped unlent."""

    def __init__(self, blocks: Blocks, block: np.ndarray, nbytes: int) -> None:
        self._blocks, self._block = blocks, block
        self.bytes = block[:nbytes]

    def array(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """The block's first bytes as an array of ``shape`` and ``dtype`` (writeable, the caller's to keep)."""
        self.__array_interface__ = {"version": 3, "shape": tuple(shape), "typestr": np.dtype(dtype).str,
                                    "data": (self._block.ctypes.data, False)}
        return np.asarray(self)

    def __del__(self) -> None:
        self._blocks._give_back(self._block)


def _equal(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether flat uint8 arrays of one size hold the same bytes, compared 8 at a time where the size allows
    (numpy's comparison goes element by element, with a bool per element: wide elements halve its time)."""
    if a.size % 8 == 0:
        return np.array_equal(a.view(np.uint64), b.view(np.uint64))
    return np.array_equal(a, b)


def same_bytes(a: np.ndarray, b: np.ndarray, chunk: int | None = None) -> bool:
    """Whether flat uint8 arrays ``a`` and ``b`` hold the same bytes, compared chunk by chunk on the copying
    threads (stopping at the first chunk that differs)."""
    if a.size != b.size:
        return False
    parts = spans(a.size, chunk)
    if len(parts) <= 1 or THREADS == 1:
        return all(_equal(a[s:e], b[s:e]) for s, e in parts)
    futures = [_threads().submit(_equal, a[s:e], b[s:e]) for s, e in parts]
    try:
        return all(f.result() for f in futures)
    finally:
        for f in futures:
            f.cancel()
        _wait(futures)

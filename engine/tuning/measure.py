"""Running one variant of a kernel on a device: verification against the numpy evaluator, then timing.

Verification inputs are chosen so that float sums are exact in any order
(multiples of 1/4 in [-4, 4]): a variant that reorders a reduce (unroll keeps
the order, a group reduce does not) still matches the reference bit for bit,
so the dtype's tolerance stays tight.  Output buffers start as a value that
differs from the reference everywhere, so a variant that skips stores fails.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.devices.base import Compiled, Device
from engine.devices.evaluate import evaluate
from engine.kernel.ir import HOST, Kernel, schedule
from engine.program.dtypes import DType


def sample_inputs(kernel: Kernel, seed: int = 0) -> list[np.ndarray]:
    """Random inputs for ``kernel``: floats are multiples of 1/4 in [-4, 4], ints in [-100, 100), bools."""
    rng = np.random.default_rng(seed)
    out = []
    for b in kernel.inputs:
        if b.dtype == DType.BOOL:
            out.append(rng.random(b.shape) < 0.5)
        elif b.dtype.is_int:
            out.append(rng.integers(-100, 100, b.shape).astype(b.dtype.numpy))
        else:  # drawn as int8 and scaled in place: much faster than through float64 (RESULTS.md)
            a = rng.integers(-16, 17, b.shape, dtype=np.int8).astype(b.dtype.numpy)
            a *= 0.25
            out.append(a)
    return out


def tolerance(kernel: Kernel) -> tuple[float, float]:
    """(rtol, atol) of the loosest dtype ``kernel`` reads or computes in."""
    dtypes = {b.dtype for b in kernel.inputs} | {e.dtype for e in schedule(kernel.exprs())}
    return max(d.tolerance for d in dtypes)


def poison(reference: np.ndarray) -> np.ndarray:
    """An array differing from ``reference`` at every element (what outputs start as)."""
    if reference.dtype == np.bool_:
        return ~reference
    if np.issubdtype(reference.dtype, np.integer):
        return reference ^ 1
    with np.errstate(all="ignore"):
        finite = np.nan_to_num(reference.astype(np.float64), nan=0.0, posinf=0.0, neginf=0.0)
        return (finite + 1 + 2 * np.abs(finite)).astype(reference.dtype)


def mismatch(got: Sequence[np.ndarray], want: Sequence[np.ndarray], rtol: float, atol: float) -> str | None:
    """Why ``got`` differs from ``want`` (NaNs must match), or None when every output agrees."""
    for i, (g, w) in enumerate(zip(got, want)):
        a, b = np.asarray(g, np.float64), np.asarray(w, np.float64)
        if a.shape != b.shape:
            return f"out{i}: shape {a.shape}, expected {b.shape}"
        same = np.isclose(a, b, rtol=rtol, atol=atol, equal_nan=True)
        if not same.all():
            bad = int(np.size(same) - np.count_nonzero(same))
            at = np.unravel_index(int(np.argmin(same)), same.shape) if same.ndim else ()
            return f"out{i}: {bad} of {same.size} elements differ, e.g. at {tuple(map(int, at))}: {a[at]} != {b[at]}"
    return None


ALWAYS_FRESH = 32 << 20
"""Bytes from which a host output is always new pages (glibc maps every request of its largest mmap threshold or
more afresh): smaller ones may reuse freed heap memory, whose first touch is already paid, so only these tell what
a first touch costs."""


def always_fresh(kernel: Kernel, device: Device) -> bool:
    """Whether a plan's launch of ``kernel`` on ``device`` writes host outputs of always new pages, whose first
    touches (page faults) trials, reusing their outputs, never pay."""
    return device.pool == HOST and kernel.output_bytes >= ALWAYS_FRESH


@dataclass(frozen=True)
class Timing:
    """Seconds of each timed launch (after a warm-up) and their median."""

    times: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.times)


class Bench:
    """One kernel's inputs on one device, its reference outputs, and how to verify and time a compiled variant."""

    def __init__(self, device: Device, kernel: Kernel, seed: int = 0, arrays: list[np.ndarray] | None = None) -> None:
        """``arrays``: the inputs to use instead of ``sample_inputs`` (a benchmark that never verifies)."""
        self.device = device
        self.kernel = kernel
        self.arrays = sample_inputs(kernel, seed) if arrays is None else arrays
        self.inputs = [device.upload(a) for a in self.arrays]
        self._reference: list[np.ndarray] | None = None
        self.rtol, self.atol = tolerance(kernel)

    @property
    def reference(self) -> list[np.ndarray]:
        if self._reference is None:
            self._reference = evaluate(self.kernel, self.arrays)
        return self._reference

    def verify(self, compiled: Compiled) -> tuple[str | None, list[Any], float]:
        """Launch once on poisoned outputs; returns (why it is wrong or None, the output handles, its seconds)."""
        outs = [self.device.upload(poison(r)) for r in self.reference]
        seconds = self.device.launch(compiled, self.inputs, outs)
        got = [self.device.download(h, b) for h, b in zip(outs, self.kernel.output_types)]
        return mismatch(got, self.reference, self.rtol, self.atol), outs, seconds

    def time(self, compiled: Compiled, outputs: list[Any], first: float, left: Callable[[], float] = lambda: math.inf,
             stop: Callable[[], bool] = lambda: False, target: float = 0.05,
             repeats: tuple[int, int] = (3, 20)) -> Timing:
        """Time ``max(lo, min(hi, target / first))`` launches after one that took ``first`` seconds (the
        verification run; a warm-up precedes them when launches are short).

        The budget holds: no launch starts when the last one would not fit in what is ``left()``, so a variant
        whose first run already exceeds it keeps that run as its one time; none starts once ``stop()``.
        """
        if first < min(target, left()) and not stop():
            first = self.device.launch(compiled, self.inputs, outputs)  # warm-up
        lo, hi = repeats
        n = max(lo, min(hi, math.ceil(target / max(first, 1e-7))))
        times: list[float] = []
        last = first
        while len(times) < n and last < left() and not stop():
            last = self.device.launch(compiled, self.inputs, outputs)
            times.append(last)
        return Timing(tuple(times) or (first,))

    def first_touch(self, compiled: Compiled, reused: list[Any], seconds: float, pairs: int,
                    left: Callable[[], float] = lambda: math.inf,
                    stop: Callable[[], bool] = lambda: False) -> float | None:
        """Seconds a launch spends more on fresh outputs (a plan's) than on the ``reused`` ones (written before, as
        a trial's; a launch on them took ``seconds``): the median difference of up to ``pairs`` launches of each,
        interleaved so that load drifts cancel.  A pair starts only while the last one (at first, twice
        ``seconds``) fits in what is ``left()``, and none once ``stop()``; None when none ran.  Each fresh output
        is freed after its launch, as a plan's rerun gets the pages its previous run freed (on a VM, pages the
        process never had cost many times more)."""
        extra: list[float] = []
        pair = 2 * seconds
        while len(extra) < pairs and pair < left() and not stop():
            hot = self.device.launch(compiled, self.inputs, reused)
            outs = [self.device.alloc(b) for b in self.kernel.output_types]
            try:
                fresh = self.device.launch(compiled, self.inputs, outs)
            finally:
                self.free(outs)
            extra.append(fresh - hot)
            pair = hot + fresh
        return max(statistics.median(extra), 0.0) if extra else None

    def free(self, handles: list[Any]) -> None:
        for h in handles:
            self.device.free(h)

    def close(self) -> None:
        self.free(self.inputs)
        self.inputs = []

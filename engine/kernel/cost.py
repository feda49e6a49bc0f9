"""Work counts of a kernel, for roofline estimates before (or instead of) timing it."""

from __future__ import annotations

from dataclasses import dataclass

from engine.kernel.ir import Kernel, Load, Op, reduce_dependent, schedule


@dataclass(frozen=True)
class Work:
    """What one launch of a kernel moves and computes."""

    bytes: int
    """Input buffers read once plus outputs written."""
    ops: int
    """Scalar operations, the reduce loop's counted once per iteration."""
    loads: int
    """Element loads issued (reads through caches included)."""

    def roofline(self, bandwidth: float, throughput: float, overhead: float) -> float:
        """Seconds at ``bandwidth`` bytes/s and ``throughput`` ops/s, plus a fixed ``overhead``."""
        return overhead + max(self.bytes / bandwidth, self.ops / throughput)


def work(kernel: Kernel) -> Work:
    nbytes = sum(b.nbytes for b in kernel.inputs) + sum(b.nbytes for b in kernel.output_types)
    inner = reduce_dependent(kernel)
    per_point = 0
    loads = 0
    for e in schedule(kernel.exprs()):
        times = kernel.reduce.size if e in inner and kernel.reduce else 1
        if isinstance(e, Op):
            per_point += times
        elif isinstance(e, Load):
            loads += times
    if kernel.reduce is not None:
        per_point += kernel.reduce.size  # the accumulation itself
    return Work(nbytes, per_point * kernel.numel, loads * kernel.numel)

"""Work counts of a kernel, for roofline estimates before (or instead of) timing it."""

from __future__ import annotations

from dataclasses import dataclass

from engine.kernel.ir import Expr, Kernel, Load, Op, dependent, reduce_dependent, schedule


@dataclass(frozen=True)
class Work:
    """What one launch of a kernel moves and computes."""

    bytes: int
    """Input buffers read once plus outputs written (a row kernel's rows are re-read from cache, not memory)."""
    ops: int
    """Scalar operations, the reduce loop's counted once per iteration."""
    loads: int
    """Element loads issued (reads through caches included)."""

    def roofline(self, bandwidth: float, throughput: float, overhead: float) -> float:
        """Seconds at ``bandwidth`` bytes/s and ``throughput`` ops/s, plus a fixed ``overhead``."""
        return overhead + max(self.bytes / bandwidth, self.ops / throughput)


def work(kernel: Kernel) -> Work:
    nbytes = sum(b.nbytes for b in kernel.inputs) + sum(b.nbytes for b in kernel.output_types)
    if kernel.stages:
        return _row_work(kernel, nbytes)
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


def _row_work(kernel: Kernel, nbytes: int) -> Work:
    """A row kernel's work: per row, each stage's loop (and accumulation), then the outputs over the row."""
    ops = loads = 0
    seen: set[Expr] = set()
    for roots, variables, size in kernel.row_loops():
        inner = dependent(roots, variables)
        for e in schedule(roots):
            if e in seen and e not in inner:
                continue  # hoisted: computed once per row
            seen.add(e)
            times = size if e in inner else 1
            ops += times * isinstance(e, Op)
            loads += times * isinstance(e, Load)
    ops += sum(s.size for s in kernel.stages)
    return Work(nbytes, ops * kernel.numel, loads * kernel.numel)

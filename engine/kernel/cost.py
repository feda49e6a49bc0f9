"""Work counts of a kernel, for roofline estimates before (or instead of) timing it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
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
    nbytes = kernel.moved_bytes
    ops = loads = 0
    for e, times, _ in _evaluations(kernel):
        ops += times * isinstance(e, Op)
        loads += times * isinstance(e, Load)
    # the accumulation itself: a reduce's per point, a row kernel's stages' per row
    ops += sum(s.size for s in kernel.stages) if kernel.stages else kernel.reduce.size if kernel.reduce else 0
    return Work(nbytes, ops * kernel.numel, loads * kernel.numel)


def op_counts(kernel: Kernel) -> Counter[str]:
    """Evaluations of each op per launch (a reduce's body per step, a row kernel's loops per row element)."""
    counts: Counter[str] = Counter()
    for e, times, _ in _evaluations(kernel):
        if isinstance(e, Op):
            counts[e.op] += times * kernel.numel
    return counts


def row_loop_ops(kernel: Kernel) -> list[int]:
    """A row kernel's scalar ops per row in each of its loops (``Kernel.row_loops``), a stage's accumulation
    included; an expression hoisted out of the loops counts once, in the first loop that uses it."""
    ops = [s.size for s in kernel.stages] + [0]
    for e, times, loop in _evaluations(kernel):
        ops[loop] += times * isinstance(e, Op)
    return ops


def _evaluations(kernel: Kernel) -> Iterator[tuple[Expr, int, int]]:
    """Each expression evaluated per output point (per row for a row kernel), with how many times and in which
    of a row kernel's loops (0 for other kernels): a reduce's body once per step, a row kernel's loop bodies
    once per row element (hoisted ones once per row)."""
    if not kernel.stages:
        inner = reduce_dependent(kernel)
        for e in schedule(kernel.exprs()):
            yield e, kernel.reduce.size if e in inner and kernel.reduce else 1, 0
        return
    seen: set[Expr] = set()
    for loop, (roots, variables, size) in enumerate(kernel.row_loops()):
        inner = dependent(roots, variables)
        for e in schedule(roots):
            if e in seen and e not in inner:
                continue  # hoisted: computed once per row
            seen.add(e)
            yield e, size if e in inner else 1, loop

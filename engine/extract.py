"""Extraction: choose, for every class the outputs need, the kernel or transfer that puts it in memory.

A *value* is a class held in a memory pool.  Program inputs are values in the
host pool at no cost; a ``kernel`` node makes its class a value in its device's
pool from its children's values in that pool; a ``to_device`` node copies a
value from another pool.  ``greedy`` is zyx's extractor: the cheapest producer
of each value by summed time, a shared value counted once per use (tree cost).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from engine.devices.base import HOST
from engine.egraph.egraph import ClassId, EGraph, NodeId
from engine.kernel.attach import KernelNode

Value = tuple[ClassId, str]
"""A class held in a memory pool."""


@dataclass(frozen=True)
class Choice:
    """How a value is produced: node ``node`` (leaf, kernel or to_device) and, for a copy, its source value."""

    node: NodeId
    cost: float
    """Tree cost of the value: this node's time plus its inputs' costs."""
    source: Value | None = None


@dataclass(frozen=True)
class Extraction:
    """The chosen producer of each needed value, and the total (tree) cost of the outputs."""

    choices: Mapping[Value, Choice]
    outputs: Mapping[str, Value]

    @property
    def cost(self) -> float:
        return sum(self.choices[v].cost for v in set(self.outputs.values()))


class ExtractionError(RuntimeError):
    """No combination of kernels and transfers computes every output (e.g. no device supports a kernel)."""


def greedy(
    egraph: EGraph,
    device_pools: Mapping[str, str],
    kernel_time: Callable[[KernelNode], float],
    transfer_time: Callable[[int, str, str], float],
) -> Extraction:
    """The cheapest producer of every value, relaxed to a fixed point (Bellman-Ford over values).

    ``device_pools`` maps device names to their pools; ``kernel_time(param)`` gives a kernel
    node's seconds, ``transfer_time(nbytes, src, dst)`` those of a copy between pools.
    """
    best: dict[Value, Choice] = {}
    kernels: list[tuple[ClassId, NodeId, float, str, tuple[ClassId, ...]]] = []
    transfers: list[tuple[ClassId, NodeId, str, int]] = []
    for cls in egraph.classes():
        for n in cls.nodes:
            op, param, children = egraph.node(n)
            if op == "leaf":
                best[(cls.id, HOST)] = Choice(n, 0.0)
            elif op == "kernel":
                pool = device_pools[param.device]  # type: ignore[attr-defined]
                kernels.append((cls.id, n, kernel_time(param), pool, children))  # type: ignore[arg-type]
            elif op == "to_device":
                transfers.append((cls.id, n, param.pool, cls.numel * cls.dtype.itemsize))  # type: ignore[attr-defined]
    pools = sorted({HOST, *device_pools.values()})

    def relax(value: Value, choice: Choice) -> bool:
        if value in best and best[value].cost <= choice.cost:
            return False
        best[value] = choice
        return True

    changed = True
    while changed:
        changed = False
        for c, n, seconds, pool, children in kernels:
            inputs = [best.get((ch, pool)) for ch in children]
            if all(i is not None for i in inputs):
                changed |= relax((c, pool), Choice(n, seconds + sum(i.cost for i in inputs)))  # type: ignore[union-attr]
        for c, n, dst, nbytes in transfers:
            for src in pools:
                if src != dst and (c, src) in best:
                    cost = best[(c, src)].cost + transfer_time(nbytes, src, dst)
                    changed |= relax((c, dst), Choice(n, cost, (c, src)))
    outputs = {name: (c, HOST) for name, c in egraph.output_classes().items()}
    missing = [name for name, v in outputs.items() if v not in best]
    if missing:
        raise ExtractionError(f"no device can compute output(s) {', '.join(missing)}")
    return Extraction(_reachable(egraph, best, outputs.values()), outputs)


def _reachable(egraph: EGraph, best: Mapping[Value, Choice], roots: Iterable[Value]) -> dict[Value, Choice]:
    """The choices the roots depend on."""
    chosen: dict[Value, Choice] = {}
    stack = list(roots)
    while stack:
        value = stack.pop()
        if value in chosen:
            continue
        choice = chosen[value] = best[value]
        if choice.source is not None:
            stack.append(choice.source)
            continue
        op, _, children = egraph.node(choice.node)
        if op == "kernel":
            stack.extend((ch, value[1]) for ch in children)
    return chosen

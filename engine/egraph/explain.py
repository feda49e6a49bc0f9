"""Explanations: the chain of rewrites that made two e-nodes equal.

Every union joined two specific e-nodes and said why; those edges form a forest
over the e-nodes (one tree per class).  The explanation of ``a = b`` is the path
between them: each step a rule application, or a congruence (same op on
children that were themselves proved equal, explained by ``congruence_reasons``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from engine.egraph.egraph import CONGRUENCE, EGraph, NodeId


@dataclass(frozen=True)
class Step:
    """``left`` = ``right`` by ``reason``; ``union`` is the index of that union in ``EGraph.unions``."""

    left: NodeId
    right: NodeId
    reason: str
    union: int

    @property
    def is_congruence(self) -> bool:
        return self.reason == CONGRUENCE


def explain(egraph: EGraph, a: NodeId, b: NodeId) -> list[Step]:
    """The steps proving node ``a`` equal to node ``b`` (empty when a == b); ValueError if they differ."""
    if egraph.find(a) != egraph.find(b):
        raise ValueError(f"n{a} and n{b} are in different classes (c{egraph.find(a)}, c{egraph.find(b)})")
    came_from: dict[NodeId, tuple[NodeId, int]] = {a: (a, -1)}
    queue = deque([a])
    while b not in came_from:
        n = queue.popleft()
        for other, union in egraph.proof_edges(n):
            if other not in came_from:
                came_from[other] = (n, union)
                queue.append(other)
    steps = []
    n = b
    while n != a:
        previous, union = came_from[n]
        steps.append(Step(previous, n, egraph.unions[union].reason, union))
        n = previous
    return steps[::-1]


def congruence_reasons(egraph: EGraph, step: Step) -> list[tuple[NodeId, NodeId, list[Step]]]:
    """For a congruence step: each pair of children that differ, with the steps proving them equal."""
    left, right = egraph.raw_node(step.left), egraph.raw_node(step.right)
    return [(x, y, explain(egraph, x, y)) for x, y in zip(left.children, right.children) if x != y]


def format_explanation(egraph: EGraph, steps: list[Step], depth: int = 2, indent: str = "") -> list[str]:
    """The steps as text, one per line; congruences are expanded ``depth`` levels deep."""
    lines = []
    for step in steps:
        left, right = (egraph.describe(n, raw=step.is_congruence) for n in (step.left, step.right))
        lines.append(f"{indent}n{step.left} {left}  =  n{step.right} {right}   [{step.reason}]")
        if step.is_congruence and depth > 0:
            for x, y, sub in congruence_reasons(egraph, step):
                lines.append(f"{indent}  because n{x} = n{y}:")
                lines.extend(format_explanation(egraph, sub, depth - 1, indent + "    "))
    return lines

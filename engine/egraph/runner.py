"""Equality saturation: apply rules until nothing changes or a limit is hit, logging every step.

Each iteration searches every rule on the rebuilt e-graph first, then applies
all matches and rebuilds (egg's order, so a rule never sees half an iteration).
After the first iteration a rule is only re-tried on e-nodes with a changed
class within its ``depth`` below them: elsewhere it would find the matches it
already applied.
The ``Saturation`` it returns is the rewrite log: per iteration the matches per
rule, every application that changed the e-graph and the classes it merged,
node and class counts, and the position in the e-graph's event log, from which
``snapshot(i)`` rebuilds the e-graph as it was after iteration ``i``.
"""

from __future__ import annotations

import bisect
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from engine.egraph.egraph import CONGRUENCE, ClassId, EGraph, NodeId
from engine.egraph.pattern import Rule, TermLike, build
from engine.egraph.rules import default_rules


class StopReason(StrEnum):
    SATURATED = "saturated"
    ITERATION_LIMIT = "iteration limit"
    NODE_LIMIT = "node limit"
    TIME_LIMIT = "time limit"
    CANCELLED = "cancelled"


@dataclass(frozen=True)
class Limits:
    iterations: int = 30
    nodes: int = 100_000
    seconds: float = 10.0


@dataclass(frozen=True)
class Application:
    """A rule firing that changed the e-graph: ``node`` was proved equal to the new term rooted at ``result``."""

    rule: str
    node: NodeId
    result: NodeId
    merged: tuple[ClassId, ClassId] | None
    """The two classes it merged (ids before the merge), or None when it only added nodes."""


@dataclass(frozen=True)
class Iteration:
    index: int
    matches: dict[str, int]
    applications: tuple[Application, ...]
    congruences: int
    nodes: int
    classes: int
    seconds: float
    log_position: tuple[int, int]
    """(nodes added, unions) in the e-graph's event log when the iteration ended."""

    @property
    def merges(self) -> tuple[Application, ...]:
        return tuple(a for a in self.applications if a.merged is not None)


@dataclass
class Saturation:
    """The outcome of a run: the saturated e-graph and its rewrite log."""

    egraph: EGraph
    rules: tuple[str, ...]
    limits: Limits
    start: tuple[int, int]
    start_counts: tuple[int, int]
    """(nodes, classes) before the first iteration."""
    iterations: list[Iteration] = field(default_factory=list)
    stop: StopReason = StopReason.SATURATED
    seconds: float = 0.0

    def snapshot(self, iteration: int) -> EGraph:
        """The e-graph after ``iteration`` iterations (0: as it was before saturation)."""
        if not 0 <= iteration <= len(self.iterations):
            raise IndexError(f"iteration {iteration} is not in 0..{len(self.iterations)}")
        position = self.start if iteration == 0 else self.iterations[iteration - 1].log_position
        return self.egraph.prefix(*position)

    def iteration_of_union(self, index: int) -> int:
        """The iteration (1-based) in which the e-graph's ``index``-th union happened; 0 if before saturation."""
        ends = [it.log_position[1] for it in self.iterations]
        return 0 if index < self.start[1] else bisect.bisect_right(ends, index) + 1

    def merges_by_rule(self) -> Counter[str]:
        return Counter(a.rule for it in self.iterations for a in it.merges)


class Runner:
    """Saturates an e-graph with ``rules`` under ``limits``; ``cancel()`` returning True stops it early."""

    def __init__(self, rules: Sequence[Rule], limits: Limits = Limits(),
                 cancel: Callable[[], bool] | None = None) -> None:
        self.rules = list(rules)
        self.limits = limits
        self.cancel = cancel or (lambda: False)

    def run(self, egraph: EGraph) -> Saturation:
        began = time.perf_counter()
        egraph.rebuild()
        result = Saturation(egraph, tuple(r.name for r in self.rules), self.limits,
                            (egraph.num_added, len(egraph.unions)), (egraph.num_nodes, egraph.num_classes))
        stop = None
        for index in range(1, self.limits.iterations + 1):
            t0 = time.perf_counter()
            position = (egraph.num_added, len(egraph.unions))
            found, matches, stop = self._search(egraph, began, None if index == 1 else egraph.take_changes())
            applications, stop = self._apply(egraph, found, began, stop)
            egraph.rebuild()
            congruences = sum(u.reason == CONGRUENCE for u in egraph.unions[position[1]:])
            result.iterations.append(Iteration(
                index, matches, tuple(applications), congruences, egraph.num_nodes, egraph.num_classes,
                time.perf_counter() - t0, (egraph.num_added, len(egraph.unions))))
            if stop is None and (egraph.num_added, len(egraph.unions)) == position:
                stop = StopReason.SATURATED
            if stop is not None:
                break
        result.stop = stop or StopReason.ITERATION_LIMIT
        result.seconds = time.perf_counter() - began
        return result

    def _out_of_time(self, began: float) -> StopReason | None:
        if self.cancel():
            return StopReason.CANCELLED
        return StopReason.TIME_LIMIT if time.perf_counter() - began > self.limits.seconds else None

    def _search(self, egraph: EGraph, began: float, changed: set[ClassId] | None):
        """Every match of every rule; with ``changed``, only on nodes that may match differently than before."""
        levels = _levels(egraph, changed, max((r.depth for r in self.rules), default=0))
        by_op: dict[str, list[tuple[int, NodeId]]] = {}
        for n, level in sorted(levels.items()):
            by_op.setdefault(egraph.node(n).op, []).append((level, n))
        found: list[tuple[Rule, NodeId, TermLike]] = []
        matches: dict[str, int] = {}
        for rule in self.rules:
            before = len(found)
            for op in rule.roots:
                for level, n in by_op.get(op, ()):
                    if level <= rule.depth:
                        found.extend((rule, target, term) for target, term in rule.find(egraph, n))
            matches[rule.name] = len(found) - before
            stop = self._out_of_time(began)
            if stop is not None:
                return found, matches, stop
        return found, matches, None

    def _apply(self, egraph: EGraph, found, began: float, stop: StopReason | None):
        applications = []
        for count, (rule, target, term) in enumerate(found):
            added = egraph.num_added
            result = build(egraph, term)
            before = (egraph.find(target), egraph.find(result))
            merged = egraph.union(target, result, rule.name)
            if merged or egraph.num_added > added:
                applications.append(Application(rule.name, target, result, before if merged else None))
            if egraph.num_nodes > self.limits.nodes:
                return applications, StopReason.NODE_LIMIT
            if count % 256 == 255 and stop is None:
                stop = self._out_of_time(began)
                if stop is not None:
                    return applications, stop
        return applications, stop


def _levels(egraph: EGraph, changed: set[ClassId] | None, depth: int) -> dict[NodeId, int]:
    """Each e-node with a changed class at most ``depth`` levels below it, and the least such level.

    Level 0 is the node's own class, level 1 its children's, and so on; ``changed=None`` means all nodes, level 0.
    """
    if changed is None:
        return {n: 0 for cls in egraph.classes() for n in cls.nodes}
    levels = {n: 0 for c in changed for n in egraph.eclass(c).nodes}
    frontier = changed
    for level in range(1, depth + 1):
        parents = {p for c in frontier for p in egraph.eclass(c).parents}
        for p in parents:
            levels.setdefault(p, level)
        frontier = {egraph.find(p) for p in parents}
    return levels


def saturate(egraph: EGraph, rules: Sequence[Rule] | None = None, limits: Limits = Limits()) -> Saturation:
    """Run the default (exact) rules, or ``rules``, on ``egraph`` until saturated or a limit is hit."""
    return Runner(default_rules() if rules is None else rules, limits).run(egraph)

"""Our extractors (greedy, dag, ilp) on an imported e-graph: every class a value, every node a producer."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from engine.extract import EXTRACTORS, Extraction, ExtractionError, Problem, Producer, solve
from engine.interop.serialized import ForeignEGraph

POOL = ""
"""The one memory pool of a foreign problem (its values are ``(class index, POOL)``)."""


@dataclass(frozen=True)
class ForeignProblem:
    """The extraction problem of a ForeignEGraph, and the maps between its ids and the problem's integers."""

    problem: Problem
    class_ids: tuple[str, ...]
    node_ids: tuple[str, ...]


def problem_of(fg: ForeignEGraph) -> ForeignProblem:
    """Each class a value, each node not subsumed a producer of its class costing ``cost``, reading its children."""
    class_ids = tuple(fg.classes)
    node_ids = tuple(fg.nodes)
    cix = {c: i for i, c in enumerate(class_ids)}
    producers = []
    for i, nid in enumerate(node_ids):
        node = fg.nodes[nid]
        if not node.subsumed:
            inputs = tuple((cix[c], POOL) for c in fg.child_classes(node))
            producers.append(((cix[node.eclass], POOL), Producer(i, node.cost, inputs)))
    outputs = {fg.root_name(c): (cix[c], POOL) for c in fg.roots}
    return ForeignProblem(Problem(producers, outputs), class_ids, node_ids)


@dataclass(frozen=True)
class ForeignResult:
    """One extractor's result on a foreign e-graph (``error`` set, and the rest empty, when it found none)."""

    method: str
    dag_cost: float
    tree_cost: float
    seconds: float
    """Wall time of the extraction."""
    status: str
    note: str
    chosen: Mapping[str, str]
    """Class id -> the node id chosen for it (only the classes the roots need)."""
    error: str = ""


def extract(fg: ForeignEGraph, method: str, fp: ForeignProblem | None = None,
            time_limit: float | None = None) -> ForeignResult:
    """Run extractor ``method`` on ``fg`` (``fp``: its problem, when already built) within ``time_limit`` s."""
    fp = fp or problem_of(fg)
    began = time.perf_counter()
    try:
        ex: Extraction = solve(fp.problem, method, time_limit)
    except ExtractionError as e:
        return ForeignResult(method, float("nan"), float("nan"), time.perf_counter() - began, "failed", "", {}, str(e))
    seconds = time.perf_counter() - began
    chosen = {fp.class_ids[v[0]]: fp.node_ids[c.node] for v, c in ex.choices.items()}
    return ForeignResult(method, ex.dag_cost, ex.tree_cost, seconds, ex.status, ex.note, chosen)


def extract_each(fg: ForeignEGraph, methods: Iterable[str] = EXTRACTORS,
                 time_limit: float | None = None) -> Iterator[ForeignResult]:
    """Every extractor of ``methods`` on ``fg`` (one problem shared), each within ``time_limit`` seconds
    (default: each one's own), each result as soon as it is known."""
    fp = problem_of(fg)
    for m in methods:
        yield extract(fg, m, fp, time_limit)


def extract_all(fg: ForeignEGraph, methods: Iterable[str] = EXTRACTORS,
                time_limit: float | None = None) -> list[ForeignResult]:
    """``extract_each``'s results, as a list."""
    return list(extract_each(fg, methods, time_limit))

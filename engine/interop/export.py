"""Our e-graphs as egraph-serialize JSON, for egg/egglog tools, extraction-gym and egraph-visualizer.

Before kernelization every class is exported as it is, each node costing 1 (egg's AST size).
After it (``problem_document``), the file is the extraction problem: a class per value
(``c12@host``, ``c12@opencl:0``) whose nodes are its producers (leaves, kernels, one copy
per source pool) costing their microseconds, plus the structural forms, ``subsumed`` (shown,
never extracted).  Our own extractors on such a file find the pipeline's DAG cost.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from typing import Any

from engine.egraph.egraph import ATTACHED_OPS, ClassId, EGraph
from engine.extract import KernelTime, Problem, Producer, TransferTime, Value, _problem
from engine.kernel.ir import HOST

COST_UNIT = "us"
"""Kernel and copy costs are exported in microseconds (the ``cost_unit`` top-level key says so)."""


def _type(egraph: EGraph, c: int) -> str:
    cls = egraph.eclass(c)
    return f"{cls.dtype}[{', '.join(map(str, cls.shape))}]"


def _op(egraph: EGraph, n: int) -> str:
    """A node's head as text: ``describe`` without its children."""
    text = egraph.describe(n)
    children = egraph.node(n).children
    return text[: text.rindex("(")] if children else text


def egraph_document(egraph: EGraph) -> dict[str, Any]:
    """Every class and structural node (kernel and copy nodes too, if any), each costing 1; roots: the outputs."""
    egraph.rebuild()
    rep = {cls.id: f"n{cls.nodes[0]}" for cls in egraph.classes()}
    nodes = {}
    for cls in egraph.classes():
        for n in cls.nodes:
            op, _param, children = egraph.node(n)
            nodes[f"n{n}"] = {"op": _op(egraph, n), "children": [rep[c] for c in children],
                              "eclass": f"c{cls.id}", "cost": 1.0, "subsumed": op in ATTACHED_OPS}
    return {"nodes": nodes, "root_eclasses": [f"c{c}" for c in dict.fromkeys(egraph.output_classes().values())],
            "class_data": {f"c{cls.id}": {"type": _type(egraph, cls.id)} for cls in egraph.classes()}}


def problem_document(egraph: EGraph, device_pools: Mapping[str, str], kernel_time: KernelTime,
                     transfer_time: TransferTime, resident: Collection[ClassId] = ()) -> dict[str, Any]:
    """A kernelized e-graph's extraction problem (see the module docstring; ``resident``: input classes whose
    uploads cost nothing, as the compilation priced them); infinite costs are left out."""
    problem: Problem = _problem(egraph, device_pools, kernel_time, transfer_time, None, resident)
    producers = [(v, p) for v, p in problem.order if math.isfinite(p.time)]
    made: dict[Value, str] = {}  # value -> one producer's node id (what children name)
    kept: dict[str, tuple[Value, Producer]] = {}
    changed = True
    while changed:  # keep the producers whose inputs are produced (their children need a node id)
        changed = False
        for v, p in producers:
            nid = f"n{p.node}" + (f"@{p.source[1]}" if p.source else "")
            if nid not in kept and all(u in made for u in p.inputs):
                made.setdefault(v, nid)
                kept[nid] = (v, p)
                changed = True

    def cid(v: Value) -> str:
        return f"c{v[0]}@{v[1]}"

    nodes: dict[str, dict[str, Any]] = {}
    values: set[Value] = set()
    for nid, (v, p) in kept.items():
        values.add(v)
        op = _op(egraph, p.node) + (f" from {p.source[1]}" if p.source else "")
        nodes[nid] = {"op": op, "children": [made[u] for u in p.inputs], "eclass": cid(v),
                      "cost": p.time * 1e6, "subsumed": False}
    for cls in egraph.classes():  # structural forms over host values, for viewers
        for n in cls.nodes:
            op, _param, children = egraph.node(n)
            if op in ATTACHED_OPS or op == "leaf" or not all((c, HOST) in made for c in children):
                continue
            values.add((cls.id, HOST))
            nodes[f"n{n}"] = {"op": _op(egraph, n), "children": [made[(c, HOST)] for c in children],
                              "eclass": cid((cls.id, HOST)), "cost": 1.0, "subsumed": True}
    data = {cid(v): {"type": _type(egraph, v[0]), "pool": v[1]} for v in sorted(values)}
    roots = [cid(v) for v in dict.fromkeys(problem.outputs.values()) if v in made]
    return {"nodes": nodes, "root_eclasses": roots, "class_data": data, "cost_unit": COST_UNIT}

"""Interop with the e-graph ecosystem: egraph-serialize JSON in (validated, extracted by our extractors) and out.

>>> text = '''{"nodes": {"x": {"op": "x", "eclass": "X", "children": [], "cost": 2},
...                     "f": {"op": "f", "eclass": "R", "children": ["x"], "cost": 1}},
...           "root_eclasses": ["R"]}'''
>>> fg = loads_serialized(text)  # load_serialized(path) reads a file; GraphError at the JSON path of any mistake
>>> [(r.method, r.dag_cost) for r in extract_all(fg)]
[('greedy', 3.0), ('dag', 3.0), ('ilp', 3.0)]

``egraph_document(egraph)`` writes our e-graph (any stage) as egraph-serialize, and
``problem_document(egraph, pools, kernel_time, transfer_time)`` a kernelized e-graph's extraction problem.
"""

from engine.interop.export import COST_UNIT, egraph_document, problem_document
from engine.interop.extract import ForeignProblem, ForeignResult, extract, extract_all, extract_each, problem_of
from engine.interop.serialized import (
    MAX_NODES,
    ForeignEGraph,
    ForeignNode,
    detect,
    is_serialized,
    load_serialized,
    loads_serialized,
    parse_serialized,
)

__all__ = [
    "COST_UNIT", "MAX_NODES", "ForeignEGraph", "ForeignNode", "ForeignProblem", "ForeignResult", "detect", "egraph_document",
    "extract", "extract_all", "extract_each", "is_serialized", "load_serialized", "loads_serialized", "parse_serialized",
    "problem_document", "problem_of",
]

"""Interop with the e-graph ecosystem: egraph-serialize JSON in (validated, extracted by our extractors) and out.

    fg = load_serialized("egraph.json")        # GraphError at the JSON path of any mistake
    for r in extract_all(fg):                  # greedy, dag, ilp
        print(r.method, r.dag_cost, r.seconds)
    egraph_document(egraph)                    # our e-graph, any stage, as egraph-serialize
    problem_document(egraph, pools, kt, tt)    # a kernelized e-graph's extraction problem
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

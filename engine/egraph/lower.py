"""Lowering a primitive graph into a fresh e-graph; hashconsing makes common subexpressions one class."""

from __future__ import annotations

from engine.egraph.egraph import EGraph, NodeId, Scalar
from engine.program.primitives import PrimGraph
from engine.program.program import Program


def from_prim_graph(graph: PrimGraph) -> EGraph:
    """An e-graph holding every node of ``graph``; its outputs and origins carried over."""
    egraph = EGraph()
    ids: list[NodeId] = []
    for i, node in enumerate(graph.nodes):
        if node.op == "leaf":
            n = egraph.leaf(node.param, node.shape, node.dtype)
        else:
            param = Scalar(node.param, node.dtype) if node.op == "const" else node.param
            n = egraph.add(node.op, [ids[a] for a in node.args], param)
        ids.append(n)
        if graph.origins:
            egraph.origins.setdefault(n, graph.origins[i])
    egraph.outputs = {name: ids[i] for name, i in graph.outputs.items()}
    egraph.tensors = {name: (ids[i], op) for name, (i, op) in graph.tensors.items()}
    return egraph


def from_program(program: Program) -> EGraph:
    return from_prim_graph(program.lower())

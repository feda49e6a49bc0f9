"""The e-graph: classes of equivalent primitive terms, rewrite rules, saturation, explanations.

>>> from engine import Init, Tensor, from_tensors
>>> x = Tensor.input("x", (2, 3), "f32", init=Init.uniform(seed=0))
>>> egraph = from_program(from_tensors({"y": (x * 2.0) * 3.0}))  # hashconsed: common subexpressions share a class
>>> result = saturate(egraph)                                    # Saturation: stop reason + rewrite log
>>> result.stop.value
'saturated'
>>> merge = next(a for it in result.iterations for a in it.applications if a.merged)
>>> [step.reason for step in explain(egraph, merge.node, merge.result)] == [merge.rule]  # why two nodes are equal
True
>>> check_semantics(egraph).ok                                   # every form of every class agrees numerically
True
"""

from engine.egraph.egraph import CONGRUENCE, ClassId, EClass, EGraph, EGraphError, ENode, NodeId, Scalar
from engine.egraph.explain import Step, congruence_reasons, explain, format_explanation
from engine.egraph.lower import from_prim_graph, from_program
from engine.egraph.pattern import ANY, P, Param, Pat, Rule, T, Term, Var, build, match, procedural, rewrite
from engine.egraph.rules import ALL_RULES, default_rules, rules_named
from engine.egraph.runner import Application, Iteration, Limits, Runner, Saturation, StopReason, saturate
from engine.egraph.semantic import Disagreement, SemanticReport, check_semantics, random_inputs, special_inputs

__all__ = [
    "ALL_RULES", "ANY", "CONGRUENCE", "Application", "ClassId", "Disagreement", "EClass", "EGraph", "EGraphError",
    "ENode", "Iteration", "Limits", "NodeId", "P", "Param", "Pat", "Rule", "Runner", "Saturation", "Scalar",
    "SemanticReport", "Step", "StopReason", "T", "Term", "Var", "build", "check_semantics", "congruence_reasons",
    "default_rules", "explain", "format_explanation", "from_prim_graph", "from_program", "match", "procedural",
    "random_inputs", "rewrite", "rules_named", "saturate", "special_inputs",
]

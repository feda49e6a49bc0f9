"""The e-graph: classes of equivalent primitive terms, rewrite rules, saturation, explanations.

    egraph = from_program(program)          # hashconsed: common subexpressions share a class
    result = saturate(egraph)               # Saturation: stop reason + rewrite log
    explain(egraph, a, b)                   # why nodes a and b are equal
    check_semantics(egraph).ok              # every form of every class agrees numerically
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

"""Algebraic rules: commutativity, identities, and constant folding.

``x + 0 = x`` is exact only for ``x + (-0.0)`` on floats (``-0.0 + 0.0`` is
+0.0, and ``1 / x`` tells them apart), ``x - 0 = x`` only for ``x - (+0.0)``;
the other signs are fast-math rules.

``x - x = 0`` and ``x * 0 = 0`` are exact for integers and booleans only
(``inf - inf`` and ``nan * 0`` are NaN), so for floats they are fast-math
rules, as are the ``exp2``/``log2`` inverses (which fail on overflow and on
negative numbers).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from engine.egraph.egraph import EGraph, NodeId, Scalar
from engine.egraph.pattern import Condition, Match, P, Pat, Rule, T, Term, TermLike, Var, procedural, rewrite
from engine.program.primitives import PRIMITIVE_OPS, Shape

x, y = Var("x"), Var("y")
COMMUTATIVE_OPS = ("add", "mul", "max", "eq", "noteq", "and", "or")


def _swapped(egraph: EGraph, node: NodeId, floats: bool) -> Iterator[tuple[NodeId, TermLike]]:
    op, _, (a, b) = egraph.node(node)
    if egraph.find(a) != egraph.find(b) and (op != "max" or egraph.eclass(node).dtype.is_float == floats):
        yield node, T(op, b, a)


@procedural("commute", COMMUTATIVE_OPS, depth=0)
def commute(egraph: EGraph, node: NodeId) -> Iterator[tuple[NodeId, TermLike]]:
    """a op b = b op a for add, mul, eq, noteq, and, or, and max of integers."""
    yield from _swapped(egraph, node, floats=False)


@procedural("commute-max-float", ("max",), depth=0, exact=False)
def commute_max_float(egraph: EGraph, node: NodeId) -> Iterator[tuple[NodeId, TermLike]]:
    """max(a, b) = max(b, a) for floats (fast-math: a tie of -0.0 and +0.0 gives the second, as numpy's)."""
    yield from _swapped(egraph, node, floats=True)


def splat_term(scalar: Scalar, shape: Shape) -> TermLike:
    """``scalar`` broadcast to ``shape`` in the lowering's form (const -> reshape to ones -> expand)."""
    term: Term = T("const", param=scalar)
    if shape:
        ones = (1,) * len(shape)
        term = T("reshape", term, param=ones)
        if tuple(shape) != ones:
            term = T("expand", term, param=tuple(shape))
    return term


@procedural("constant-fold", tuple(op for op in PRIMITIVE_OPS if op not in ("const", "leaf")), depth=0)
def constant_fold(egraph: EGraph, node: NodeId) -> Iterator[tuple[NodeId, TermLike]]:
    """A class known to hold one value everywhere equals that constant, broadcast."""
    cls = egraph.eclass(node)
    if cls.splat is not None and cls.nodes[0] == node:
        yield node, splat_term(cls.splat, cls.shape)


def _is(value: float, var: Var = y):
    def when(egraph: EGraph, m: Match) -> bool:
        s = egraph.eclass(m[var.name]).splat
        return s is not None and s.value == value

    return when


def _signed_zero(negative: bool) -> Condition:
    """``y`` is a zero of the sign that makes ``x + y = x`` (-0.0) or ``x - y = x`` (+0.0) exact for every
    float x, -0.0 included (``-0.0 + 0.0`` is +0.0); integers and booleans have one zero."""

    def when(egraph: EGraph, m: Match) -> bool:
        s = egraph.eclass(m[y.name]).splat
        if s is None or s.value != 0:
            return False
        return not s.dtype.is_float or (math.copysign(1.0, s.value) < 0) == negative

    return when


def _zeros(egraph: EGraph, m: Match) -> TermLike:
    cls = egraph.eclass(m["x"])
    return splat_term(Scalar(0, cls.dtype), cls.shape)


def _float(wanted: bool):
    def when(egraph: EGraph, m: Match) -> bool:
        return egraph.eclass(m["x"]).dtype.is_float == wanted

    return when


def _both(*conditions: Condition) -> Condition:
    return lambda egraph, m: all(c(egraph, m) for c in conditions)


def _always(egraph: EGraph, m: Match) -> bool:
    return True


def _folded(name: str, lhs: Pat, when: Condition, doc: str) -> list[Rule]:
    """A rule yielding zeros: exact for integers and booleans, fast-math for floats."""
    return [
        rewrite(name, lhs, _zeros, _both(when, _float(False)), doc=doc),
        rewrite(f"{name}-float", lhs, _zeros, _both(when, _float(True)), exact=False, doc=doc + " (floats: fast-math)"),
    ]


RULES: list[Rule] = [
    commute,
    commute_max_float,
    constant_fold,
    rewrite("mul-one", P("mul", x, y), x, _is(1), doc="x * 1 = x"),
    rewrite("mul-neg-one", P("mul", x, y), P("neg", x), _is(-1), doc="x * -1 = -x"),
    rewrite("add-zero", P("add", x, y), x, _signed_zero(True), doc="x + 0 = x (floats: x + -0.0)"),
    rewrite("add-zero-float", P("add", x, y), x, _is(0), exact=False, doc="x + 0.0 = x (fast-math: -0.0 + 0.0 is +0.0)"),
    rewrite("sub-zero", P("sub", x, y), x, _signed_zero(False), doc="x - 0 = x (floats: x - +0.0)"),
    rewrite("sub-zero-float", P("sub", x, y), x, _is(0), exact=False, doc="x - -0.0 = x (fast-math: -0.0 - -0.0 is +0.0)"),
    rewrite("div-one", P("div", x, y), x, _is(1), doc="x / 1 = x"),
    rewrite("double-neg", P("neg", P("neg", x)), x, doc="-(-x) = x"),
    rewrite("double-not", P("not", P("not", x)), x, doc="not not x = x"),
    rewrite("max-self", P("max", x, x), x, doc="max(x, x) = x"),
    rewrite("and-self", P("and", x, x), x, doc="x and x = x"),
    rewrite("or-self", P("or", x, x), x, doc="x or x = x"),
    rewrite("relu-relu", P("relu", P("relu", x)), P("relu", x), doc="relu(relu(x)) = relu(x)"),
    *_folded("sub-self", P("sub", x, x), _always, "x - x = 0"),
    *_folded("mul-zero", P("mul", x, y), _is(0), "x * 0 = 0"),
    rewrite("log2-exp2", P("log2", P("exp2", x)), x, exact=False, doc="log2(2 ** x) = x (fast-math: overflow)"),
    rewrite("exp2-log2", P("exp2", P("log2", x)), x, exact=False, doc="2 ** log2(x) = x (fast-math: x > 0)"),
]

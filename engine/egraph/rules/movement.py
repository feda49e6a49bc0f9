"""Movement rules: views fused, removed, and moved across elementwise ops and reduces.

A movement op (permute, reshape, expand, pad) on top of an elementwise op
*sinks* into its operands where they are views themselves, so the movements
can fuse (``m(f(a, b)) = f(m(a), m(b))``, expand excluded: it would only make
the elementwise work bigger), and the same movement on every
operand *hoists* above the op (``f(m(a), m(b)) = m(f(a, b))``), which also puts
a broadcast scalar computation under a single expand.  A growing pad sinks only
through ops that map its value to itself (``relu(0) = 0``), compared bit for bit.

A long reduce *splits* in two (``sum(x) = sum(sum(reshape(x, [G, N/G]), 1), 0)``),
so a kernel with ``G`` outputs can share the work before a short final reduce.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from math import isqrt, prod

import numpy as np

from engine.egraph.egraph import EClass, EGraph, NodeId, Scalar
from engine.egraph.pattern import Condition, Match, P, Param, Rule, T, TermLike, Var, procedural, rewrite
from engine.program.dtypes import DType
from engine.program.primitives import BINARY_OPS, MOVEMENT_OPS, REDUCE_OPS, UNARY_OPS, PrimNode
from engine.program.reference import eval_node

ELEMENTWISE_OPS = (*UNARY_OPS, *BINARY_OPS, "cast")
x = Var("x")
p, q = Param("p"), Param("q")


def _shape(egraph: EGraph, m: Match, var: str = "x") -> tuple[int, ...]:
    return egraph.eclass(m[var]).shape


def _is_identity(egraph: EGraph, m: Match) -> bool:
    return m["p"] == tuple(range(len(m["p"])))


def _keeps_shape(egraph: EGraph, m: Match) -> bool:
    return m["p"] == _shape(egraph, m)


def _moves_only_ones(egraph: EGraph, m: Match) -> bool:
    """The permute only moves size-1 axes, so it is a reshape."""
    shape = _shape(egraph, m)
    big = [a for a in m["p"] if shape[a] != 1]
    return big == sorted(big) and not _is_identity(egraph, m)


def _as_reshape(egraph: EGraph, m: Match) -> TermLike:
    shape = _shape(egraph, m)
    return T("reshape", m["x"], param=tuple(shape[a] for a in m["p"]))


def _no_pad(egraph: EGraph, m: Match) -> bool:
    return all(side == (0, 0) for side in m["p"][0])


def _pads_compose(egraph: EGraph, m: Match) -> bool:
    """pad(pad(x)) is one pad unless a side the inner pad shrank is grown again, or both grow with different values."""
    (inner, v1), (outer, v2) = m["p"], m["q"]
    sides = [(a, b) for pa, pb in zip(inner, outer) for a, b in zip(pa, pb)]
    if any(a < 0 < b for a, b in sides):
        return False
    both_grow = any(a > 0 for a, _ in sides) and any(b > 0 for _, b in sides)
    return not both_grow or v1 == v2


def _composed_pad(egraph: EGraph, m: Match) -> TermLike:
    (inner, v1), (outer, v2) = m["p"], m["q"]
    pads = tuple((a0 + b0, a1 + b1) for (a0, a1), (b0, b1) in zip(inner, outer))
    value = v2 if any(b > 0 for side in outer for b in side) else v1
    return T("pad", m["x"], param=(pads, value))


SPLIT_MIN_EXTENT = 1 << 16
"""Reduces over at least this many elements are split."""
SPLIT_MIN_FACTOR = 256
"""Both reduces of a split reduce at least this many elements."""
SPLIT_MAX_OUTPUTS = 1024
"""Reduces with more outputs are not split: one work-group per output already fills a GPU."""


@cache
def split_factor(n: int) -> int | None:
    """The largest divisor ``g`` of ``n`` with ``SPLIT_MIN_FACTOR <= g <= n // g`` (None if there is none)."""
    return next((g for g in range(isqrt(n), SPLIT_MIN_FACTOR - 1, -1) if n % g == 0), None)


def _split_shape(shape: tuple[int, ...], axes: tuple[int, ...]) -> tuple[int, ...] | None:
    """``shape`` with its reduced axes (a contiguous run) reshaped to ``(G, N / G)``, if the reduce is split."""
    first, last = min(axes), max(axes)
    if sorted(axes) != list(range(first, last + 1)):
        return None
    n = prod(shape[first:last + 1])
    g = split_factor(n) if n >= SPLIT_MIN_EXTENT and prod(shape) // n <= SPLIT_MAX_OUTPUTS else None
    return None if g is None else (*shape[:first], g, n // g, *shape[last + 1:])


def _reduce_rules(op: str) -> list[Rule]:
    a, b = Param("a"), Param("b")

    def fused(egraph: EGraph, m: Match) -> TermLike:
        kept = [i for i in range(len(_shape(egraph, m))) if i not in m["a"]]
        return T(op, m["x"], param=tuple(sorted({*m["a"], *(kept[j] for j in m["b"])})))

    def over_ones(floats: bool) -> Condition:
        def when(egraph: EGraph, m: Match) -> bool:
            shape = _shape(egraph, m)
            # a float sum starts from +0.0 (as numpy's and every kernel's): the sum of one -0.0 is +0.0
            exact = op != "reduce_sum" or not egraph.eclass(m["x"]).dtype.is_float
            return all(shape[i] == 1 for i in m["a"]) and exact != floats
        return when

    def as_reshape(egraph: EGraph, m: Match) -> TermLike:
        shape = _shape(egraph, m)
        return T("reshape", m["x"], param=tuple(d for i, d in enumerate(shape) if i not in m["a"]))

    def permute_inside(egraph: EGraph, m: Match) -> TermLike:
        kept = [i for i in range(len(_shape(egraph, m))) if i not in m["a"]]
        inner = list(range(len(_shape(egraph, m))))
        for i, k in enumerate(kept):
            inner[k] = kept[m["p"][i]]
        return T(op, T("permute", m["x"], param=tuple(inner)), param=m["a"])

    def splits(egraph: EGraph, m: Match) -> bool:
        return bool(m["a"]) and _split_shape(_shape(egraph, m), m["a"]) is not None

    def split(egraph: EGraph, m: Match) -> TermLike:
        first = min(m["a"])
        shape = _split_shape(_shape(egraph, m), m["a"])
        return T(op, T(op, T("reshape", m["x"], param=shape), param=(first + 1,)), param=(first,))

    return [
        rewrite(f"{op}-{op}", P(op, P(op, x, param=a), param=b), fused, doc=f"{op} over a then b = one {op}"),
        rewrite(f"{op}-split", P(op, x, param=a), split, splits,
                doc=f"a long {op} over N elements = a {op} over G of {op}s over N/G (G near sqrt(N), both >= 256)"),
        rewrite(f"{op}-ones", P(op, x, param=a), as_reshape, over_ones(False), doc="reducing size-1 axes is a reshape"
                + (" (integers)" if op == "reduce_sum" else "")),
        *([rewrite(f"{op}-ones-float", P(op, x, param=a), as_reshape, over_ones(True), exact=False,
                   doc="summing size-1 float axes is a reshape (fast-math: the sum of one -0.0 is +0.0)")]
          if op == "reduce_sum" else []),
        rewrite(f"permute-{op}", P("permute", P(op, x, param=a), param=p), permute_inside,
                doc=f"permuting a {op} = {op} of the permuted input"),
    ]


def _pad_value_kept(f: str, fparam: object, pad_value: object, args: list, out_dtype: DType) -> bool:
    """f(v, ..., v) == v bit for bit, for operands of the output's dtype."""
    if f == "cast" or any(a.dtype != out_dtype for a in args):
        return False
    value = Scalar(pad_value, out_dtype)
    with np.errstate(all="ignore"):
        result = eval_node(PrimNode(f, (), fparam, (), out_dtype), [value.array() for _ in args])
    return Scalar.of(result, out_dtype) == value


def _has_movement(egraph: EGraph, cls: EClass) -> bool:
    return any(egraph.node(n).op in MOVEMENT_OPS for n in cls.nodes)


@procedural("movement-sink", ("permute", "reshape", "pad"), depth=2)
def movement_sink(egraph: EGraph, node: NodeId) -> Iterator[tuple[NodeId, TermLike]]:
    """m(f(a, b)) = f(m(a), m(b)) for permute, reshape and pad over an elementwise op whose operands are views.

    Operands that are views (or constants) let the sunk movement fuse with theirs; sinking into any other
    operand would only copy a whole elementwise chain in a new layout, so it is not done.
    """
    op, param, (c,) = egraph.node(node)
    for form in egraph.eclass(c).nodes:
        f, fparam, args = egraph.node(form)
        if f not in ELEMENTWISE_OPS:
            continue
        classes = [egraph.eclass(a) for a in args]
        if not all(cls.splat is not None or _has_movement(egraph, cls) for cls in classes):
            continue
        if op == "pad":
            pads, value = param  # type: ignore[misc]
            if any(lo > 0 or hi > 0 for lo, hi in pads):
                if not _pad_value_kept(f, fparam, value, classes, egraph.eclass(node).dtype):
                    continue
                params = [param] * len(args)
            else:  # a shrink: the value is never used, but must suit the operand's dtype
                params = [(pads, Scalar(0, cls.dtype).value) for cls in classes]
        else:
            params = [param] * len(args)
        yield node, T(f, *(T(op, a, param=pa) for a, pa in zip(args, params)), param=fparam)


@procedural("movement-hoist", ELEMENTWISE_OPS, depth=1)
def movement_hoist(egraph: EGraph, node: NodeId) -> Iterator[tuple[NodeId, TermLike]]:
    """f(m(a), m(b)) = m(f(a, b)) when every operand is the same movement of same-shaped sources."""
    f, fparam, args = egraph.node(node)
    out = egraph.eclass(node)
    for form in egraph.eclass(args[0]).nodes:
        op, param, children = egraph.node(form)
        if op not in MOVEMENT_OPS:
            continue
        shape = egraph.eclass(children[0]).shape
        found = [_same_movement(egraph, a, op, param, shape) for a in args]
        if any(match is None for match in found):
            continue
        if op == "pad":
            values = [Scalar(value, egraph.eclass(a).dtype).array() for a, (_, value) in zip(args, found)]
            with np.errstate(all="ignore"):
                padded = eval_node(PrimNode(f, (), fparam, (), out.dtype), values)
            param = (param[0], Scalar.of(padded, out.dtype).value)
        yield node, T(op, T(f, *(source for source, _ in found), param=fparam), param=param)
        return


def _same_movement(egraph: EGraph, c: int, op: str, param: object, shape: tuple[int, ...]):
    """(source, pad value) of a form of class ``c`` that is ``op`` with ``param`` (pads alone, for pad) on ``shape``."""
    for form in egraph.eclass(c).nodes:
        fop, fparam, children = egraph.node(form)
        if fop != op or egraph.eclass(children[0]).shape != shape:
            continue
        if op == "pad" and fparam[0] == param[0]:  # type: ignore[index]
            return children[0], fparam[1]  # type: ignore[index]
        if op != "pad" and fparam == param:
            return children[0], None
    return None


def _permute_expand(egraph: EGraph, m: Match) -> TermLike:
    return T("expand", T("permute", m["x"], param=m["p"]), param=tuple(m["q"][i] for i in m["p"]))


def _permute_compose(m: Match) -> tuple[int, ...]:
    return tuple(m["p"][i] for i in m["q"])


RULES: list[Rule] = [
    rewrite("permute-permute", P("permute", P("permute", x, param=p), param=q), P("permute", x, param=_permute_compose),
            doc="two permutes are one"),
    rewrite("permute-identity", P("permute", x, param=p), x, _is_identity, doc="the identity permute is removed"),
    rewrite("permute-as-reshape", P("permute", x, param=p), _as_reshape, _moves_only_ones,
            doc="a permute that only moves size-1 axes is a reshape"),
    rewrite("permute-expand", P("permute", P("expand", x, param=q), param=p), _permute_expand,
            doc="permute(expand(x)) = expand(permute(x))"),
    rewrite("reshape-reshape", P("reshape", P("reshape", x), param=q), P("reshape", x, param=q),
            doc="two reshapes are one"),
    rewrite("reshape-identity", P("reshape", x, param=p), x, _keeps_shape, doc="a reshape to the same shape is removed"),
    rewrite("expand-expand", P("expand", P("expand", x), param=q), P("expand", x, param=q),
            doc="two expands are one"),
    rewrite("expand-identity", P("expand", x, param=p), x, _keeps_shape, doc="an expand to the same shape is removed"),
    rewrite("pad-pad", P("pad", P("pad", x, param=p), param=q), _composed_pad, _pads_compose,
            doc="two pads are one where no padded value would be lost"),
    rewrite("pad-zero", P("pad", x, param=p), x, _no_pad, doc="a pad of zero everywhere is removed"),
    movement_sink,
    movement_hoist,
    *(rule for op in REDUCE_OPS for rule in _reduce_rules(op)),
]

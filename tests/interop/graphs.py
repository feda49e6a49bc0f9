"""E-graphs for the interop tests: hand-made egraph-serialize documents, and egglog's own serializations."""

from __future__ import annotations

import json
from typing import Any


def node(op: str, eclass: str, children: list[str] | None = None, cost: float = 1.0, **extra: Any) -> dict[str, Any]:
    return {"op": op, "children": children or [], "eclass": eclass, "cost": cost, **extra}


SHARING = {
    "nodes": {
        "s": node("s", "S", cost=3.0),
        "a_leaf": node("a", "A", cost=2.0), "a_s": node("u", "A", ["s"], cost=0.0),
        "b_leaf": node("b", "B", cost=2.0), "b_s": node("v", "B", ["s"], cost=0.0),
        "root": node("f", "R", ["a_leaf", "b_leaf"]),
    },
    "root_eclasses": ["R"],
}
"""Greedy (tree cost) takes the two leaves (DAG 5); computing S once for both is optimal (DAG 4)."""

CYCLE = {
    "nodes": {
        "x": node("x", "X", cost=5.0),
        "neg": node("neg", "X", ["negneg"], cost=1.0),  # X = neg(Y), Y = neg(X): a cycle
        "negneg": node("neg", "Y", ["x"], cost=1.0),
        "root": node("g", "R", ["x"]),
    },
    "root_eclasses": ["R"],
}
"""A class reachable through itself; the answer reads the leaf: DAG cost 6."""


def egglog_arith(iterations: int = 6, terms: int = 2) -> dict[str, Any]:
    """egglog's serialization of ``(x*2 + y*2) * (x*2 + y*2) + x*2`` (with ``terms`` variables) after
    distributivity, commutativity and strength-reduction rewrites: mul costs 8, add 2, shift 1."""
    from egglog import EGraph, Expr, StringLike, i64Like, method, rewrite, vars_

    class Num(Expr):
        def __init__(self, value: i64Like) -> None: ...

        @classmethod
        def var(cls, name: StringLike) -> Num: ...

        @method(cost=2)
        def __add__(self, other: Num) -> Num: ...

        @method(cost=8)
        def __mul__(self, other: Num) -> Num: ...

        @method(cost=1)
        def __lshift__(self, other: Num) -> Num: ...

    egraph = EGraph()
    xs = [Num.var(f"x{k}") for k in range(terms)]
    total = xs[0] * Num(2)
    for v in xs[1:]:
        total = total + v * Num(2)
    egraph.let("e", total * total + xs[0] * Num(2))
    a, b, c = vars_("a b c", Num)
    egraph.register(
        rewrite(a + b).to(b + a),
        rewrite(a * b).to(b * a),
        rewrite(a * (b + c)).to((a * b) + (a * c)),
        rewrite((a * b) + (a * c)).to(a * (b + c)),
        rewrite(a * Num(2)).to(a << Num(1)),
        rewrite(a + a).to(a * Num(2)),
        rewrite((a + b) + c).to(a + (b + c)),
    )
    egraph.run(iterations)
    return json.loads(egraph._serialize().to_json())


def egglog_sharing() -> dict[str, Any]:
    """egglog's serialization of ``f(arg(0), arg(1))`` where each argument (cost 4) also equals ``shared().use(k)``
    (cost 1) of one ``shared()`` (cost 4).  With the two ``i64`` leaves (cost 1 each), greedy's tree cost keeps the
    arguments (DAG cost 11); sharing ``shared()`` costs 9."""
    from egglog import EGraph, Expr, i64Like, method, rewrite

    class T(Expr):
        @method(cost=4)
        @classmethod
        def arg(cls, k: i64Like) -> T: ...

        @method(cost=4)
        @classmethod
        def shared(cls) -> T: ...

        @method(cost=1)
        def use(self, k: i64Like) -> T: ...

        @method(cost=1)
        @classmethod
        def f(cls, x: T, y: T) -> T: ...

    egraph = EGraph()
    egraph.let("root", T.f(T.arg(0), T.arg(1)))
    egraph.register(rewrite(T.arg(0)).to(T.shared().use(0)), rewrite(T.arg(1)).to(T.shared().use(1)))
    egraph.run(2)
    return json.loads(egraph._serialize().to_json())


def chain(n: int, alternatives: int = 1) -> dict[str, Any]:
    """A chain of ``n`` classes listed parents first: class k holds ``op(k+1)`` (cost 1) and, from
    ``alternatives`` > 1, more forms of cost 2, 3...; the last class is a leaf.  Its root is class 0."""
    nodes = {}
    for k in range(n):
        kids = [f"n{k + 1}.0"] if k + 1 < n else []
        for a in range(alternatives):
            nodes[f"n{k}.{a}"] = node(f"op{a}", f"c{k}", kids, cost=1.0 + a)
    return {"nodes": nodes, "root_eclasses": ["c0"]}


def random_egraph(seed: int, classes: int, roots: int = 4, leaves: float = 0.3) -> dict[str, Any]:
    """A random e-graph shaped like a saturated term graph: 1-4 forms per class, children mostly in
    nearby later classes (so subterms are shared), a few reading earlier classes (cycles), leaves
    costing 1-10 and operators 0-5; a class's first form is a leaf with probability ``leaves`` (with 0,
    most classes are needed, as in a program's e-graph).  Greedy's tree cost misses the sharing."""
    import random

    rng = random.Random(seed)
    nodes: dict[str, dict[str, Any]] = {}
    for k in range(classes):
        for f in range(rng.randint(1, 4)):
            later = classes - k - 1
            arity = 0 if later == 0 or (f == 0 and rng.random() < leaves) else rng.choice((1, 1, 2, 2, 3))
            kids = []
            for _ in range(arity):
                if k and rng.random() < 0.03:
                    kids.append(rng.randrange(k))  # a cycle through an earlier class
                elif rng.random() < 0.7:
                    kids.append(k + 1 + min(later - 1, int(rng.expovariate(0.3))))
                else:
                    kids.append(rng.randrange(k + 1, classes))
            cost = float(rng.randint(1, 10)) if not kids else float(rng.randint(0, 5))
            nodes[f"{k}.{f}"] = node(f"op{rng.randrange(6)}", f"c{k}", [f"{c}.0" for c in kids], cost=cost)
    return {"nodes": nodes, "root_eclasses": [f"c{k}" for k in range(0, classes, max(1, classes // roots))]}

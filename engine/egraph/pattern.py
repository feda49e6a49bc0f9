"""Terms, patterns and rules: the vocabulary rewrites are written in.

A ``Term`` is a tree of ops whose leaves are existing class ids; ``build`` adds
it to an e-graph.  A ``Pat`` is a term with holes: ``Var`` matches any class,
``Param`` binds a node's parameter.  A ``Rule`` looks at one e-node and yields
``(node, term)`` pairs, each meaning "``node`` equals ``term``"; ``rewrite``
makes such a rule from a left-hand pattern, a right-hand pattern and an
optional condition, e.g.::

    x = Var("x")
    rewrite("double-neg", P("neg", P("neg", x)), x)
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, Union

from engine.egraph.egraph import EGraph, NodeId


class Term(NamedTuple):
    """``op`` applied to ``children``: sub-terms, or ints naming existing classes."""

    op: str
    param: Hashable
    children: tuple[TermLike, ...]


TermLike = Union[Term, int]  # noqa: UP007 (used at runtime in a NamedTuple annotation)


def T(op: str, *children: TermLike, param: Hashable = None) -> Term:  # noqa: N802 (the DSL reads like a term)
    return Term(op, param, children)


def build(egraph: EGraph, term: TermLike) -> NodeId:
    """Add ``term`` to ``egraph`` (sharing what exists); returns the node id of its root.

    Identity views (a permute that keeps the order, a reshape or expand to the
    same shape, a pad of nothing) are not built: their operand stands for them,
    so rules never fill classes with ``x = view(x)`` forms.
    """
    if isinstance(term, int):
        return term
    children = [build(egraph, c) for c in term.children]
    if _is_identity_view(egraph, term, children):
        return children[0]
    return egraph.add(term.op, children, term.param)


def _is_identity_view(egraph: EGraph, term: Term, children: list[NodeId]) -> bool:
    op, param = term.op, term.param
    if op == "permute":
        return param == tuple(range(len(param)))  # type: ignore[arg-type]
    if op in ("reshape", "expand"):
        return param == egraph.eclass(children[0]).shape
    if op == "pad":
        return all(side == (0, 0) for side in param[0])  # type: ignore[index]
    return False


@dataclass(frozen=True)
class Var:
    """A hole matching any class (the same class wherever the name repeats)."""

    name: str


@dataclass(frozen=True)
class Param:
    """Binds the parameter of the node it sits on (equal wherever the name repeats)."""

    name: str


ANY = object()
"""A parameter placeholder that matches every value without binding it."""

Match = Mapping[str, Any]
ParamSpec = Any  # ANY, a Param, a literal, or (right-hand side only) a function of the match


@dataclass(frozen=True)
class Pat:
    op: str
    children: tuple[Pat | Var, ...]
    param: ParamSpec = ANY


def P(op: str, *children: Pat | Var, param: ParamSpec = ANY) -> Pat:  # noqa: N802 (the DSL reads like a pattern)
    return Pat(op, children, param)


def match(egraph: EGraph, pat: Pat, node: NodeId, bound: Match | None = None) -> Iterator[dict[str, Any]]:
    """Every binding under which ``pat`` matches e-node ``node`` (children may match any form of their class)."""
    op, param, children = egraph.node(node)
    if op != pat.op or len(children) != len(pat.children):
        return
    m = dict(bound or {})
    if isinstance(pat.param, Param):
        if m.setdefault(pat.param.name, param) != param:
            return
    elif pat.param is not ANY and pat.param != param:
        return
    yield from _match_children(egraph, pat.children, children, m)


def _match_children(egraph: EGraph, pats: tuple[Pat | Var, ...], classes: tuple[int, ...], m: dict[str, Any]):
    for i, pat in enumerate(pats):  # variables first, without generators: most patterns are shallow
        if not isinstance(pat, Var):
            break
        seen = m.get(pat.name)
        if seen is None:
            m = {**m, pat.name: classes[i]}
        elif egraph.find(seen) != egraph.find(classes[i]):
            return
    else:
        yield m
        return
    for n in egraph.eclass(classes[i]).nodes:
        if egraph.node(n).op == pat.op:
            for m2 in match(egraph, pat, n, m):
                yield from _match_children(egraph, pats[i + 1:], classes[i + 1:], m2)


def instantiate(pat: Pat | Var, m: Match) -> TermLike:
    """The term ``pat`` stands for under binding ``m``."""
    if isinstance(pat, Var):
        return m[pat.name]
    p = pat.param
    # ANY, the default of ``P``, means "no parameter" on the right-hand side, as the lowering writes it
    param = None if p is ANY else m[p.name] if isinstance(p, Param) else p(m) if callable(p) else p
    return Term(pat.op, param, tuple(instantiate(c, m) for c in pat.children))


Finder = Callable[[EGraph, NodeId], Iterable[tuple[NodeId, TermLike]]]


@dataclass(frozen=True)
class Rule:
    """A rewrite: ``find`` yields, for one e-node, the ``(node, term)`` equalities it proves.

    ``roots`` are the ops of the e-nodes it is tried on; ``depth`` is how many
    levels of classes below the root ``find`` reads (the root's own class is level
    0), so the runner re-tries it only where something that deep changed.
    ``exact`` rules hold for every input, NaN and infinity included; the others
    (fast-math) assume finite, in-range values and run only when asked for.
    """

    name: str
    roots: tuple[str, ...]
    find: Finder
    depth: int
    exact: bool = True
    doc: str = ""


Condition = Callable[[EGraph, Match], bool]


Builder = Callable[[EGraph, Match], TermLike]


def rewrite(name: str, lhs: Pat, rhs: Pat | Var | Builder, when: Condition | None = None, *, exact: bool = True,
            doc: str = "") -> Rule:
    """A declarative rule: wherever ``lhs`` matches (and ``when`` holds), it equals ``rhs``.

    ``rhs`` is a pattern over the variables of ``lhs``, or a function of the match that builds the term.
    """

    def find(egraph: EGraph, node: NodeId) -> Iterator[tuple[NodeId, TermLike]]:
        for m in match(egraph, lhs, node):
            if when is None or when(egraph, m):
                yield node, rhs(egraph, m) if callable(rhs) else instantiate(rhs, m)

    return Rule(name, (lhs.op,), find, _depth(lhs), exact, doc)


def _depth(pat: Pat | Var) -> int:
    """Levels of classes below its root a match reads (conditions may read a variable's class: its splat)."""
    return 0 if isinstance(pat, Var) else 1 + max((_depth(c) for c in pat.children), default=-1)


def procedural(name: str, roots: tuple[str, ...], depth: int, *, exact: bool = True) -> Callable[[Callable], Rule]:
    """Decorator: a rule whose ``find`` is the decorated function (its docstring documents the rule)."""

    def wrap(find: Finder) -> Rule:
        return Rule(name, roots, find, depth, exact, (find.__doc__ or "").strip())

    return wrap

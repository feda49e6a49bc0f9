"""Tunable transforms as variable substitutions: upcast, register tiles, unrolling, split reduces, staging.

Every transform of a variant rewrites the kernel's loop variables, never its
math.  Upcasting the last axis ``g`` (size ``S``) by ``U`` gives a work item an
outer variable ``g'`` of size ``ceil(S/U)`` and ``U`` *lanes*, lane ``u``
substituting ``g -> U*g' + u`` in every index; unrolling the reduce variable
``r`` by ``F`` substitutes ``r -> F*r' + j``.  The ``Idx`` constructors simplify
as they rebuild, so an affine index stays affine and a lane's load differs from
lane 0's by a constant: that is what vector loads detect.  Nodes that do not
depend on a substituted variable come out equal in every lane, so they are
computed once.  Lanes past the end of a non-divisible axis see an index range
beyond their buffers, so their loads become clamped and their stores guarded.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from engine.kernel.index import Div, Idx, Var, add, floordiv, lit, mod, scale, unflatten, var
from engine.kernel.ir import Acc, Bound, Expr, Kernel, map_exprs, schedule
from engine.kernel.ir import dependent as dependent  # re-exported: codegen and the cost model import it from here

Subst = Mapping[Var, Idx]


@dataclass(frozen=True, eq=True)
class LaneAcc(Expr):
    """The reduce result of lane ``lane`` (what ``Acc`` becomes in that lane's outputs)."""

    lane: int
    dtype: object

    __hash__ = Expr.__hash__


@dataclass(frozen=True, eq=True)
class Staged(Expr):
    """Element ``index`` of local-memory tile ``buffer``, refilled each iteration of ``loop`` (a staged load)."""

    buffer: int
    index: Idx
    loop: Var
    dtype: object

    __hash__ = Expr.__hash__

    def index_vars(self) -> set[Var]:
        """What ``ir.dependent`` follows: its index and the loop that refills its tile."""
        return self.index.variables() | {self.loop}

    def rebuild(self, children: tuple[Expr, ...], index: Callable[[Idx], Idx]) -> Expr:
        return Staged(self.buffer, index(self.index), self.loop, self.dtype)


def substitute(x: Idx, m: Subst) -> Idx:
    """``x`` with each variable of ``m`` replaced by its index (simplified as it rebuilds)."""
    if not any(v in m for v in x.variables()):
        return x
    parts = [lit(x.const)]
    for atom, c in x.terms:
        if isinstance(atom, Var):
            a = m.get(atom, Idx(((atom, 1),), 0))
        elif isinstance(atom, Div):
            a = floordiv(substitute(atom.num, m), atom.k)
        else:
            a = mod(substitute(atom.num, m), atom.k)
        parts.append(scale(a, c))
    return add(*parts)


def rewrite(roots: Sequence[Expr], m: Subst, acc: Expr | None = None,
            replace: Mapping[Expr, Expr] | None = None) -> list[Expr]:
    """``roots`` with ``m`` substituted in every index (``Acc`` replaced by ``acc``, nodes of ``replace`` by
    their value, both if given)."""
    table = dict(replace or {})
    if acc is not None:
        table.update((e, acc) for e in schedule(roots) if isinstance(e, Acc) and e not in table)
    return map_exprs(roots, table, lambda x: substitute(x, m))


def upcast_axes(kernel: Kernel) -> tuple[Var | None, Var | None]:
    """The axes ``upcast`` and ``tile`` apply to: the last two global variables of size > 1."""
    big = [v for v in kernel.vars if v.size > 1]
    return (big[-1] if big else None), (big[-2] if len(big) > 1 else None)


@dataclass(frozen=True)
class Lane:
    """One output point of a work item: the substitution of the global variables, and when it is valid."""

    subst: Mapping[Var, Idx]
    guards: tuple[Bound, ...]
    """``lo <= index < hi`` conditions the lane's point must meet (past the end of a non-divisible axis)."""


@dataclass(frozen=True)
class Lanes:
    """The global index space of a work item after upcast/tile: outer variables and lanes (tile-major)."""

    outer: tuple[Var, ...]
    """The kernel's global variables with upcast axes shrunk (``ceil(size/factor)``)."""
    lanes: tuple[Lane, ...]

    @property
    def numel(self) -> int:
        return math.prod(v.size for v in self.outer)


def lanes(kernel: Kernel, upcast: int, tile: int) -> Lanes:
    """The lanes of a work item of ``kernel`` upcast by ``upcast`` (last axis) and ``tile`` (the one before)."""
    last, before = upcast_axes(kernel)
    factors = {v: f for v, f in ((before, tile), (last, upcast)) if v is not None and f > 1}
    outer = {v: Var(f"{v.name}'", -(-v.size // f)) for v, f in factors.items()}
    offsets: list[dict[Var, int]] = [{}]
    for v, f in factors.items():  # tile axis first: lanes are tile-major
        offsets = [{**o, v: u} for o in offsets for u in range(f)]
    out = []
    for o in offsets:
        subst: dict[Var, Idx] = {}
        guards = []
        for v, u in o.items():
            f = factors[v]
            subst[v] = add(scale(Idx(((outer[v], 1),), 0), f), lit(u)) if outer[v].size > 1 else lit(u)
            if f * (outer[v].size - 1) + u >= v.size:
                guards.append(Bound(subst[v], 0, v.size))
        out.append(Lane(subst, tuple(guards)))
    return Lanes(tuple(outer.get(v, v) for v in kernel.vars), tuple(out))


def unroll(r: Var, factor: int) -> tuple[Var, list[Subst], Var, Subst]:
    """Unroll ``r`` by ``factor``: the main loop's variable and its substitutions, the remainder's and its."""
    factor = max(1, min(factor, r.size))
    main = Var(f"{r.name}'", r.size // factor)
    rest = Var(f"{r.name}''", r.size % factor)
    base = scale(var(main), factor) if main.size > 1 else lit(0)
    mains: list[Subst] = [{r: add(base, lit(j))} for j in range(factor)]
    return main, mains, rest, {r: add(var(rest), lit(factor * main.size))}


def flat_reduce(rvars: Sequence[Var]) -> tuple[Var, Subst]:
    """One variable over the whole reduce (row-major) and the substitution of each reduce variable by it."""
    size = math.prod(v.size for v in rvars)
    flat = Var("ri'", size)
    parts = unflatten(var(flat) if size > 1 else lit(0), [v.size for v in rvars])
    return flat, dict(zip(rvars, parts))

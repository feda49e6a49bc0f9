"""Simpler indices for an equal kernel (``split_vars``): what makes head-split and padded reads affine.

Modulo coefficients are reduced (to the residue nearest 0) and a loop variable
read as ``v // k`` or ``v % k`` becomes two variables, ``v = k * v_hi + v_lo``.
The numpy evaluator plans the simplified kernel, so such reads become
zero-copy strided views of their inputs instead of gathers.
"""

from __future__ import annotations

from collections.abc import Callable

from engine.kernel.index import Div, Idx, Var, add, floordiv, lit, mod, scale, var
from engine.kernel.ir import Kernel, Load, Where, map_kernel, schedule


def _subst(x: Idx, m: dict[Var, Idx]) -> Idx:
    """``x`` with each variable of ``m`` replaced, divisions and modulos simplified again.

    The coefficients under a ``% k`` are reduced modulo ``k`` first (to the
    residue nearest 0), so ``(g + 67*r) % 66`` becomes ``g + r`` when that stays
    below 66.
    """
    parts = [lit(x.const)]
    for atom, c in x.terms:
        if isinstance(atom, Var):
            y = m.get(atom, var(atom))
        elif isinstance(atom, Div):
            y = floordiv(_subst(atom.num, m), atom.k)
        else:
            k = atom.k
            num = _subst(atom.num, m)
            terms = [(a, (ca % k) - k if ca % k > k // 2 else ca % k) for a, ca in num.terms]
            y = mod(add(*(scale(Idx(((a, 1),), 0), ca) for a, ca in terms if ca), lit(num.const % k)), k)
        parts.append(scale(y, c))
    return add(*parts)


def _rewrite(kernel: Kernel, m: dict[Var, Idx], swap: Callable[[tuple[Var, ...]], tuple[Var, ...]]) -> Kernel:
    """``kernel`` with every index rewritten by ``_subst(., m)`` and its loop variables by ``swap``."""
    return map_kernel(kernel, index=lambda x: _subst(x, m), loops=swap)


def _has_mod(kernel: Kernel) -> bool:
    idxs = [i for e in schedule(kernel.exprs())
            for i in ([e.index] if isinstance(e, Load) else [b.index for b in e.bounds] if isinstance(e, Where) else [])]
    return any(not i.is_affine for i in idxs)


def _split_candidate(kernel: Kernel) -> tuple[Var, int] | None:
    """A loop variable ``v`` some index divides or reduces modulo ``k`` (a divisor of its size), if any."""
    loops = set(kernel.vars) | set(kernel.reduce.vars if kernel.reduce else ())
    for e in schedule(kernel.exprs()):
        idxs = [e.index] if isinstance(e, Load) else [b.index for b in e.bounds] if isinstance(e, Where) else []
        stack = [a for i in idxs for a in i.atoms()]
        while stack:
            atom = stack.pop()
            if isinstance(atom, Var):
                continue
            num = atom.num
            if len(num.terms) == 1 and num.const == 0 and num.terms[0][1] == 1:
                v = num.terms[0][0]
                if v in loops and isinstance(v, Var) and v.size % atom.k == 0 and atom.k < v.size:
                    return v, atom.k
            stack.extend(num.atoms())
    return None


def split_vars(kernel: Kernel) -> Kernel:
    """An equal kernel with simpler indices: modulo coefficients reduced, and variables taken ``// k`` or ``% k`` split.

    ``v`` becomes ``k * v_hi + v_lo`` (``v_hi`` before ``v_lo``, so a global
    split is a reshape of the output), which turns such indices affine: a
    batched matmul over heads read through ``g // 128`` becomes strided views.
    """
    if not _has_mod(kernel):
        return kernel
    kernel = _rewrite(kernel, {}, lambda vs: vs)
    names = {v.name for v in (*kernel.vars, *(kernel.reduce.vars if kernel.reduce else ()))}
    while (found := _split_candidate(kernel)) is not None:
        v, k = found
        hi, lo = (Var(_fresh(f"{v.name}{t}", names), n) for t, n in (("h", v.size // k), ("l", k)))

        def swap(vs: tuple[Var, ...], v: Var = v, hi: Var = hi, lo: Var = lo) -> tuple[Var, ...]:
            return tuple(x for u in vs for x in ((hi, lo) if u == v else (u,)))

        kernel = _rewrite(kernel, {v: add(scale(var(hi), k), var(lo))}, swap)
    return kernel


def _fresh(name: str, taken: set[str]) -> str:
    while name in taken:
        name += "_"
    taken.add(name)
    return name

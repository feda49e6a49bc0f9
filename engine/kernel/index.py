"""Integer index arithmetic: what views (permute, reshape, expand, pad) become inside a kernel.

An ``Idx`` is a sum of atoms times coefficients plus a constant, where an atom is
a loop variable (``Var``) or a floor division / modulo of another ``Idx`` by a
positive constant.  Every atom knows its range, so the constructors simplify as
they build: ``(8*i + j) // 8`` is ``i`` when ``0 <= j < 8``, ``(8*i + j) % 8`` is
``j``, and ``8*(e // 8) + e % 8`` folds back to ``e``.  That is what keeps the
index of a reshape that splits and re-merges axes affine.

Division and modulo have *floor* semantics (Python's), which code generators
must honour when an operand may be negative (only in masked-off pad lanes).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True, order=True)
class Var:
    """A loop variable ``name`` ranging over ``0 .. size-1``."""

    name: str
    size: int

    @property
    def bounds(self) -> tuple[int, int]:
        return 0, self.size - 1

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Div:
    """``floor(num / k)``, k > 1."""

    num: Idx
    k: int

    @property
    def bounds(self) -> tuple[int, int]:
        lo, hi = self.num.bounds
        return lo // self.k, hi // self.k

    def __str__(self) -> str:
        return f"({_paren(self.num)} // {self.k})"


@dataclass(frozen=True)
class Mod:
    """``num mod k`` (floor semantics: always in ``0 .. k-1``), k > 1."""

    num: Idx
    k: int

    @property
    def bounds(self) -> tuple[int, int]:
        return 0, self.k - 1

    def __str__(self) -> str:
        return f"({_paren(self.num)} % {self.k})"


Atom = Var | Div | Mod


def _paren(x: Idx) -> str:
    return str(x) if len(x.terms) + bool(x.const) <= 1 else f"({x})"


def _atom_key(atom: Atom) -> tuple:
    return (0, atom.name) if isinstance(atom, Var) else (1, str(atom))


@dataclass(frozen=True)
class Idx:
    """``const + sum(coeff * atom)``: an integer index expression (build it with the functions below)."""

    terms: tuple[tuple[Atom, int], ...] = ()
    const: int = 0
    bounds: tuple[int, int] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        lo = hi = self.const
        for atom, c in self.terms:
            a, b = atom.bounds
            lo, hi = lo + min(c * a, c * b), hi + max(c * a, c * b)
        object.__setattr__(self, "bounds", (lo, hi))

    @property
    def is_affine(self) -> bool:
        """Only variables, no division or modulo."""
        return all(isinstance(a, Var) for a, _ in self.terms)

    def coefficient(self, var: Var) -> int:
        return sum(c for a, c in self.terms if a == var)

    def atoms(self) -> Iterable[Atom]:
        return (a for a, _ in self.terms)

    def variables(self) -> set[Var]:
        """Every variable this index depends on, through divisions and modulos too."""
        out: set[Var] = set()
        for atom in self.atoms():
            out |= {atom} if isinstance(atom, Var) else atom.num.variables()
        return out

    def __str__(self) -> str:
        parts = [str(a) if c == 1 else f"{c}*{a}" for a, c in self.terms]
        if self.const or not parts:
            parts.append(str(self.const))
        return " + ".join(parts).replace("+ -", "- ")


def lit(n: int) -> Idx:
    return Idx((), n)


def var(v: Var) -> Idx:
    return Idx(((v, 1),), 0) if v.size > 1 else lit(0)


def _recombine(coeffs: dict[Atom, int]) -> int:
    """Fold ``c*k*(e // k) + c*(e % k)`` into ``c*e`` (in place); returns the constant it frees."""
    const, changed = 0, True
    while changed:
        changed = False
        for atom in [a for a in coeffs if isinstance(a, Mod)]:
            div, c = Div(atom.num, atom.k), coeffs.get(atom, 0)
            if c and coeffs.get(div) == c * atom.k:
                del coeffs[atom], coeffs[div]
                for a, ca in atom.num.terms:
                    coeffs[a] = coeffs.get(a, 0) + c * ca
                const += c * atom.num.const
                changed = True
    return const


def add(*xs: Idx) -> Idx:
    coeffs: dict[Atom, int] = {}
    const = 0
    for x in xs:
        const += x.const
        for a, c in x.terms:
            coeffs[a] = coeffs.get(a, 0) + c
    const += _recombine(coeffs)
    terms = tuple(sorted(((a, c) for a, c in coeffs.items() if c), key=lambda t: _atom_key(t[0])))
    return Idx(terms, const)


def scale(x: Idx, k: int) -> Idx:
    if k == 0:
        return lit(0)
    return Idx(tuple((a, c * k) for a, c in x.terms), x.const * k)


def floordiv(x: Idx, k: int) -> Idx:
    """``floor(x / k)`` for a positive constant ``k``, simplified by ranges."""
    assert k > 0
    if k == 1:
        return x
    lo, hi = x.bounds
    if lo // k == hi // k:
        return lit(lo // k)
    whole = [(a, c) for a, c in x.terms if c % k == 0]
    rest = add(Idx(tuple((a, c) for a, c in x.terms if c % k), x.const % k))
    rlo, rhi = rest.bounds
    if rlo >= 0 and rhi < k:  # the remainder never carries
        return add(Idx(tuple((a, c // k) for a, c in whole), x.const // k))
    return add(Idx(tuple((a, c // k) for a, c in whole), x.const // k), _atom(Div(rest, k)) if rest.terms else lit(rest.const // k))


def mod(x: Idx, k: int) -> Idx:
    """``x mod k`` (floor semantics) for a positive constant ``k``, simplified by ranges."""
    assert k > 0
    if k == 1:
        return lit(0)
    rest = add(Idx(tuple((a, c) for a, c in x.terms if c % k), x.const % k))
    lo, hi = rest.bounds
    if lo >= 0 and hi < k:
        return rest
    if lo // k == hi // k:
        return add(rest, lit(-(lo // k) * k))
    return _atom(Mod(rest, k))


def _atom(a: Div | Mod) -> Idx:
    return Idx(((a, 1),), 0)


def flatten(index: Sequence[Idx], shape: Sequence[int]) -> Idx:
    """The row-major offset of ``index`` in a contiguous tensor of ``shape``."""
    out, stride = [], 1
    for i, d in zip(reversed(index), reversed(shape)):
        if d != 1:
            out.append(scale(i, stride))
        stride *= d
    return add(*out)


def unflatten(offset: Idx, shape: Sequence[int]) -> list[Idx]:
    """The per-axis index of row-major ``offset`` in ``shape`` (inverse of ``flatten``)."""
    if 0 in shape:  # no element: the index is never used (and strides of 0 cannot divide)
        return [lit(0)] * len(shape)
    out, stride = [], 1
    for d in reversed(shape):
        out.append(lit(0) if d == 1 else mod(floordiv(offset, stride), d))
        stride *= d
    return out[::-1]

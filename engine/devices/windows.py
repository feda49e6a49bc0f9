"""Masked reads as views: a ``Where(bounds, load, 0)`` read from a zero-padded copy of the load's input.

A convolution's padding reaches the numpy evaluator as a load masked by
bounds on its window coordinates (``0 <= g2 + r1 - 1 < 64``).  Evaluated as
it is, every point of the iteration space pays the mask and ``np.where``, and
the factor is materialised (for a 3x3 convolution: nine times its input).
When each bound is one axis of the input, seen through the load's strides, the
same values are a strided view of the input copied once per launch with zeros
around those axes (``Window``): the mask goes, and a contraction's factor
becomes an affine load that BLAS reads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from engine.kernel.index import Idx, Var, add, lit, scale, var
from engine.kernel.ir import Const, Expr, Kernel, Load, Where, map_kernel, schedule


@dataclass(frozen=True)
class Window:
    """Input ``input`` viewed as ``dims`` (outer to inner) and padded with ``pads`` zeros (before, after) per axis."""

    input: int
    dims: tuple[int, ...]
    pads: tuple[tuple[int, int], ...]

    @property
    def padded(self) -> tuple[int, ...]:
        return tuple(n + a + b for n, (a, b) in zip(self.dims, self.pads))

    def copy(self, flat: np.ndarray) -> np.ndarray:
        """The padded copy of ``flat`` (the input's flat array), flat."""
        out = np.zeros(self.padded, flat.dtype)
        out[tuple(slice(a, a + n) for n, (a, _) in zip(self.dims, self.pads))] = flat.reshape(self.dims)
        return out.reshape(-1)

    def __str__(self) -> str:
        return f"in{self.input} as {list(self.dims)} zero-padded by {[list(p) for p in self.pads]}"


def windowed(kernel: Kernel, first: int) -> tuple[Kernel, tuple[Window, ...]]:
    """``kernel`` with every masked read that a window serves replaced by a load of that window, and the
    windows; the ``i``-th window's loads read input ``first + i`` (the flat inputs are followed by the windows)."""
    table: dict[Expr, Expr] = {}
    windows: dict[Window, int] = {}
    for e in schedule(kernel.exprs()):
        if isinstance(e, Where) and (found := _window(e)) is not None:
            window, index = found
            slot = windows.setdefault(window, len(windows))
            then = e.then
            assert isinstance(then, Load)
            table[e] = Load(first + slot, index, math.prod(window.padded), then.dtype)
    if not table:
        return kernel, ()
    return map_kernel(kernel, table), tuple(windows)


def _window(e: Where) -> tuple[Window, Idx] | None:
    """The window that serves masked read ``e`` and the read's index into it, if one does.

    Each bound must be ``0 <= index < hi`` with its index the load's terms over one stride (an axis of the
    input of extent ``hi``); the load's other terms and constant must fall, without carry, in the axes between.
    """
    load, otherwise = e.then, e.otherwise
    if not (isinstance(load, Load) and load.index.is_affine and isinstance(otherwise, Const) and e.bounds
            and load.dtype == e.dtype and _positive_zero(otherwise)):
        return None
    coeff: dict[Var, int] = {}
    for v, c in load.index.terms:
        assert isinstance(v, Var)
        coeff[v] = coeff.get(v, 0) + c
    bounded: dict[int, tuple[int, Idx]] = {}  # stride -> (extent, bound index)
    for b in e.bounds:
        stride = _stride(b.index, coeff)
        if b.lo != 0 or stride is None or stride in bounded or b.hi <= 0:
            return None
        bounded[stride] = (b.hi, b.index)
        for v, c in b.index.terms:
            coeff[v] -= stride * c
    axes = _axes(bounded, load.size)  # inner to outer: (stride, extent, bound index or None)
    if axes is None:
        return None
    digits = _digits(load.index.const - sum(s * i.const for s, (_, i) in bounded.items()), axes)
    if digits is None:
        return None
    free: list[list[tuple[Var, int]]] = [[] for _ in axes]
    for v, c in coeff.items():
        if c == 0:
            continue
        k = next((k for k, (s, n, i) in enumerate(axes) if i is None and c % s == 0 and s <= c < s * n), None)
        if k is None:
            return None
        free[k].append((v, c // axes[k][0]))
    for k, (_, n, i) in enumerate(axes):
        if i is None and digits[k] + sum(m * (v.size - 1) for v, m in free[k]) >= n:
            return None  # the free terms carry into the next axis
    pads = [(0, 0) if i is None else (max(0, -i.bounds[0]), max(0, i.bounds[1] - n + 1)) for _, n, i in axes]
    terms: list[tuple[Var, int]] = []
    const, stride = 0, 1
    for k, (_, n, i) in enumerate(axes):
        if i is None:
            terms += [(v, m * stride) for v, m in free[k]]
            const += digits[k] * stride
        else:
            terms += [(v, c * stride) for v, c in i.terms]  # type: ignore[misc]
            const += (i.const + pads[k][0]) * stride
        stride *= n + sum(pads[k])
    window = Window(load.input, tuple(n for _, n, _ in reversed(axes)), tuple(reversed(pads)))
    index = add(*(scale(var(v), c) for v, c in terms), lit(const))
    lo, hi = index.bounds
    if lo < 0 or hi >= math.prod(window.padded):  # a view must never leave its copy (as_strided checks nothing)
        return None
    return window, index


def _positive_zero(c: Const) -> bool:
    """Whether ``c`` is +0, the padding's value (a -0.0 pad keeps its mask)."""
    value = c.value.array()
    return bool(value == 0 and not np.signbit(value.astype(np.float64)))


def _stride(index: Idx, coeff: dict[Var, int]) -> int | None:
    """The stride ``s`` with ``s * index``'s terms among the load's ``coeff``, if there is one (positive)."""
    if not index.terms or not index.is_affine:
        return None
    v, c = index.terms[0]
    assert isinstance(v, Var)
    if c == 0 or coeff.get(v, 0) % c:
        return None
    s = coeff.get(v, 0) // c
    if s <= 0 or any(coeff.get(u, 0) != s * k for u, k in index.terms):  # type: ignore[call-overload]
        return None
    return s


def _axes(bounded: dict[int, tuple[int, Idx]], size: int) -> list[tuple[int, int, Idx | None]] | None:
    """The input's axes, inner to outer: the bounded ones and those between and around them."""
    axes: list[tuple[int, int, Idx | None]] = []
    reach = 1
    for stride in sorted(bounded):
        extent, index = bounded[stride]
        if stride % reach:
            return None
        if stride > reach:
            axes.append((reach, stride // reach, None))
        axes.append((stride, extent, index))
        reach = stride * extent
    if size % reach:
        return None
    if size > reach:
        axes.append((reach, size // reach, None))
    return axes


def _digits(const: int, axes: list[tuple[int, int, Idx | None]]) -> list[int] | None:
    """``const`` as a digit per axis (zero on the bounded ones), or None where it cannot be."""
    if const < 0:
        return None
    digits = [0] * len(axes)
    for k in reversed(range(len(axes))):
        stride, _, index = axes[k]
        if index is None:
            digits[k], const = divmod(const, stride)
        elif const >= stride:
            return None
    return digits if const == 0 else None

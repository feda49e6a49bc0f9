"""A contraction's reduce as one batched ``np.matmul`` (BLAS, itself multi-threaded): the BLAS path.

A *contraction* kernel (a float ``sum`` of ``mul(a, b)`` whose factors both
span a reduce axis, like a matmul or a convolution) never forms the product:
``a`` and ``b`` are evaluated over their own spans and laid out as a batch of
matrices (``product``), in the axis order of their inputs (``factor_order``),
and the matmul writes into the output where the layouts allow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from engine.devices.chunk_plan import Block, Plan
from engine.kernel.index import Var
from engine.kernel.ir import Expr, Load, schedule
from engine.program.reference import widen


@dataclass(frozen=True)
class Recipe:
    """How ``product`` lays two factor values of one frame shape out as a batched matmul, and the result back."""

    shapes: tuple[tuple[int, ...], tuple[int, ...]]
    later: tuple[int, ...]
    """Reduce axes only one factor spans: rows or columns of the matmul, summed in its result (summing a factor
    first would compute ``sum(a) * b``, which differs from the sum of the products where they hold infinities)."""
    perms: tuple[tuple[int, ...], tuple[int, ...]]
    dims: tuple[tuple[int, int, int], tuple[int, int, int]]
    groups: tuple[tuple[int, int], tuple[int, int]]
    """Where each factor's matrix axes start, in its ``perms`` order: its rows, then its columns."""
    result: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]
    """Shape, then axis order, of the matmul's result, then the chunk's shape."""
    columns_first: bool
    """The output's innermost axis is a row of the matmul (a convolution's image column): the result is
    computed transposed, so that the epilogue reads it in runs."""


def _recipe(p: Plan, shape: tuple[int, ...], chunk: tuple[Block, ...]) -> Recipe:
    factors = p.factors or p.dot
    assert factors is not None
    ng, nd, raxes = len(p.kernel.vars), p.ndim, set(p.reduce_axes)
    sa, sb = (set(p.spans[f]) for f in factors)
    only = (sa ^ sb) & raxes
    sa_shape, sb_shape = (tuple(shape[i] if i in s else 1 for i in range(nd)) for s in (sa, sb))
    batch, inner = sorted(sa & sb - raxes), sorted(sa & sb & raxes)
    ma, nb = sorted(sa - sb), sorted(sb - sa)
    size = [math.prod(shape[i] for i in g) for g in (batch, ma, inner, nb)]
    rest = [i for i in range(nd) if i not in sa and i not in sb]
    order = batch + ma + nb
    return Recipe(
        (sa_shape, sb_shape),
        tuple(sorted(only)),
        (tuple(batch + ma + inner + [i for i in range(nd) if i not in sa]),
         tuple(batch + inner + nb + [i for i in range(nd) if i not in sb])),
        ((size[0], size[1], size[2]), (size[0], size[2], size[3])),
        ((len(batch), len(batch) + len(ma)), (len(batch), len(batch) + len(inner))),
        (tuple([shape[i] for i in order] + [1] * (len(rest) + len(inner))), tuple(np.argsort(order + rest + inner)),
         tuple(n for _, n in chunk) + (1,) * (nd - ng)),
        ng - 1 in ma,
    )


def product(p: Plan, recipes: dict[tuple[int, ...], Recipe], shape: tuple[int, ...], chunk: tuple[Block, ...],
            av: np.ndarray, bv: np.ndarray, window: np.ndarray | None = None) -> np.ndarray:
    """``sum(a * b)`` over the reduce axes of a frame of ``shape`` from the factors' values, by ``np.matmul`` (not
    yet rounded); ``recipes`` caches the layout of each frame shape.

    Axes both factors span are batch (global) or contracted (reduce) axes; a
    reduce axis only one factor spans is summed in the matmul's result.  The matmul writes
    into ``window`` (the result's shape and dtype) where that is a row-major view
    of the result's matrices, saving a temporary and a copy.
    """
    r = recipes.get(shape)
    if r is None:
        r = recipes[shape] = _recipe(p, shape, chunk)
    ms = []
    for v, target, perm, dims, groups in zip((av, bv), r.shapes, r.perms, r.dims, r.groups):
        v = widen(v)
        if v.shape != target:
            v = np.broadcast_to(v, target)
        ms.append(_matrices(v.transpose(perm), dims, groups))
    am, bm = (_blasable(m) for m in ms)
    out = _matmul_out(window, r, (am.shape[0], am.shape[1], bm.shape[2]), np.result_type(am, bm))
    if r.columns_first and out is None:
        c = np.matmul(bm.transpose(0, 2, 1), am.transpose(0, 2, 1)).transpose(0, 2, 1)
    elif am.shape[0] == 1:
        c = np.matmul(am[0], bm[0], out=None if out is None else out[0])[None]
    else:
        c = np.matmul(am, bm, out=out)
    c = c.reshape(r.result[0]).transpose(r.result[1])
    if r.later:
        c = np.add.reduce(c, axis=r.later, keepdims=True)
    return c if c.shape == r.result[2] else np.broadcast_to(c, r.result[2])


def _matmul_out(window: np.ndarray | None, r: Recipe, dims: tuple[int, int, int], dtype: np.dtype) -> np.ndarray | None:
    """``window`` as the matmul's ``(batch, m, n)`` result, if it is a view BLAS can write (rows contiguous)."""
    if window is None or r.later or window.dtype != dtype or math.prod(r.result[0]) != window.size:
        return None
    try:
        out = window.transpose(np.argsort(r.result[1])).reshape(dims, copy=False)
    except ValueError:
        return None
    return out if out.strides[-1] == out.itemsize and out.strides[-2] >= max(dims[2], 1) * out.itemsize else None


def _matrices(v: np.ndarray, dims: tuple[int, int, int], groups: tuple[int, int]) -> np.ndarray:
    """``v`` (batch, row and column axes in order) as ``dims`` matrices: a view where its strides allow, else a
    copy that streams: when a row axis is the unit-stride one (a convolution's window over an image row), the copy
    is laid out column-major, each matrix a transposed view (BLAS reads it as it is; a row-major copy of such a
    view runs several times slower)."""
    try:
        return v.reshape(dims, copy=False)
    except ValueError:
        pass
    moving = [(abs(st), axis) for axis, (n, st) in enumerate(zip(v.shape, v.strides)) if n > 1 and st]
    rows, columns = groups
    if not moving or not rows <= min(moving)[1] < columns:
        return v.reshape(dims)
    order = [*range(rows), *range(columns, v.ndim), *range(rows, columns)]
    return np.ascontiguousarray(v.transpose(order)).reshape(dims[0], dims[2], dims[1]).transpose(0, 2, 1)


def _blasable(x: np.ndarray) -> np.ndarray:
    """``x`` (a matrix or a stack of them) laid out so that ``np.matmul`` hands it to BLAS."""
    item = x.itemsize
    s1, s2 = x.strides[-2:]
    if (s2 == item and s1 >= max(x.shape[-1], 1) * item) or (s1 == item and s2 >= max(x.shape[-2], 1) * item):
        return x
    return np.ascontiguousarray(x)


def factor_order(p: Plan, e: Expr, span: tuple[int, ...]) -> list[int]:
    """The axis order of a contraction factor node's buffer, one BLAS reads as it is and ``e`` writes streaming.

    Batch axes (global axes both factors span) come first, then the reduce axes and the other global axes as
    one matrix in either order: the one whose inner axis is the unit-stride axis of the widest load ``e``
    reads (computing a factor in the other order than its input's runs several times slower).
    """
    assert p.factors is not None
    both = set(p.spans[p.factors[0]]) & set(p.spans[p.factors[1]])
    inner = [a for a in span if a in p.reduce_axes]
    batch = [a for a in span if a in both and a not in inner]
    free = [a for a in span if a not in both and a not in inner]
    loads = [x for x in schedule([e]) if isinstance(x, Load)]
    widest = max(loads, key=lambda x: len(p.spans[x]), default=None)
    unit = None
    if widest is not None:
        strides = {p.axes[v]: abs(c) for v, c in widest.index.terms if isinstance(v, Var) and c and p.axes[v] in span}
        unit = min(strides, key=strides.__getitem__, default=None)
    return batch + (free + inner if unit in inner else inner + free)

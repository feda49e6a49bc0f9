"""A contraction as one cuBLAS ``sgemmStridedBatched`` call on its buffers' own strides: no operand or result copied.

``cupy.matmul`` makes a batched operand C-contiguous before it calls cuBLAS, and writes only into a C-contiguous
result.  An attention head's rows of q, k and v are strided views of their projections, and its product with v
is stored permuted back into the sequence-major layout, so each of those products paid a copy per operand and a
scratch result copied into place.  cuBLAS itself takes any leading dimension, either operand transposed and one
stride between the matrices of a batch: ``strided_call`` works out those arguments from the factor loads'
coefficients, or says None where one matrix has no unit stride or a group of axes no single stride.

cuBLAS is column-major.  A row-major result ``C[m, n]`` whose n axis has unit stride is the column-major
``C^T = B^T A^T``; one whose m axis has unit stride is the column-major ``C = A B``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from engine.kernel.ir import Load

MAX_INT = 2**31 - 1
"""cuBLAS's sizes and leading dimensions are 32-bit ints."""


@dataclass(frozen=True)
class Matrix:
    """One matrix argument: a batch of column-major matrices at ``offset`` elements into buffer ``input`` (None:
    the output), ``ld`` apart by column, ``batch_stride`` apart by matrix, stored transposed or not."""

    input: int | None
    offset: int
    transposed: bool
    ld: int
    batch_stride: int


@dataclass(frozen=True)
class StridedCall:
    """``x = op(p) @ op(q)`` for each of ``batch`` matrices: ``x`` is ``rows x cols``, the sum runs over ``depth``."""

    rows: int
    cols: int
    depth: int
    batch: int
    p: Matrix
    q: Matrix
    x: Matrix

    def describe(self) -> str:
        """The call as the source pane shows it."""
        def arg(name: str, m: Matrix) -> str:
            what = "out" if m.input is None else f"in{m.input}"
            return f"{name}={what}+{m.offset}{'ᵀ' if m.transposed else ''} ld {m.ld} stride {m.batch_stride}"
        return (f"cublasSgemmStridedBatched {self.batch} x ({self.rows} x {self.depth}) @ ({self.depth} x {self.cols}), "
                f"column-major: {arg('A', self.p)}, {arg('B', self.q)}, {arg('C', self.x)}")


def _merged(sizes: Sequence[int], strides: Sequence[int], axes: Sequence[int]) -> tuple[int, int] | None:
    """Size and stride of ``axes`` (row-major, the last fastest) read as one axis; None when their strides do not
    nest.  Size-1 axes take no part; no axis at all is size 1 at stride 0."""
    live = [i for i in axes if sizes[i] > 1]
    for outer, inner in itertools.pairwise(live):
        if strides[outer] != strides[inner] * sizes[inner]:
            return None
    return math.prod(sizes[i] for i in live), (strides[live[-1]] if live else 0)


def _matrix(input: int | None, offset: int, shape: tuple[int, int], strides: tuple[int, int],
            batch_stride: int) -> Matrix | None:
    """A ``rows x cols`` matrix read at ``strides`` (row step, column step) as cuBLAS stores it: column-major
    (unit row step, ``ld`` the column step) or transposed (unit column step, ``ld`` the row step); ``ld`` is at
    least the stored column's length, as cuBLAS requires."""
    (rows, cols), (rs, cs) = shape, strides
    if rows == 1:
        rs = 1
    if cols == 1:
        cs = max(rows, 1)
    if rs == 1 and cs >= max(rows, 1):
        return Matrix(input, offset, False, cs, batch_stride)
    if input is not None and cs == 1 and rs >= max(cols, 1):
        return Matrix(input, offset, True, rs, batch_stride)
    return None


def strided_call(sizes: Sequence[int], a: Load, b: Load, out_strides: Sequence[int], batch: Sequence[int],
                 m: Sequence[int], n: Sequence[int], k: Sequence[int], axes: Sequence[object]) -> StridedCall | None:
    """The one strided-batched call computing ``out[batch, m, n] = sum_k a[batch, m, k] * b[batch, k, n]``.

    ``sizes`` and ``axes`` are the split kernel's axes (global, then reduce); ``a`` and ``b`` read them at their
    index coefficients; ``out_strides`` are the output's strides over the global axes.  Where the m or n axes
    have no single stride in the output (a projection stored head-major: ``q[h, s, d]`` from ``x @ wq``, whose
    n axes ``h, d`` are one axis of ``wq``), the outer ones become batch axes the other operand reads at stride 0.
    None where cuBLAS cannot read a matrix in place (no unit stride, a group of axes with no single stride, a
    negative or too large one).
    """
    sa, sb = ([load.index.coefficient(v) for v in axes] for load in (a, b))  # type: ignore[arg-type]
    so = list(out_strides) + [0] * (len(sizes) - len(out_strides))
    if min(sa + sb) < 0 or a.index.const < 0 or b.index.const < 0:
        return None
    splits = [((), ())] + [(tuple(m[:j]), ()) for j in range(1, len(m))] + [((), tuple(n[:j])) for j in range(1, len(n))]
    for outer_m, outer_n in splits:
        call = _call(sizes, (sa, sb, so), a, b, (*batch, *outer_m, *outer_n), m[len(outer_m):], n[len(outer_n):], k)
        if call is not None:
            return call
    return None


def _call(sizes: Sequence[int], strides: tuple[list[int], list[int], list[int]], a: Load, b: Load,
          batch: Sequence[int], m: Sequence[int], n: Sequence[int], k: Sequence[int]) -> StridedCall | None:
    """``strided_call`` with these axes as batch, m, n and k (``strides``: a's, b's and the output's)."""
    sa, sb, so = strides
    merged = [_merged(sizes, s, group) for s, group in
              ((sa, batch), (sa, m), (sa, k), (sb, batch), (sb, k), (sb, n), (so, batch), (so, m), (so, n))]
    if any(g is None for g in merged):
        return None
    (nbatch, bsa), (size_m, msa), (size_k, ksa), (_, bsb), (_, ksb), (size_n, nsb), (_, bso), (_, mso), (_, nso) = (
        g for g in merged if g is not None)
    if max(size_m, size_n, size_k, nbatch) > MAX_INT:
        return None
    if nso == 1 or size_n == 1:  # C^T (n x m) = B^T (n x k) @ A^T (k x m)
        shape = (size_n, size_m)
        x = _matrix(None, 0, shape, (nso, mso), bso)
        p = _matrix(b.input, b.index.const, (size_n, size_k), (nsb, ksb), bsb)
        q = _matrix(a.input, a.index.const, (size_k, size_m), (ksa, msa), bsa)
    else:  # C (m x n) = A (m x k) @ B (k x n)
        shape = (size_m, size_n)
        x = _matrix(None, 0, shape, (mso, nso), bso)
        p = _matrix(a.input, a.index.const, (size_m, size_k), (msa, ksa), bsa)
        q = _matrix(b.input, b.index.const, (size_k, size_n), (ksb, nsb), bsb)
    if x is None or p is None or q is None or max(x.ld, p.ld, q.ld) > MAX_INT:
        return None
    return StridedCall(shape[0], shape[1], size_k, nbatch, p, q, x)

"""Rules on the primitive form of matmul: ``reduce_sum(mul(expand(a'), expand(b')), k)``.

*Transpose fusion* states ``T(A) @ T(B) = T(B @ A)``: a contraction whose last two
output axes are swapped is the contraction of the swapped operands, transposed.
With the movement rules the inner permutes simplify, so the lowered form of
``T(b @ a)`` and that of ``T(a) @ T(b)`` meet in one class.

*Layout variants* give each operand matrix ``M`` the form ``T(T(M))``: the class
``T(M)`` is a transposed copy a kernel may store, so the contraction can read
``M`` in either layout and extraction picks the cheaper.
"""

from __future__ import annotations

from collections.abc import Iterator

from engine.egraph.egraph import ClassId, EGraph, NodeId
from engine.egraph.pattern import T, TermLike, procedural


def _form(egraph: EGraph, c: int, op: str) -> NodeId | None:
    return next((n for n in egraph.eclass(c).nodes if egraph.node(n).op == op), None)


def _contraction(egraph: EGraph, node: NodeId) -> tuple[tuple[int, ...], tuple[ClassId, ClassId]] | None:
    """(reduced axes, the two operand classes) when ``node`` sums a product of two broadcasts."""
    _, axes, (c,) = egraph.node(node)
    for form in egraph.eclass(c).nodes:
        op, _, args = egraph.node(form)
        if op == "mul" and all(_form(egraph, a, "expand") is not None for a in args):
            return axes, args  # type: ignore[return-value]
    return None


def _swap_last_two(axes: list[int], rank: int) -> tuple[int, ...]:
    perm = list(range(rank))
    perm[axes[-2]], perm[axes[-1]] = perm[axes[-1]], perm[axes[-2]]
    return tuple(perm)


@procedural("transpose-fusion", ("reduce_sum",), depth=2)
def transpose_fusion(egraph: EGraph, node: NodeId) -> Iterator[tuple[NodeId, TermLike]]:
    """T(A) @ T(B) = T(B @ A): swap the last two output axes of a contraction inside it, and outside."""
    out_rank = len(egraph.eclass(node).shape)
    found = _contraction(egraph, node)
    if found is None or out_rank < 2:
        return
    axes, (a, b) = found
    rank = len(egraph.eclass(a).shape)
    kept = [i for i in range(rank) if i not in axes]
    inside = _swap_last_two(kept, rank)
    outside = _swap_last_two(list(range(out_rank)), out_rank)
    swapped = T("mul", T("permute", b, param=inside), T("permute", a, param=inside))
    yield node, T("permute", T("reduce_sum", swapped, param=axes), param=outside)


def _operand_matrix(egraph: EGraph, operand: ClassId) -> ClassId | None:
    """The matrix under an operand's ``expand(reshape(M))``, if it has both dimensions > 1."""
    expand = _form(egraph, operand, "expand")
    reshape = None if expand is None else _form(egraph, egraph.node(expand).children[0], "reshape")
    if reshape is None:
        return None
    matrix = egraph.node(reshape).children[0]
    shape = egraph.eclass(matrix).shape
    return matrix if len(shape) >= 2 and shape[-1] > 1 and shape[-2] > 1 else None


@procedural("matmul-layout", ("reduce_sum",), depth=3)
def matmul_layout(egraph: EGraph, node: NodeId) -> Iterator[tuple[NodeId, TermLike]]:
    """An operand matrix M of a contraction equals T(T(M)), so T(M) may be stored and read transposed."""
    found = _contraction(egraph, node)
    if found is None:
        return
    for operand in found[1]:
        matrix = _operand_matrix(egraph, operand)
        if matrix is not None:
            rank = len(egraph.eclass(matrix).shape)
            swap = _swap_last_two([rank - 2, rank - 1], rank)
            yield matrix, T("permute", T("permute", matrix, param=swap), param=swap)


RULES = [transpose_fusion, matmul_layout]

"""Lowering: expanding ops of the op set into the primitive graph.

``Lowered`` is a Tensor-like handle on a node of a ``PrimGraph``; applying an op
to it runs that op's ``lower`` function at once, so composite ops written with
Tensor methods expand recursively until only primitives remain.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.errors import GraphError
from engine.program.dtypes import DType
from engine.program.opset import OPS
from engine.program.primitives import PrimGraph, PrimNode, Shape
from engine.program.tensor_ops import TensorOps


def apply_op(em: Emitter, op: str, args: Sequence[Lowered], attrs: Mapping[str, Any]) -> Lowered:
    """Lower one op onto ``em``'s graph; user mistakes raise a GraphError (location relative to the node)."""
    spec = OPS.get(op)
    if spec is None:
        raise GraphError(f"unknown op {op!r}", "op")
    lo, hi = spec.arity
    if not lo <= len(args) <= hi:
        wanted = str(lo) if lo == hi else f"{lo} to {hi}"
        raise GraphError(f"op {op!r} takes {wanted} tensor argument(s), got {len(args)}", "args")
    return spec.lower(em, *args, **spec.complete(attrs))


@dataclass(frozen=True)
class Emitter:
    """Appends primitives to one graph and hands out handles to them."""

    graph: PrimGraph

    def emit(self, op: str, args: Sequence[Lowered], param: Any = None, dtype: DType | None = None) -> Lowered:
        return Lowered(self, self.graph.emit(op, tuple(a.index for a in args), param, dtype))

    def const(self, value: bool | int | float, dtype: DType) -> Lowered:
        """A scalar constant, its value rounded to what ``dtype`` holds."""
        return self.emit("const", (), dtype.scalar(value), dtype)

    def leaf(self, name: str, shape: Shape, dtype: DType) -> Lowered:
        return Lowered(self, self.graph.leaf(name, shape, dtype))


@dataclass(frozen=True, eq=False)
class Lowered(TensorOps):
    """A handle on one primitive node; ops applied to it are lowered immediately."""

    em: Emitter
    index: int

    @property
    def node(self) -> PrimNode:
        return self.em.graph.nodes[self.index]

    @property
    def shape(self) -> Shape:  # type: ignore[override]
        return self.node.shape

    @property
    def dtype(self) -> DType:  # type: ignore[override]
        return self.node.dtype

    def _apply(self, op: str, args: tuple[Lowered, ...], attrs: dict[str, Any]) -> Lowered:
        return apply_op(self.em, op, args, attrs)


def infer(op: str, args: Sequence[tuple[Shape, DType]], attrs: Mapping[str, Any]) -> tuple[Shape, DType]:
    """Shape and dtype of ``op`` applied to arguments of the given types (by lowering it on scratch)."""
    em = Emitter(PrimGraph())
    handles = [em.leaf(f"arg{i}", shape, dtype) for i, (shape, dtype) in enumerate(args)]
    out = apply_op(em, op, handles, attrs)
    return out.shape, out.dtype

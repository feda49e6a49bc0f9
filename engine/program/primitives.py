"""The primitive op set and the primitive graph every later stage works on.

Ten kinds of node (the zyx/tinygrad set): ``const``, ``leaf``, four movement ops
(``expand``, ``permute``, ``reshape``, ``pad``), two reduces (``sum``, ``max``),
``cast``, and the elementwise unary and binary ops.  Each node carries one
hashable parameter (its ``param``):

=========  =====================================================
op         param
=========  =====================================================
const      the scalar value (shape ``()``; broadcast with expand)
leaf       the input's name
expand     target shape (same rank; only size-1 axes grow)
permute    axis order
reshape    target shape (same number of elements)
pad        ``((before, after), ...), value``; negative amounts shrink
reduce_*   reduced axes, sorted; they are removed from the shape
cast       target DType
unary      None
binary     None (both operands have the same shape and dtype)
=========  =====================================================
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from engine.program.dtypes import DType

Shape = tuple[int, ...]

UNARY_OPS = ("neg", "relu", "exp2", "log2", "sin", "cos", "sqrt", "recip", "not")
ARITHMETIC_OPS = ("add", "sub", "mul", "div", "pow", "max")
COMPARE_OPS = ("cmplt", "cmpgt", "eq", "noteq")
LOGIC_OPS = ("and", "or")
BINARY_OPS = ARITHMETIC_OPS + COMPARE_OPS + LOGIC_OPS
MOVEMENT_OPS = ("expand", "permute", "reshape", "pad")
REDUCE_OPS = ("reduce_sum", "reduce_max")
PRIMITIVE_OPS = ("const", "leaf", *MOVEMENT_OPS, *REDUCE_OPS, "cast", *UNARY_OPS, *BINARY_OPS)


@dataclass(frozen=True)
class PrimNode:
    """One primitive operation; ``args`` index earlier nodes of the same graph."""

    op: str
    args: tuple[int, ...]
    param: Any
    shape: Shape
    dtype: DType

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass
class PrimGraph:
    """Primitive nodes in topological order, with named inputs (leaves) and outputs."""

    nodes: list[PrimNode] = field(default_factory=list)
    outputs: dict[str, int] = field(default_factory=dict)
    origins: list[str] = field(default_factory=list)
    """For each node, the program tensor (node id or input name) whose lowering made it."""
    tensors: dict[str, tuple[int, str]] = field(default_factory=dict)
    """Each live program tensor: (the node holding its value, its program op or ``input``)."""

    def leaves(self) -> dict[str, int]:
        """Input name -> node index of its leaf."""
        return {n.param: i for i, n in enumerate(self.nodes) if n.op == "leaf"}

    def leaf(self, name: str, shape: Shape, dtype: DType) -> int:
        """Append the leaf of input ``name`` and return its index."""
        self.nodes.append(PrimNode("leaf", (), name, tuple(shape), dtype))
        return len(self.nodes) - 1

    def emit(self, op: str, args: tuple[int, ...] = (), param: Any = None, dtype: DType | None = None) -> int:
        """Append a primitive node (shape and dtype inferred) and return its index.

        Arguments are assumed valid: user input is checked before lowering, so a
        failure here is an internal bug and raises AssertionError.
        """
        shape, out_dtype = infer(op, [self.nodes[a] for a in args], param, dtype)
        self.nodes.append(PrimNode(op, tuple(args), param, shape, out_dtype))
        return len(self.nodes) - 1


def infer(op: str, args: list[PrimNode], param: Any, dtype: DType | None) -> tuple[Shape, DType]:
    """Shape and dtype of a primitive node, asserting the strict primitive rules."""
    if op == "const":
        assert dtype is not None and not args
        return (), dtype
    (x, *rest) = args
    if op in UNARY_OPS:
        return x.shape, x.dtype
    if op in BINARY_OPS:
        (y,) = rest
        assert x.shape == y.shape and x.dtype == y.dtype, (op, x.shape, y.shape, x.dtype, y.dtype)
        return x.shape, (DType.BOOL if op in COMPARE_OPS else x.dtype)
    if op == "cast":
        return x.shape, param
    if op in REDUCE_OPS:
        assert list(param) == sorted(set(param)) and all(0 <= a < len(x.shape) for a in param), param
        return tuple(d for i, d in enumerate(x.shape) if i not in param), x.dtype
    if op == "expand":
        assert len(param) == len(x.shape) and all(a in (1, b) for a, b in zip(x.shape, param)), (x.shape, param)
        return tuple(param), x.dtype
    if op == "permute":
        assert sorted(param) == list(range(len(x.shape))), param
        return tuple(x.shape[a] for a in param), x.dtype
    if op == "reshape":
        assert math.prod(param) == x.numel and all(d >= 0 for d in param), (x.shape, param)
        return tuple(param), x.dtype
    if op == "pad":
        pads, _value = param
        assert len(pads) == len(x.shape)
        shape = tuple(d + lo + hi for d, (lo, hi) in zip(x.shape, pads))
        assert all(d >= 0 for d in shape), (x.shape, pads)
        return shape, x.dtype
    raise AssertionError(f"unknown primitive op {op!r}")

"""The lazy builder API: ``Tensor`` records ops; ``from_tensors`` collects them into a Program.

>>> x = Tensor.input("x", (4, 8))
>>> w = Tensor.input("w", (8, 2), init=Init.uniform(seed=1))
>>> y = (x @ w).relu().named("y")
>>> program = from_tensors([y])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from engine.errors import TensorNameError
from engine.program.dtypes import DType
from engine.program.init import Init
from engine.program.lowering import infer
from engine.program.opset import OPS
from engine.program.primitives import Shape
from engine.program.program import Input, Node, Program
from engine.program.tensor_ops import TensorOps


@dataclass(frozen=True, eq=False)
class Tensor(TensorOps):
    """A lazy tensor: an op applied to other tensors, or an input (``op == "input"``)."""

    op: str
    args: tuple[Tensor, ...]
    attrs: Mapping[str, Any]
    shape: Shape
    dtype: DType
    name: str | None = None
    init: Init | None = None

    @staticmethod
    def input(name: str, shape: Sequence[int], dtype: DType | str = DType.F32, init: Init | None = None) -> Tensor:
        """A program input; by default standard normal, seeded from its name."""
        dtype = DType.parse(dtype) if isinstance(dtype, str) else dtype
        return Tensor("input", (), {}, tuple(shape), dtype, name, init or Init.for_name(name))

    def named(self, name: str) -> Tensor:
        """This tensor under a given name (its node id in graph.json)."""
        if self.op == "input":
            raise TensorNameError(f"input {self.name!r} cannot be renamed")
        return replace(self, name=name)

    def _apply(self, op: str, args: tuple[Tensor, ...], attrs: dict[str, Any]) -> Tensor:
        complete = OPS[op].complete(attrs)
        shape, dtype = infer(op, [(a.shape, a.dtype) for a in args], complete)
        return Tensor(op, tuple(args), complete, shape, dtype)

    def __repr__(self) -> str:
        return f"Tensor({self.name or self.op}, shape={list(self.shape)}, dtype={self.dtype})"


def _topological(outputs: Sequence[Tensor]) -> list[Tensor]:
    """All tensors the outputs depend on, each after its arguments (iterative: graphs can be deep)."""
    order: list[Tensor] = []
    done: set[int] = set()
    stack: list[tuple[Tensor, bool]] = [(t, False) for t in reversed(outputs)]
    while stack:
        t, expanded = stack.pop()
        if id(t) in done:
            continue
        if expanded:
            done.add(id(t))
            order.append(t)
            continue
        stack.append((t, True))
        stack.extend((a, False) for a in reversed(t.args) if id(a) not in done)
    return order


def from_tensors(outputs: Sequence[Tensor] | Mapping[str, Tensor], name: str = "", description: str = "") -> Program:
    """The Program computing ``outputs`` (a list of named tensors, or name -> tensor)."""
    if isinstance(outputs, Mapping):
        outputs = [t if t.name == n else t.named(n) for n, t in outputs.items()]
    order = _topological(outputs)
    names: dict[int, str] = {}
    owner: dict[str, Tensor] = {}
    for t in order:
        if t.name is not None:
            if t.name in owner and owner[t.name] is not t:
                raise TensorNameError(f"two different tensors are both named {t.name!r}")
            owner[t.name] = t
            names[id(t)] = t.name
    counter = 0
    for t in order:
        if id(t) not in names:
            while f"t{counter}" in owner:
                counter += 1
            names[id(t)] = f"t{counter}"
            owner[names[id(t)]] = t
    inputs = tuple(Input(t.name, t.shape, t.dtype, t.init) for t in order if t.op == "input")
    nodes = tuple(
        Node(names[id(t)], t.op, tuple(names[id(a)] for a in t.args), t.attrs, t.shape, t.dtype)
        for t in order
        if t.op != "input"
    )
    out_names = tuple(names[id(t)] for t in outputs)
    if len(set(out_names)) != len(out_names):
        raise TensorNameError(f"the same tensor is listed twice among the outputs {list(out_names)}")
    return Program(inputs, nodes, out_names, name, description)

"""Program: a validated tensor program (inputs, op nodes, outputs), and its lowering."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engine.errors import GraphError
from engine.program.attrs import to_json_value
from engine.program.dtypes import DType
from engine.program.init import Init
from engine.program.lowering import Emitter, Lowered, apply_op
from engine.program.opset import OPS
from engine.program.primitives import PrimGraph, Shape

FORMAT_VERSION = 1


@dataclass(frozen=True)
class Input:
    """A named input tensor and how its value is produced."""

    name: str
    shape: Shape
    dtype: DType
    init: Init

    def value(self) -> np.ndarray:
        """The initial value; a GraphError at ``inputs.<name>.init`` if it cannot be made (a replaced .npy file)."""
        try:
            return self.init.materialize(self.shape, self.dtype)
        except GraphError as e:
            raise e.within(f"inputs.{self.name}.init") from None


@dataclass(frozen=True)
class Node:
    """One op application; ``args`` name inputs or earlier nodes, ``attrs`` are complete and canonical."""

    id: str
    op: str
    args: tuple[str, ...]
    attrs: Mapping[str, Any]
    shape: Shape
    dtype: DType


@dataclass(frozen=True)
class Program:
    """Inputs, nodes in dependency order, and the names of the outputs."""

    inputs: tuple[Input, ...]
    nodes: tuple[Node, ...]
    outputs: tuple[str, ...]
    name: str = ""
    description: str = ""
    base_dir: Path | None = field(default=None, compare=False)

    def types(self) -> dict[str, tuple[Shape, DType]]:
        """Every tensor name -> (shape, dtype)."""
        out = {i.name: (i.shape, i.dtype) for i in self.inputs}
        out.update((n.id, (n.shape, n.dtype)) for n in self.nodes)
        return out

    def input_values(self) -> dict[str, np.ndarray]:
        return {i.name: i.value() for i in self.inputs}

    def parameter_bytes(self) -> int:
        return sum(math.prod(i.shape) * i.dtype.itemsize for i in self.inputs)

    def live_nodes(self) -> tuple[Node, ...]:
        """The nodes the outputs depend on, in order."""
        needed = set(self.outputs)
        for node in reversed(self.nodes):
            if node.id in needed:
                needed.update(node.args)
        return tuple(n for n in self.nodes if n.id in needed)

    def lower(self) -> PrimGraph:
        """The primitive graph computing the outputs (dead nodes dropped)."""
        em = Emitter(PrimGraph())
        env: dict[str, Lowered] = {i.name: em.leaf(i.name, i.shape, i.dtype) for i in self.inputs}
        origins = [i.name for i in self.inputs]
        for node in self.live_nodes():
            env[node.id] = apply_op(em, node.op, [env[a] for a in node.args], node.attrs)
            origins += [node.id] * (len(em.graph.nodes) - len(origins))
        em.graph.outputs = {name: env[name].index for name in self.outputs}
        em.graph.origins = origins
        ops = {n.id: n.op for n in self.nodes}
        em.graph.tensors = {name: (v.index, ops.get(name, "input")) for name, v in env.items()}
        return em.graph

    def to_json(self) -> dict[str, Any]:
        """The graph.json document of this program (attributes at their defaults are left out)."""
        doc: dict[str, Any] = {"version": FORMAT_VERSION}
        if self.name:
            doc["name"] = self.name
        if self.description:
            doc["description"] = self.description
        doc["inputs"] = {
            i.name: {"shape": list(i.shape), "dtype": i.dtype.value, "init": i.init.to_json(self.base_dir)}
            for i in self.inputs
        }
        doc["nodes"] = [_node_json(n) for n in self.nodes]
        doc["outputs"] = list(self.outputs)
        return doc

    def dumps(self) -> str:
        """graph.json text: indented, with short lists kept on one line."""
        return _compact_dumps(self.to_json()) + "\n"


def _node_json(node: Node) -> dict[str, Any]:
    spec = OPS[node.op]
    out: dict[str, Any] = {"id": node.id, "op": node.op}
    if node.args:
        out["args"] = list(node.args)
    attrs = {k: to_json_value(v) for k, v in node.attrs.items() if v != spec.attrs[k].default or spec.attrs[k].required}
    if attrs:
        out["attrs"] = attrs
    return out


def _compact_dumps(value: Any, indent: int = 0) -> str:
    """JSON with objects and long lists broken over lines, short scalar lists inline."""
    pad, inner = "  " * indent, "  " * (indent + 1)
    flat = json.dumps(value)
    if not isinstance(value, dict | list) or len(flat) + len(pad) <= 100:
        return flat
    if isinstance(value, dict):
        items = [f"{inner}{json.dumps(k)}: {_compact_dumps(v, indent + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + pad + "}"
    items = [f"{inner}{_compact_dumps(v, indent + 1)}" for v in value]
    return "[\n" + ",\n".join(items) + "\n" + pad + "]"

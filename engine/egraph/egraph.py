"""The e-graph: hashconsed e-nodes grouped into e-classes by a union-find.

Every added e-node gets a ``NodeId`` (its index); the union-find runs over the
same ids, so the class of a node is ``find(node_id)`` and a ``ClassId`` is the
id of the class's root node.  ``union`` merges two classes and records *why*
(the rule, or congruence) as an edge between the two e-nodes that were proved
equal; those edges form the proof forest that ``engine.egraph.explain`` walks.
As in egg, congruence is restored lazily: ``union`` only queues work and
``rebuild`` re-canonicalises the parents of merged classes, merging any that
became identical.

Each class keeps its shape, dtype and one analysis, ``splat``: the scalar every
element equals, when that is known (constants, broadcasts of constants, and
elementwise ops on them).  Constant folding reads it.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from engine.program.dtypes import DType
from engine.program.primitives import BINARY_OPS, UNARY_OPS, PrimNode, Shape, infer
from engine.program.reference import eval_node

ClassId = int
NodeId = int
CONGRUENCE = "congruence"
ATTACHED_OPS = ("kernel", "to_device")
"""Ops that compute a class by running something (a kernel, a transfer); their param carries shape and dtype."""


class EGraphError(AssertionError):
    """An e-graph invariant would break (e.g. merging classes of different shapes): a bug in a rule."""


@dataclass(frozen=True, eq=False)
class Scalar:
    """The value of a ``const`` node; equal only to the same bits of the same dtype (so -0.0 != 0.0)."""

    value: bool | int | float
    dtype: DType
    bits: bytes = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "bits", np.asarray(self.value, self.dtype.numpy).tobytes())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Scalar) and other.dtype == self.dtype and other.bits == self.bits

    def __hash__(self) -> int:
        return hash((self.dtype, self.bits))

    def __str__(self) -> str:
        return repr(self.value)

    def array(self) -> np.ndarray:
        return np.asarray(self.value, self.dtype.numpy)

    @staticmethod
    def of(array: np.ndarray, dtype: DType) -> Scalar:
        """The scalar held by a 0-d (or one-element) array, rounded to ``dtype``."""
        with np.errstate(all="ignore"):
            return Scalar(np.asarray(array).astype(dtype.numpy).reshape(()).item(), dtype)


class ENode(NamedTuple):
    """An operation on e-classes: a primitive op, its parameter, and child class ids."""

    op: str
    param: Hashable
    children: tuple[ClassId, ...]


class Union(NamedTuple):
    """One merge: the e-nodes proved equal, and why (a rule name or ``CONGRUENCE``)."""

    a: NodeId
    b: NodeId
    reason: str


@dataclass(eq=False)
class EClass:
    """A set of equivalent e-nodes (its ``nodes``: distinct forms, oldest first)."""

    id: ClassId
    shape: Shape
    dtype: DType
    nodes: list[NodeId]
    parents: list[NodeId]
    splat: Scalar | None = None

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


class EGraph:
    """Hashconsed e-nodes, classes, a union-find, and the event log of everything that happened."""

    def __init__(self) -> None:
        self._nodes: list[ENode] = []  # each node as added (children canonical at the time)
        self._key: list[ENode] = []  # each node's current canonical form
        self._parent: list[int] = []  # union-find over node ids
        self._classes: dict[ClassId, EClass] = {}
        self._memo: dict[ENode, NodeId] = {}
        self._pending: list[ClassId] = []
        self._changed: set[ClassId] = set()  # classes made, merged or given a splat since take_changes()
        self._proof: list[list[tuple[NodeId, int]]] = []  # per node: (node proved equal, index in unions)
        self.unions: list[Union] = []
        self.outputs: dict[str, NodeId] = {}
        """Program output name -> a node of the class that computes it."""
        self.leaf_types: dict[str, tuple[Shape, DType]] = {}
        """Shape and dtype of each program input (a leaf node's parameter is the input's name)."""
        self.origins: dict[NodeId, str] = {}
        """For nodes made by lowering: the program tensor (node id or input name) they came from."""
        self.tensors: dict[str, tuple[NodeId, str]] = {}
        """Each program tensor the outputs need: (a node of the class holding its value, its program op)."""

    # -- reading ---------------------------------------------------------------------------

    def find(self, i: int) -> ClassId:
        """The class id of node (or class) ``i``."""
        parent = self._parent
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def eclass(self, i: int) -> EClass:
        return self._classes[self.find(i)]

    def classes(self) -> Iterator[EClass]:
        return iter(self._classes.values())

    def node(self, n: NodeId) -> ENode:
        """Node ``n`` with canonical children."""
        if not self._pending:
            return self._key[n]  # every key is canonical after rebuild
        op, param, children = self._key[n]
        return ENode(op, param, tuple(self.find(c) for c in children))

    def raw_node(self, n: NodeId) -> ENode:
        """Node ``n`` exactly as it was added."""
        return self._nodes[n]

    def lookup(self, op: str, children: Sequence[int] = (), param: Hashable = None) -> NodeId | None:
        """The existing node ``op(children)`` with ``param``, if there is one."""
        return self._memo.get(ENode(op, param, tuple(self.find(c) for c in children)))

    def output_classes(self) -> dict[str, ClassId]:
        return {name: self.find(n) for name, n in self.outputs.items()}

    @property
    def num_nodes(self) -> int:
        """Distinct e-nodes (congruent duplicates counted once)."""
        return len(self._memo)

    @property
    def num_classes(self) -> int:
        return len(self._classes)

    @property
    def num_added(self) -> int:
        """Every node ever added, duplicates included: the length of the node event log."""
        return len(self._nodes)

    def proof_edges(self, n: NodeId) -> list[tuple[NodeId, int]]:
        """The nodes ``n`` was directly proved equal to, with the index of that union."""
        return self._proof[n]

    def describe(self, n: NodeId, raw: bool = False) -> str:
        """One node as text, e.g. ``permute[1, 0](c12)``; ``raw``: with its children as they were when added."""
        op, param, children = self._nodes[n] if raw else self.node(n)
        if param is None:
            head = op
        elif isinstance(param, tuple):
            head = f"{op}{list(param)}" if op != "pad" else f"{op}{[list(p) for p in param[0]]}={param[1]}"
        else:
            head = f"{op}[{param}]"
        return head + ("(" + ", ".join(f"c{c}" for c in children) + ")" if children else "")

    # -- changing --------------------------------------------------------------------------

    def add(self, op: str, children: Sequence[int] = (), param: Hashable = None) -> NodeId:
        """Add ``op(children)`` (or find it, if an equal node exists) and return its node id."""
        node = ENode(op, param, tuple(self.find(c) for c in children))
        existing = self._memo.get(node)
        return existing if existing is not None else self._push(node)

    def leaf(self, name: str, shape: Shape, dtype: DType) -> NodeId:
        """The leaf of program input ``name``."""
        if self.leaf_types.setdefault(name, (tuple(shape), dtype)) != (tuple(shape), dtype):
            raise EGraphError(f"input {name!r} given two types")
        return self.add("leaf", (), name)

    def const(self, value: bool | int | float, dtype: DType) -> NodeId:
        return self.add("const", (), Scalar(value, dtype))

    def splat(self, scalar: Scalar, shape: Shape) -> NodeId:
        """``scalar`` broadcast to ``shape`` in the lowering's form: const -> reshape to ones -> expand."""
        n = self.add("const", (), scalar)
        if shape:
            ones = (1,) * len(shape)
            n = self.add("reshape", (n,), ones)
            if shape != ones:
                n = self.add("expand", (n,), tuple(shape))
        return n

    def attach(self, c: ClassId, op: str, param: Hashable, children: Sequence[int], reason: str) -> NodeId:
        """Add an ``ATTACHED_OPS`` node (its param has ``shape`` and ``dtype``) to class ``c``, proved by ``reason``."""
        assert op in ATTACHED_OPS, op
        n = self.add(op, children, param)
        self.union(c, n, reason)
        return n

    def union(self, a: NodeId, b: NodeId, reason: str) -> bool:
        """Merge the classes of nodes ``a`` and ``b`` (proved equal by ``reason``); False if already one."""
        ca, cb = self.find(a), self.find(b)
        if ca == cb:
            return False
        big, small = self._classes[ca], self._classes[cb]
        if (big.shape, big.dtype) != (small.shape, small.dtype):
            raise EGraphError(
                f"{reason}: cannot merge c{ca} {list(big.shape)} {big.dtype} with c{cb} {list(small.shape)} {small.dtype}"
            )
        if len(big.parents) < len(small.parents):
            big, small = small, big
        self._parent[small.id] = big.id
        big.nodes += small.nodes
        big.parents += small.parents
        big.splat = big.splat or small.splat
        del self._classes[small.id]
        self._pending.append(big.id)
        self._changed.add(big.id)
        index = len(self.unions)
        self.unions.append(Union(a, b, reason))
        self._proof[a].append((b, index))
        self._proof[b].append((a, index))
        return True

    def rebuild(self) -> None:
        """Restore congruence (and propagate the splat analysis) after unions."""
        touched: set[ClassId] = set()
        while self._pending:
            todo = {self.find(c) for c in self._pending}
            self._pending.clear()
            for c in todo:
                touched.add(c)
                touched.update(self._repair(c))
        for c in {self.find(c) for c in touched}:
            cls = self._classes[c]
            cls.nodes = [n for n in dict.fromkeys(cls.nodes) if self._memo.get(self._key[n]) == n]
            cls.parents = list(dict.fromkeys(cls.parents))

    def take_changes(self) -> set[ClassId]:
        """The classes made, merged or given a splat since the last call (canonical ids)."""
        changed = {self.find(c) for c in self._changed}
        self._changed.clear()
        return changed

    @property
    def clean(self) -> bool:
        """True when no union awaits ``rebuild``."""
        return not self._pending

    def prefix(self, num_added: int, num_unions: int) -> EGraph:
        """The e-graph as it was after its first ``num_added`` nodes and ``num_unions`` unions (rebuilt)."""
        past = EGraph()
        past.leaf_types = dict(self.leaf_types)
        for node in self._nodes[:num_added]:
            past._push(node)
        for a, b, reason in self.unions[:num_unions]:
            past.union(a, b, reason)
        past.rebuild()
        past.outputs = {k: v for k, v in self.outputs.items() if v < num_added}
        past.origins = {k: v for k, v in self.origins.items() if k < num_added}
        past.tensors = {k: v for k, v in self.tensors.items() if v[0] < num_added}
        return past

    # -- internals -------------------------------------------------------------------------

    def _push(self, node: ENode) -> NodeId:
        child_classes = [self._classes[c] for c in node.children]
        if node.op == "const":
            shape, dtype = (), node.param.dtype
        elif node.op == "leaf":
            shape, dtype = self.leaf_types[node.param]
        elif node.op in ATTACHED_OPS:
            shape, dtype = node.param.shape, node.param.dtype  # type: ignore[attr-defined]
        else:
            shape, dtype = infer(node.op, child_classes, node.param, None)  # type: ignore[arg-type]
        n = len(self._nodes)
        self._nodes.append(node)
        self._key.append(node)
        self._parent.append(n)
        self._proof.append([])
        self._memo[node] = n
        self._classes[n] = EClass(n, shape, dtype, [n], [], _splat(node, child_classes, shape, dtype))
        self._changed.add(n)
        for c in dict.fromkeys(node.children):
            self._classes[c].parents.append(n)
        return n

    def _repair(self, c: ClassId) -> list[ClassId]:
        """Re-canonicalise the parents of class ``c``; returns the classes they belong to."""
        owners = []
        for p in list(self._classes[self.find(c)].parents):
            old = self._key[p]
            new = ENode(old.op, old.param, tuple(self.find(x) for x in old.children))
            owner = self.find(p)
            owners.append(owner)
            if new != old:
                if self._memo.get(old) == p:
                    del self._memo[old]
                self._key[p] = new
                other = self._memo.setdefault(new, p)
                if other != p and self.union(other, p, CONGRUENCE):
                    owner = self.find(p)
            cls = self._classes[owner]
            if cls.splat is None:  # the union above may have merged a child of ``new`` (relu(relu(x)) = relu(x))
                cls.splat = _splat(new, [self._classes[self.find(x)] for x in new.children], cls.shape, cls.dtype)
                if cls.splat is not None:
                    self._pending.append(owner)
                    self._changed.add(owner)
        return owners


_SPLAT_PRESERVING = ("expand", "reshape", "permute")


def _splat(node: ENode, children: list[EClass], shape: Shape, dtype: DType) -> Scalar | None:
    """The scalar every element of ``node`` equals, when its children's splats decide it."""
    op, param = node.op, node.param
    if op == "const":
        return param  # type: ignore[return-value]
    if not children or any(c.splat is None for c in children):
        return None
    first = children[0].splat
    assert first is not None
    if op in _SPLAT_PRESERVING:
        return first
    if op == "pad":
        pads, value = param  # type: ignore[misc]
        grows = any(lo > 0 or hi > 0 for lo, hi in pads)
        return first if not grows or Scalar(value, dtype) == first else None
    if op == "reduce_max":
        return first
    if op == "reduce_sum":
        count = math.prod(children[0].shape) // max(math.prod(shape), 1)
        return Scalar.of(np.asarray(first.value, np.float64 if dtype.is_float else np.int64) * count, dtype)
    if op in UNARY_OPS or op in BINARY_OPS or op == "cast":
        args = [c.splat.array() for c in children]  # type: ignore[union-attr]
        with np.errstate(all="ignore"):
            value = eval_node(PrimNode(op, (), param, (), dtype), args)
        return Scalar.of(value, dtype)
    return None

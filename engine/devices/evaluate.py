"""A vectorised numpy evaluator of the kernel IR (what the numpy and BLAS devices run).

Every loop variable gets its own array axis: the kernel's global ``vars`` first,
then the reduce ``vars``, so a variable's values are a broadcastable
``arange``.  An affine, unclamped ``Load`` is read through a zero-copy
``as_strided`` view of its input (the coefficient of each variable is its
stride; a variable the index does not use gets a size-1, stride-0 axis), any
other load gathers with ``np.take``.  Every node's value therefore only spans
the axes it depends on, which hoists loop-invariant work for free.  ``Op``
nodes run ``engine.program.reference.eval_node`` and are rounded to their
dtype after every op, exactly as the reference interpreter does.

The iteration space is evaluated in chunks (``Plan``) so that no intermediate
exceeds ``max_elements`` elements, reduce axes included.  Chunks split the
global axes first, which never changes a result; only a reduce too large for
one chunk is split too, and then a float sum adds its chunks' partial sums
(still in at least float32) and may round differently.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from engine.kernel.index import Div, Idx, Mod, Var
from engine.kernel.ir import Acc, Const, Expr, Kernel, Load, Op, Where, schedule
from engine.program.dtypes import DType
from engine.program.primitives import PrimNode
from engine.program.reference import eval_node, widen

MAX_ELEMENTS = 1 << 22
"""Default bound on the elements of any intermediate array (32 MiB of float64)."""

Block = tuple[int, int]
"""``(start, length)`` of one chunk along one axis."""

Value = np.ndarray


@dataclass(frozen=True)
class Plan:
    """A kernel prepared for evaluation: node schedules, axes of its variables, chunks per axis."""

    kernel: Kernel
    axes: dict[Var, int]
    """Axis of each variable: global vars ``0 .. n-1``, then the reduce vars."""
    body: tuple[Expr, ...]
    """The reduce body's nodes, children first (empty without a reduce)."""
    outputs: tuple[Expr, ...]
    """The output expressions' nodes, children first."""
    global_blocks: tuple[tuple[Block, ...], ...]
    """For each global axis, the blocks a chunk takes along it."""
    reduce_blocks: tuple[tuple[Block, ...], ...]
    """For each reduce axis, the blocks a chunk takes along it."""

    @property
    def ndim(self) -> int:
        return len(self.axes)

    @property
    def reduce_axes(self) -> tuple[int, ...]:
        return tuple(range(len(self.kernel.vars), self.ndim))

    def chunks(self) -> Iterator[tuple[Block, ...]]:
        """The global part of every chunk, in order."""
        return itertools.product(*self.global_blocks)

    def whole(self) -> Frame:
        """One frame over the whole iteration space (global and reduce axes; for inspection and tests)."""
        return Frame(self.axes, tuple((0, v.size) for v in self.axes))


def plan(kernel: Kernel, max_elements: int = MAX_ELEMENTS, chunk_reduce: bool = True) -> Plan:
    """Prepare ``kernel``; with ``chunk_reduce=False`` reduce axes are never split (a library computes them)."""
    assert max_elements >= 1
    assert tuple(v.size for v in kernel.vars) == tuple(kernel.shape), (kernel.vars, kernel.shape)
    rvars = kernel.reduce.vars if kernel.reduce else ()
    axes = {v: i for i, v in enumerate((*kernel.vars, *rvars))}
    assert len(axes) == len(kernel.vars) + len(rvars), "loop variables must be distinct"
    gdims = list(kernel.shape)
    rdims = [v.size for v in rvars]
    if chunk_reduce:
        blocks = _blocks(gdims + rdims, max_elements)
    else:
        blocks = _blocks(gdims, max_elements) + [((0, d),) for d in rdims]
    body = tuple(schedule([kernel.reduce.body])) if kernel.reduce else ()
    return Plan(
        kernel, axes, body, tuple(schedule(kernel.outputs)), tuple(blocks[: len(gdims)]), tuple(blocks[len(gdims) :])
    )


def _blocks(dims: Sequence[int], limit: int) -> list[tuple[Block, ...]]:
    """Per axis, blocks such that a chunk (one block of every axis) holds at most ``limit`` elements.

    The first axis whose trailing axes fit in ``limit`` is split into blocks, the
    axes before it are taken one index at a time and the axes after it whole.
    """
    for k in range(len(dims)):
        rest = math.prod(dims[k + 1 :])
        if rest <= limit:
            break
    else:
        return []
    step = max(1, limit // max(rest, 1))
    out: list[tuple[Block, ...]] = []
    for i, d in enumerate(dims):
        if i < k:
            out.append(tuple((j, 1) for j in range(d)))
        elif i == k:
            out.append(tuple((s, min(step, d - s)) for s in range(0, d, step)))
        else:
            out.append(((0, d),))
    return out


@dataclass
class Frame:
    """One chunk of the iteration space: a ``(start, length)`` block for every axis, with index caches."""

    axes: dict[Var, int]
    blocks: tuple[Block, ...]
    _atoms: dict[object, Value | int] = field(default_factory=dict, repr=False)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(n for _, n in self.blocks)

    def arange(self, v: Var) -> Value:
        """The values of ``v`` in this chunk, along its own axis."""
        axis = self.axes[v]
        start, n = self.blocks[axis]
        shape = [1] * len(self.blocks)
        shape[axis] = n
        return np.arange(start, start + n, dtype=np.int64).reshape(shape)

    def index(self, idx: Idx) -> Value | int:
        """``idx`` evaluated with numpy integer arithmetic (floor division and modulo, as ``Idx`` means)."""
        out: Value | int = idx.const
        for atom, c in idx.terms:
            if atom not in self._atoms:
                if isinstance(atom, Var):
                    self._atoms[atom] = self.arange(atom)
                elif isinstance(atom, Div):
                    self._atoms[atom] = np.floor_divide(self.index(atom.num), atom.k)
                else:
                    assert isinstance(atom, Mod)
                    self._atoms[atom] = np.mod(self.index(atom.num), atom.k)
            out = out + c * self._atoms[atom]
        return out

    def view(self, flat: np.ndarray, idx: Idx, broadcast: bool = False) -> np.ndarray:
        """A zero-copy strided view of ``flat`` at the affine index ``idx`` over this chunk.

        Axes ``idx`` does not use have size 1 (or, with ``broadcast``, their full
        length) and stride 0.  Every index of the chunk must lie inside ``flat``.
        """
        assert idx.is_affine
        offset = idx.const + sum(c * self.blocks[self.axes[v]][0] for v, c in idx.terms)  # type: ignore[index]
        shape, strides = [], []
        for v, axis in sorted(self.axes.items(), key=lambda t: t[1]):
            c = idx.coefficient(v)
            shape.append(self.blocks[axis][1] if c or broadcast else 1)
            strides.append(c * flat.itemsize)
        if math.prod(shape) == 0:
            return np.empty(shape, flat.dtype)
        assert 0 <= offset < flat.size, (idx, offset, flat.size)
        return np.lib.stride_tricks.as_strided(flat[offset:], tuple(shape), tuple(strides), writeable=False)


def _gather(flat: np.ndarray, index: Value | int) -> np.ndarray:
    """Elements of ``flat`` at integer ``index`` (a copy)."""
    return np.asarray(np.take(flat, index))


def read(load: Load, flat: np.ndarray, frame: Frame) -> np.ndarray:
    """The values ``load`` reads over ``frame``: a strided view when its index is affine and unclamped."""
    if load.index.is_affine and not load.clamped:
        return frame.view(flat, load.index)
    index = frame.index(load.index)
    if load.clamped:
        index = np.clip(index, 0, load.size - 1)
    return _gather(flat, index)


def round_to(x: object, dtype: DType) -> np.ndarray:
    """``x`` as an array of ``dtype`` (overflow to inf allowed, as on a device)."""
    with np.errstate(all="ignore"):
        return np.asarray(x).astype(dtype.numpy, copy=False)


def _mask(e: Where, frame: Frame) -> Value | bool:
    mask: Value | bool = True
    for b in e.bounds:
        i = frame.index(b.index)
        mask = mask & (i >= b.lo) & (i < b.hi)
    return mask


def eval_exprs(order: Sequence[Expr], frame: Frame, flats: Sequence[np.ndarray], values: dict[Expr, Value]) -> None:
    """Evaluate the scheduled nodes ``order`` over ``frame`` into ``values`` (which may hold ``Acc``)."""
    for e in order:
        if e in values:
            continue
        if isinstance(e, Load):
            v = read(e, flats[e.input], frame)
        elif isinstance(e, Const):
            v = round_to(e.value.array(), e.dtype)
        elif isinstance(e, Op):
            with np.errstate(all="ignore"):
                result = eval_node(PrimNode(e.op, (), None, (), e.dtype), [values[a] for a in e.args])
            v = round_to(result, e.dtype)
        elif isinstance(e, Where):
            v = round_to(np.where(_mask(e, frame), values[e.then], values[e.otherwise]), e.dtype)
        else:
            raise AssertionError(f"{e} has no value here (an Acc outside the outputs?)")
        values[e] = v


def _identity(op: str, dtype: DType) -> np.ndarray:
    """The value of a reduce over nothing."""
    if op == "sum":
        return np.zeros((), dtype.numpy)
    if dtype.is_float:
        return np.array(-np.inf, dtype.numpy)
    return np.array(np.iinfo(dtype.numpy).min if dtype.is_int else False, dtype.numpy)


def reduce_chunk(p: Plan, chunk: tuple[Block, ...], flats: Sequence[np.ndarray]) -> np.ndarray:
    """The reduce's result over the global ``chunk`` (rounded, reduce axes kept with size 1)."""
    red = p.kernel.reduce
    assert red is not None
    shape = tuple(n for _, n in chunk) + (1,) * len(red.vars)
    if red.size == 0:
        return np.broadcast_to(_identity(red.op, red.dtype), shape)
    total: np.ndarray | None = None
    for rblock in itertools.product(*p.reduce_blocks):
        frame = Frame(p.axes, chunk + rblock)
        values: dict[Expr, Value] = {}
        eval_exprs(p.body, frame, flats, values)
        body = np.broadcast_to(values[red.body], frame.shape)
        with np.errstate(all="ignore"):
            if red.op == "sum":
                part = np.sum(widen(body), axis=p.reduce_axes, keepdims=True)
                total = part if total is None else total + part
            else:
                assert red.op == "max", red.op
                part = np.max(body, axis=p.reduce_axes, keepdims=True)
                total = part if total is None else np.maximum(total, part)
    return round_to(total, red.dtype)


Reducer = Callable[[Plan, tuple[Block, ...], Sequence[np.ndarray]], np.ndarray]
"""Computes a kernel's reduce over one global chunk (``reduce_chunk``'s signature)."""


def flat_inputs(kernel: Kernel, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The inputs as flat contiguous arrays of their buffers' dtypes (views when they already are)."""
    assert len(inputs) == len(kernel.inputs), (len(inputs), len(kernel.inputs))
    flats = []
    for a, b in zip(inputs, kernel.inputs):
        flat = np.ascontiguousarray(a, dtype=b.dtype.numpy).reshape(-1)
        assert flat.size == b.numel, (flat.shape, b)
        flats.append(flat)
    return flats


def run(p: Plan, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], reducer: Reducer = reduce_chunk) -> None:
    """Evaluate planned kernel ``p`` on ``inputs``, writing every output array in place."""
    kernel = p.kernel
    assert len(outputs) == len(kernel.outputs)
    for out, t in zip(outputs, kernel.output_types):
        assert out.shape == tuple(t.shape) and out.dtype == t.dtype.numpy, (out.shape, out.dtype, t)
    if kernel.numel == 0:
        return
    flats = flat_inputs(kernel, inputs)
    nr = len(kernel.reduce.vars) if kernel.reduce else 0
    for chunk in p.chunks():
        values: dict[Expr, Value] = {}
        if kernel.reduce is not None:
            values[Acc(kernel.reduce.dtype)] = reducer(p, chunk, flats)
        frame = Frame(p.axes, chunk + ((0, 1),) * nr)
        eval_exprs(p.outputs, frame, flats, values)
        where = tuple(slice(s, s + n) for s, n in chunk)
        shape = tuple(n for _, n in chunk)
        for out, e in zip(outputs, kernel.outputs):
            out[where] = np.broadcast_to(values[e], frame.shape).reshape(shape)


def evaluate(kernel: Kernel, inputs: Sequence[np.ndarray], max_elements: int = MAX_ELEMENTS) -> list[np.ndarray]:
    """The outputs of ``kernel`` on ``inputs`` (arrays of its input buffers' shapes and dtypes)."""
    outputs = [np.empty(t.shape, t.dtype.numpy) for t in kernel.output_types]
    run(plan(kernel, max_elements), inputs, outputs)
    return outputs

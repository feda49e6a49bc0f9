"""The vectorised numpy interpreter of one planned chunk: node steps, reduces and stores (``chunk_plan`` says
what a plan holds).

A ``Workspace`` is one thread's buffers for a plan and one step per node: a
view, a ufunc writing its buffer with ``out=``, or (any other node)
``engine.program.reference.eval_node`` rounded to the node's dtype, exactly as
the reference interpreter does.  A contraction's reduce goes to
``matmul.product``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence

import numpy as np

from engine.devices.chunk_plan import Block, Frame, Plan, Ufunc, Value
from engine.devices.matmul import Recipe, factor_order, product
from engine.kernel.index import add, lit
from engine.kernel.ir import Acc, Const, Expr, Kernel, Load, Op, Where
from engine.program.dtypes import DType
from engine.program.primitives import PrimNode
from engine.program.reference import eval_node


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


Step = Callable[[list, "Frame", tuple[int, ...], tuple[slice, ...], list], None]
"""One node's evaluation over a chunk: ``step(values, frame, shape, slices, windows)``."""

_ALL = slice(None)


class Workspace:
    """One thread's buffers for a plan and each stage's node steps; ``bind`` gives it the inputs and outputs of
    one launch.

    Values are held in a list by node number; constants are filled in once.  A workspace outlives its launch
    (``acquire``/``release`` keep idle ones on the plan): building the steps and mapping the buffers' pages
    cost more than a small epilogue's arithmetic.
    """

    def __init__(self, p: Plan, flats: Sequence[np.ndarray] = (), outputs: Sequence[np.ndarray] = ()) -> None:
        self.plan = p
        self.buffers = [np.empty(n, dt) for dt, n in p.slot_types]
        red = p.kernel.reduce
        nodes = [*p.body, *p.outputs, *([Acc(red.dtype)] if red else [])]
        self.index = {e: i for i, e in enumerate(dict.fromkeys(nodes))}
        self.template: list[Value | None] = [None] * len(self.index)
        self.recipes: dict[tuple[int, ...], Recipe] = {}
        self._whole = p.whole()
        self._views: dict[int, Load] = {}
        """Affine loads by node number: their whole-buffer views are made by ``bind``."""
        self._full: dict[int, np.ndarray] = {}
        for e, i in self.index.items():
            if isinstance(e, Const):
                self.template[i] = round_to(e.value.array(), e.dtype)
        self.body = [self._step(e) for e in p.body if not isinstance(e, Const)]
        self.store = [self._step(e) for e in p.outputs if not isinstance(e, (Const, Acc))]
        self.bind(flats, outputs)

    def bind(self, flats: Sequence[np.ndarray], outputs: Sequence[np.ndarray] = ()) -> Workspace:
        """Read ``flats`` (the flat inputs, then the padded copies) and write ``outputs`` from now on."""
        self.flats = flats
        self.outputs = outputs
        self._full.clear()
        if not flats:
            return self
        p = self.plan
        first = len(p.kernel.inputs) + len(p.windows)  # the flat inputs' padded copies follow these
        for k, e in self._views.items():
            if e.clamped:
                j = next(j for j, (i, _, _) in enumerate(p.pads) if i == e.input)
                self._full[k] = self._whole.view(flats[first + j], add(e.index, lit(p.pads[j][1])))
            else:
                self._full[k] = self._whole.view(flats[e.input], e.index)
        return self

    @staticmethod
    def acquire(p: Plan, flats: Sequence[np.ndarray], outputs: Sequence[np.ndarray] = ()) -> Workspace:
        """An idle workspace of ``p`` (a new one when none is), bound to ``flats`` and ``outputs``."""
        try:
            ws = p.idle.pop()
        except IndexError:
            return Workspace(p, flats, outputs)
        return ws.bind(flats, outputs)

    def release(self) -> None:
        """Keep this workspace on its plan for a later launch (unbound: it holds no launch's arrays)."""
        self.bind((), ())
        self.plan.idle.append(self)

    def _step(self, e: Expr) -> Step:
        p, k = self.plan, self.index[e]
        fn = p.ufuncs.get(e)
        if fn is not None:
            assert isinstance(e, (Op, Where))
            return self._ufunc_step(k, e, fn)
        if isinstance(e, Load) and e.index.is_affine:
            self._views[k] = e
            full = self._full
            span = p.spans[e]
            ndim = p.ndim

            def view(vals: list, frame: Frame, shape: tuple[int, ...], sls: tuple[slice, ...], wins: list) -> None:
                key = [_ALL] * ndim
                for a in span:
                    key[a] = sls[a]
                vals[k] = full[k][tuple(key)]

            return view
        args = [self.index[c] for c in e.children()]

        def generic(vals: list, frame: Frame, shape: tuple[int, ...], sls: tuple[slice, ...], wins: list) -> None:
            if isinstance(e, Load):
                vals[k] = read(e, self.flats[e.input], frame)
            elif isinstance(e, Op):
                node = PrimNode(e.op, (), None, (), e.dtype)
                vals[k] = round_to(eval_node(node, [vals[j] for j in args]), e.dtype)
            else:
                assert isinstance(e, Where), e
                vals[k] = round_to(np.where(_mask(e, frame), vals[args[0]], vals[args[1]]), e.dtype)

        return generic

    def _ufunc_step(self, k: int, e: Op | Where, fn: Ufunc) -> Step:
        slot = self.plan.slots[e]
        args = tuple(self.index[a] for a in e.children())
        span = self.plan.spans[e]
        views: dict[tuple[int, ...], np.ndarray] = {}
        buffer = self.buffers[slot] if slot >= 0 else None
        uf, pre, post = fn.ufunc, fn.pre, fn.post
        p = self.plan
        order = [a for a in range(p.ndim) if a not in span]
        order += factor_order(p, e, span) if p.factors is not None else list(span)
        back = np.argsort(order)

        def target(shape: tuple[int, ...], wins: list) -> np.ndarray:
            if buffer is None:
                return wins[-1 - slot]
            out = views.get(shape)
            if out is None:
                size = math.prod(shape[a] for a in span)
                out = views[shape] = buffer[:size].reshape([shape[a] if a in span else 1 for a in order]).transpose(back)
            return out

        if fn.where:
            assert isinstance(e, Where)
            then, otherwise = args

            def where(vals: list, frame: Frame, shape: tuple[int, ...], sls: tuple[slice, ...], wins: list) -> None:
                out = vals[k] = target(shape, wins)
                np.copyto(out, vals[otherwise])
                np.copyto(out, vals[then], where=_mask(e, frame))

            return where
        if uf is None:
            (a0,) = args

            def cast(vals: list, frame: Frame, shape: tuple[int, ...], sls: tuple[slice, ...], wins: list) -> None:
                out = vals[k] = target(shape, wins)
                np.copyto(out, vals[a0], casting="unsafe")

            return cast

        def call(vals: list, frame: Frame, shape: tuple[int, ...], sls: tuple[slice, ...], wins: list) -> None:
            out = vals[k] = target(shape, wins)
            uf(*pre, *[vals[j] for j in args], *post, out=out)

        return call


def output_window(out: np.ndarray, blocks: Sequence[Block], shape: tuple[int, ...]) -> np.ndarray:
    """The part of output array ``out`` the global ``blocks`` cover, shaped ``shape`` (reduce axes of size 1)."""
    where = tuple(slice(s, s + n) for s, n in blocks)
    return (out[where] if where else out).reshape(shape)


def eval_stage(steps: Sequence[Step], template: list, frame: Frame, windows: list) -> list:
    """Run ``steps`` over ``frame``: the values by node number (``windows``: direct outputs' targets)."""
    vals = list(template)
    shape = frame.shape
    sls = tuple(slice(s, s + n) for s, n in frame.blocks)
    for step in steps:
        step(vals, frame, shape, sls, windows)
    return vals


def _identity(op: str, dtype: DType) -> np.ndarray:
    """The value of a reduce over nothing."""
    if op == "sum":
        return np.zeros((), dtype.numpy)
    if dtype.is_float:
        return np.array(-np.inf, dtype.numpy)
    return np.array(np.iinfo(dtype.numpy).min if dtype.is_int else False, dtype.numpy)


def combine(op: str) -> np.ufunc:
    return np.add if op == "sum" else np.maximum


def _accumulator(op: str, dtype: DType) -> np.dtype:
    """The dtype a reduce accumulates in: what ``np.sum`` (the reference) uses; max keeps its dtype."""
    if op == "max":
        return dtype.numpy
    if dtype == DType.F16:
        return np.dtype(np.float32)
    if dtype == DType.BOOL or dtype.is_int:
        return np.dtype(np.int64)
    return dtype.numpy


def reduce_blocks(ws: Workspace, chunk: tuple[Block, ...], rblocks: Sequence[tuple[Block, ...]]) -> np.ndarray:
    """The reduce over the global ``chunk`` and ``rblocks``, in its accumulator dtype (reduce axes kept, size 1)."""
    p = ws.plan
    red = p.kernel.reduce
    assert red is not None
    ufunc = combine(red.op)
    accdt = _accumulator(red.op, red.dtype)
    shape = tuple(n for _, n in chunk) + (1,) * len(red.vars)
    total = np.empty(shape, accdt)
    part = np.empty(shape, accdt) if len(rblocks) > 1 else total
    k = ws.index.get(red.body)
    for i, rblock in enumerate(rblocks):
        frame = Frame(p.axes, chunk + rblock)
        vals = eval_stage(ws.body, ws.template, frame, [])
        target = total if i == 0 else part
        if p.dot is not None:
            np.copyto(target, product(p, ws.recipes, frame.shape, chunk, *(vals[ws.index[f]] for f in p.dot)), casting="unsafe")
        else:
            assert k is not None
            body = vals[k]
            if body.shape != frame.shape:
                body = np.broadcast_to(body, frame.shape)
            ufunc.reduce(body, axis=p.reduce_axes, dtype=accdt, out=target, keepdims=True)
        if i:
            ufunc(total, part, out=total)
    return total


def reduce_chunk(ws: Workspace, chunk: tuple[Block, ...]) -> np.ndarray:
    """The reduce's result over the global ``chunk`` (rounded, reduce axes kept with size 1)."""
    p = ws.plan
    red = p.kernel.reduce
    assert red is not None
    shape = tuple(n for _, n in chunk) + (1,) * len(red.vars)
    if red.size == 0:
        return np.broadcast_to(_identity(red.op, red.dtype), shape)
    if p.factors is not None:
        return contract(ws, chunk)
    return round_to(reduce_blocks(ws, chunk, list(itertools.product(*p.reduce_blocks))), red.dtype)


def contract(ws: Workspace, chunk: tuple[Block, ...], window: np.ndarray | None = None) -> np.ndarray:
    """A contraction's reduce over one global chunk: its factors over their spans, then ``matmul.product``.

    With ``window`` (the chunk's part of the output, of the reduce's dtype) the matmul writes there when the
    layouts allow it, and the result is a view of it.
    """
    p = ws.plan
    red = p.kernel.reduce
    assert red is not None and p.factors is not None
    frame = Frame(p.axes, chunk + tuple((0, v.size) for v in red.vars))
    vals = eval_stage(ws.body, ws.template, frame, [])
    return round_to(product(p, ws.recipes, frame.shape, chunk, *(vals[ws.index[f]] for f in p.factors), window), red.dtype)


def flat_inputs(kernel: Kernel, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The inputs as flat contiguous arrays of their buffers' dtypes (views when they already are)."""
    assert len(inputs) == len(kernel.inputs), (len(inputs), len(kernel.inputs))
    flats = []
    for a, b in zip(inputs, kernel.inputs):
        flat = np.ascontiguousarray(a, dtype=b.dtype.numpy).reshape(-1)
        assert flat.size == b.numel, (flat.shape, b)
        flats.append(flat)
    return flats


def store_outputs(ws: Workspace, chunk: tuple[Block, ...], acc: np.ndarray | None) -> None:
    """Evaluate the outputs over the global ``chunk`` (given the reduce's result there) and write them."""
    p = ws.plan
    kernel = p.kernel
    frame = Frame(p.axes, chunk + ((0, 1),) * len(p.reduce_axes))
    shape = frame.shape
    windows = [output_window(out, chunk, shape) for out in ws.outputs]
    template = ws.template
    if acc is not None:
        assert kernel.reduce is not None
        template = list(template)
        template[ws.index[Acc(kernel.reduce.dtype)]] = acc
    vals = eval_stage(ws.store, template, frame, windows)
    for i, e in enumerate(kernel.outputs):
        if p.slots.get(e) != -1 - i:
            np.copyto(windows[i], vals[ws.index[e]], casting="unsafe")

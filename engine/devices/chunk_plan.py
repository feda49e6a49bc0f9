"""How the numpy evaluator cuts a kernel's iteration space into chunks (``plan``), and one chunk (``Frame``).

Every loop variable gets its own array axis: the kernel's global ``vars`` first,
then the reduce ``vars``, so a variable's values are a broadcastable
``arange``.  An affine ``Load`` is a zero-copy strided view of its input (the
coefficient of each variable is its stride; a variable the index does not use
gets a size-1, stride-0 axis); a clamped affine load views a zero-padded copy
of its input, any other load gathers with ``np.take``; a load masked by bounds on its input's axes (a
convolution's padding) becomes a view of a copy padded along them (``windows``).  Every node's value
therefore only spans the axes it depends on (its *span*), which hoists
loop-invariant work for free.  Before planning, ``engine.kernel.simplify``
turns head-split and padded reads affine.

The iteration space is evaluated in chunks in which no materialised value
(anything but a view or a constant) exceeds ``max_elements`` elements: small
enough (``CHUNK_ELEMENTS``) that a chunk's intermediates stay in the L2 cache;
a chunk that only views its inputs grows up to ``view_elements``.  Each ``Op``
whose numpy ufunc computes exactly what the reference interpreter does (same
dtypes in and out, no float16) writes with ``out=`` into a buffer of a
per-thread workspace, reused from chunk to chunk and, through liveness, from
node to node; an output node spanning the whole chunk writes straight into the
output array.  Chunks split the global axes first, which never changes a
result; only a reduce too large for one chunk is split too, and then its
partial results are combined (a float sum may round differently).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from engine.devices.windows import Window, windowed
from engine.kernel.index import Div, Idx, Mod, Var
from engine.kernel.ir import Acc, Const, Expr, Kernel, Load, Op, Where, schedule
from engine.kernel.simplify import split_vars
from engine.program.dtypes import DType

if TYPE_CHECKING:
    from engine.devices.chunk_eval import Workspace

CHUNK_ELEMENTS = 1 << 16
"""Default bound on the elements of a chunk (256 KiB of float32 per intermediate: L2-resident)."""

EPILOGUE_ELEMENTS = 1 << 18
"""A contraction epilogue's piece: its values come from the matmul's result in memory either way, so larger
pieces than ``CHUNK_ELEMENTS`` save the per-piece interpreter calls (tens of microseconds each) and lose little
locality (1 MiB of float32 still fits a current core's L2)."""

MAX_ELEMENTS = 1 << 22
"""Default bound on a chunk whose big values are only views, and on a contraction's materialised factors."""

Block = tuple[int, int]
"""``(start, length)`` of one chunk along one axis."""

Value = np.ndarray

_UFUNCS: dict[str, np.ufunc] = {
    "neg": np.negative,
    "exp2": np.exp2,
    "log2": np.log2,
    "sin": np.sin,
    "cos": np.cos,
    "sqrt": np.sqrt,
    "not": np.logical_not,
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "max": np.maximum,
    "cmplt": np.less,
    "cmpgt": np.greater,
    "eq": np.equal,
    "noteq": np.not_equal,
    "and": np.logical_and,
    "or": np.logical_or,
}

_FLOAT_UFUNCS = {"div": np.divide, "pow": np.power}  # integer div and pow have C semantics: eval_node


@dataclass(frozen=True)
class Ufunc:
    """A node computed into a buffer: ``ufunc(*pre, *args, *post, out=...)``; without a ufunc a cast or a ``Where``.

    A ``Where`` copies ``otherwise`` into its buffer, then ``then`` where the bounds hold.
    """

    ufunc: np.ufunc | None
    pre: tuple[np.ndarray, ...] = ()
    post: tuple[np.ndarray, ...] = ()
    where: bool = False


def _ufunc(e: Op) -> Ufunc | None:
    """The ufunc computing ``e`` exactly as ``eval_node`` then rounding would, if there is one."""
    dtypes = {a.dtype for a in e.args}
    if DType.F16 in dtypes | {e.dtype}:
        return None  # float16 is computed in float32 and rounded after every op
    if e.op == "cast":
        return Ufunc(None)
    if len(dtypes) != 1:
        return None
    (dt,) = dtypes
    if e.op == "relu":
        fn = Ufunc(np.maximum, post=(np.zeros((), dt.numpy),))
    elif e.op == "recip" and dt.is_float:
        fn = Ufunc(np.divide, pre=(np.ones((), dt.numpy),))
    elif e.op in _UFUNCS or (e.op in _FLOAT_UFUNCS and dt.is_float):
        fn = Ufunc(_UFUNCS.get(e.op) or _FLOAT_UFUNCS[e.op])
    else:
        return None
    assert fn.ufunc is not None
    if fn.ufunc.nin != len(fn.pre) + len(e.args) + len(fn.post):
        return None
    with np.errstate(all="ignore"):
        probe = fn.ufunc(*fn.pre, *(np.zeros(1, dt.numpy) for _ in e.args), *fn.post)
    return fn if probe.dtype == e.dtype.numpy else None


@dataclass(frozen=True)
class Plan:
    """A kernel prepared for evaluation: node schedules, spans, ufuncs, buffers, chunks per axis."""

    kernel: Kernel
    axes: dict[Var, int]
    """Axis of each variable: global vars ``0 .. n-1``, then the reduce vars."""
    body: tuple[Expr, ...]
    """The reduce body's nodes, children first (empty without a reduce; the factors' only, with factors or dot)."""
    outputs: tuple[Expr, ...]
    """The output expressions' nodes, children first."""
    global_blocks: tuple[tuple[Block, ...], ...]
    """For each global axis, the blocks a chunk takes along it."""
    reduce_blocks: tuple[tuple[Block, ...], ...]
    """For each reduce axis, the blocks a chunk takes along it."""
    factors: tuple[Expr, Expr] | None = None
    """A contraction's two factors (``np.matmul`` computes the reduce), else None."""
    spans: dict[Expr, tuple[int, ...]] = field(default_factory=dict, repr=False)
    """The axes each node's value spans (its other axes have size 1)."""
    ufuncs: dict[Expr, Ufunc] = field(default_factory=dict, repr=False)
    """The nodes computed by one ufunc with ``out=``."""
    slots: dict[Expr, int] = field(default_factory=dict, repr=False)
    """The workspace buffer each ufunc node writes (``-1 - i``: straight into output ``i``)."""
    slot_types: tuple[tuple[np.dtype, int], ...] = ()
    """Dtype and elements of each workspace buffer."""
    pads: tuple[tuple[int, int, int], ...] = ()
    """Inputs read through zero-padded copies (``_pads``)."""
    windows: tuple[Window, ...] = ()
    """Inputs read through zero-padded copies of their axes (``windows.windowed``): flat inputs ``n``, ``n + 1``
    ... for ``n`` inputs, before the ``pads``' copies."""
    dot: tuple[Expr, Expr] | None = None
    """A streamed reduce's ``sum(a * b)`` factors: each block is reduced by a batched ``np.matmul``, unformed."""
    idle: list[Workspace] = field(default_factory=list, init=False, compare=False, repr=False)
    """Workspaces of earlier launches, kept for the next (``Workspace.acquire``): at most one per thread that
    ran this plan at once."""

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

    @property
    def chunk_count(self) -> int:
        return math.prod(len(b) for b in self.global_blocks + self.reduce_blocks)


def _spans(kernel: Kernel, axes: dict[Var, int]) -> dict[Expr, tuple[int, ...]]:
    out: dict[Expr, tuple[int, ...]] = {}
    every_global = tuple(range(len(kernel.vars)))
    for e in schedule(kernel.exprs()):
        if isinstance(e, Load):
            s = {axes[v] for v in e.index.variables()}
        elif isinstance(e, Acc):
            s = set(every_global)
        else:
            s = set().union(*(out[c] for c in e.children()))
            if isinstance(e, Where):
                s |= {axes[v] for b in e.bounds for v in b.index.variables()}
        out[e] = tuple(sorted(s))
    return out


def product_factors(kernel: Kernel) -> tuple[Expr, Expr] | None:
    """``(a, b)`` when the kernel's reduce is a float ``sum(a * b)`` with both factors of its dtype, else None."""
    red = kernel.reduce
    if red is None or red.op != "sum" or not red.dtype.is_float:
        return None
    body = red.body
    if not (isinstance(body, Op) and body.op == "mul" and len(body.args) == 2):
        return None
    a, b = body.args
    return (a, b) if a.dtype == b.dtype == body.dtype else None


def _factors(kernel: Kernel, spans: dict[Expr, tuple[int, ...]], axes: dict[Var, int],
             outer: bool) -> tuple[Expr, Expr] | None:
    """The factors of a float ``sum(a * b)`` that ``np.matmul`` can reduce without forming the product.

    Both factors span a reduce axis and every reduce axis is spanned by one.
    With ``outer`` (a contraction worth whole-reduce chunks), a factor that must
    be materialised (not a strided view) spans less than the product does (axes
    of size 1 aside).
    """
    factors = product_factors(kernel)
    if factors is None:
        return None
    red, (a, b) = kernel.reduce, factors
    assert red is not None
    sizes = {i: v.size for v, i in axes.items()}
    sa, sb = ({i for i in spans[x] if sizes[i] > 1} for x in (a, b))
    rs = {axes[v] for v in red.vars if v.size > 1}
    if not (sa & rs and sb & rs and rs <= sa | sb):
        return None
    if outer and any(_materialised(f) and s == sa | sb for f, s in ((a, sa), (b, sb))):
        return None
    return a, b


def _materialised(e: Expr) -> bool:
    """Whether ``e``'s value is computed into memory (not a strided view of an input, padded or not)."""
    return not (isinstance(e, Load) and e.index.is_affine)


def _pads(kernel: Kernel) -> tuple[tuple[int, int, int], ...]:
    """``(input, before, after)``: the zeros each input needs around it for its clamped affine loads to be views.

    A clamped load leaves its buffer only in lanes a ``Where`` masks off, so
    those lanes may read zeros instead of the clamped element.
    """
    pads: dict[int, tuple[int, int]] = {}
    for e in kernel.loads():
        if e.index.is_affine and e.clamped:
            lo, hi = e.index.bounds
            before, after = pads.get(e.input, (0, 0))
            pads[e.input] = (max(before, -lo), max(after, hi - e.size + 1))
    return tuple((i, before, after) for i, (before, after) in sorted(pads.items()))


def plan(kernel: Kernel, max_elements: int = CHUNK_ELEMENTS, view_elements: int | None = MAX_ELEMENTS,
         windows: bool = True) -> Plan:
    """Prepare ``kernel``: chunks whose materialised values hold at most ``max_elements`` elements.

    A chunk grows up to ``view_elements`` while its materialised values stay
    within ``max_elements`` (a reduce of a strided view needs no buffer); a
    contraction's factors and output chunk are bounded by ``view_elements``.
    With ``view_elements=None`` chunks hold at most ``max_elements`` and
    contractions are streamed like any reduce.  The plan's kernel is
    ``split_vars(kernel)``, whose shape may have more axes; with ``windows`` (the numpy evaluator's plans), its
    masked reads that a padded copy serves read that copy, an input after the kernel's own (``Plan.windows``).
    """
    assert max_elements >= 1
    kernel, padded = windowed(split_vars(kernel), len(kernel.inputs)) if windows else (split_vars(kernel), ())
    assert tuple(v.size for v in kernel.vars) == tuple(kernel.shape), (kernel.vars, kernel.shape)
    rvars = kernel.reduce.vars if kernel.reduce else ()
    axes = {v: i for i, v in enumerate((*kernel.vars, *rvars))}
    assert len(axes) == len(kernel.vars) + len(rvars), "loop variables must be distinct"
    spans = _spans(kernel, axes)
    gdims = list(kernel.shape)
    rdims = [v.size for v in rvars]
    factors = _factors(kernel, spans, axes, outer=True) if view_elements is not None else None
    blocks = None
    if factors is not None:
        assert view_elements is not None
        blocks = _contraction_blocks(gdims, rdims, [spans[f] for f in factors if _materialised(f)], view_elements)
        if blocks is None:
            factors = None
    dot = _factors(kernel, spans, axes, outer=False) if factors is None else None
    body_roots: tuple[Expr, ...] = () if kernel.reduce is None else tuple(factors or dot or [kernel.reduce.body])
    body = tuple(schedule(body_roots))
    outputs = tuple(schedule(kernel.outputs))
    if blocks is None:
        held = [spans[e] for e in (*body, *outputs) if _materialised(e) and not isinstance(e, (Const, Acc))]
        blocks = _fit_blocks(gdims + rdims, held, max_elements, view_elements or max_elements)
    gblocks, rblocks = tuple(blocks[: len(gdims)]), tuple(blocks[len(gdims) :])
    ufuncs = {e: f for e in (*body, *outputs) if isinstance(e, Op) and (f := _ufunc(e)) is not None}
    ufuncs |= {e: Ufunc(None, where=True) for e in (*body, *outputs)
               if isinstance(e, Where) and e.then.dtype == e.otherwise.dtype == e.dtype}
    first = tuple(b[0][1] if b else 0 for b in gblocks)
    body_shape = first + tuple(b[0][1] if b else 0 for b in rblocks)
    direct = {}
    in_body = set(body)
    for i, e in enumerate(kernel.outputs):
        if e in ufuncs and e not in direct and e not in in_body and spans[e] == tuple(range(len(gdims))):
            direct[e] = -1 - i
    slots: dict[Expr, int] = dict(direct)
    slot_types: list[tuple[np.dtype, int]] = []
    _allocate(body, body_roots, ufuncs, spans, body_shape, slots, slot_types)
    _allocate(outputs, kernel.outputs, ufuncs, spans, first + (1,) * len(rdims), slots, slot_types)
    return Plan(kernel, axes, body, outputs, gblocks, rblocks, factors, spans, ufuncs, slots, tuple(slot_types),
                _pads(kernel), padded, dot)


def _allocate(order: Sequence[Expr], roots: Sequence[Expr], ufuncs: dict[Expr, Ufunc],
              spans: dict[Expr, tuple[int, ...]], shape: tuple[int, ...], slots: dict[Expr, int],
              types: list[tuple[np.dtype, int]]) -> None:
    """Give each ufunc node of ``order`` a workspace buffer, reusing those of nodes no longer needed.

    ``roots`` are read after the pass (a contraction's two factors, the outputs), so their buffers live to its
    end even where a later node of ``order`` reads them last (``sum(x * sigmoid(x))``: ``neg(x)`` must not
    take ``x``'s buffer).  Nodes of ``order`` that an earlier pass placed (the outputs recompute the body's
    elementwise nodes) keep their buffers, which may be shared in place (``add(v1, v3)`` writing into
    ``v1``'s): those buffers are never handed out again in this pass, or a new node would overwrite a value
    that is still to be read."""
    last = {c: i for i, e in enumerate(order) for c in e.children()}
    last.update((r, len(order)) for r in roots)
    placed = {slots[e] for e in order if slots.get(e, -1) >= 0}
    free: dict[np.dtype, list[int]] = {}
    for i, e in enumerate(order):
        dying = [c for c in set(e.children())
                 if last.get(c) == i and c in slots and slots[c] >= 0 and slots[c] not in placed]
        if e in ufuncs and e not in slots:
            dt = e.dtype.numpy
            same = [] if isinstance(e, Where) else [c for c in dying if spans[c] == spans[e] and c.dtype.numpy == dt]
            for c in same:  # in place: an argument of the same span dies here
                free.setdefault(dt, []).append(slots[c])
            size = math.prod(shape[a] for a in spans[e])
            pool = free.get(dt)
            if pool:
                slots[e] = pool.pop()
                types[slots[e]] = (dt, max(types[slots[e]][1], size))
            else:
                slots[e] = len(types)
                types.append((dt, size))
            dying = [c for c in dying if c not in same]
        for c in dying:
            free.setdefault(c.dtype.numpy, []).append(slots[c])


def chunk_blocks(dims: Sequence[int], limit: int) -> list[tuple[Block, ...]]:
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


def _fit_blocks(dims: list[int], spans: list[tuple[int, ...]], limit: int, most: int) -> list[tuple[Block, ...]]:
    """The biggest blocks (up to ``most`` elements a chunk) where every span in ``spans`` holds at most ``limit``."""
    size = max(most, limit)
    while True:
        blocks = chunk_blocks(dims, size)
        first = [b[0][1] if b else 0 for b in blocks]
        if size <= limit or all(math.prod(first[a] for a in s) <= limit for s in spans):
            return blocks
        size = max(size // 2, limit)


def _contraction_blocks(gdims: list[int], rdims: list[int], spans: list[tuple[int, ...]],
                        limit: int) -> list[tuple[Block, ...]] | None:
    """Global blocks (reduce axes whole) within ``limit`` for the output chunk and each materialised factor."""
    size = limit
    while size >= 1:
        blocks = chunk_blocks(gdims, size) + [((0, d),) for d in rdims]
        first = [b[0][1] if b else 0 for b in blocks]
        if all(math.prod(first[a] for a in s) <= limit for s in spans):
            return blocks
        size //= 2
    return None


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

"""A vectorised numpy evaluator of the kernel IR (what the numpy and BLAS devices run).

Every loop variable gets its own array axis: the kernel's global ``vars`` first,
then the reduce ``vars``, so a variable's values are a broadcastable
``arange``.  An affine ``Load`` is a zero-copy strided view of its input (the
coefficient of each variable is its stride; a variable the index does not use
gets a size-1, stride-0 axis); a clamped affine load views a zero-padded copy
of its input, any other load gathers with ``np.take``.  Every node's value
therefore only spans the axes it depends on (its *span*), which hoists
loop-invariant work for free.  Before planning, ``split_vars`` simplifies the
indices: modulo coefficients are reduced and a variable read as ``v // k`` or
``v % k`` becomes two variables, so head-split and padded reads turn affine.

The iteration space is evaluated in chunks (``Plan``) in which no materialised
value (anything but a view or a constant) exceeds ``max_elements`` elements:
small enough (``CHUNK_ELEMENTS``) that a chunk's intermediates stay in the L2
cache; a chunk that only views its inputs grows up to ``view_elements``.  Each
``Op`` whose numpy ufunc computes exactly what the reference interpreter does
(same dtypes in and out, no float16) writes with ``out=`` into a buffer of a
per-thread workspace, reused from chunk to chunk and, through liveness, from
node to node; an output node spanning the whole chunk writes straight into the
output array.  Every other node runs ``engine.program.reference.eval_node`` and
is rounded to its dtype, exactly as the reference interpreter does.  Chunks
split the global axes first, which never changes a result; only a reduce too
large for one chunk is split too, and then its partial results are combined
(a float sum may round differently).

``run`` spreads the chunks over ``threads`` threads (numpy releases the GIL in
its loops): global chunks, each thread taking the next when it is done with
one, or, when there is one global chunk, contiguous ranges of its reduce
blocks whose partial results are combined in thread order, so results do not
depend on timing.

A *row kernel* (``Kernel.stages``) runs as the chain of ordinary kernels it
fuses (``RowPlan``): one per stage, reading the earlier stages' results from
temporaries of one element per row, then one for the outputs.  That costs the
numpy device what the unfused kernels cost (it streams each from memory anyway),
and keeps one evaluator for every kernel.

A *contraction* kernel (a float ``sum`` of ``mul(a, b)`` whose factors both
span a reduce axis, like a matmul or a convolution) never forms the product:
``a`` and ``b`` are evaluated over their own spans and contracted by one
batched ``np.matmul`` (BLAS, itself multi-threaded), one global chunk at a
time, materialised factors and output chunk bounded by ``view_elements``.  The
factors are computed in their input's layout, the matmul writes into the output
where the layouts allow, and the epilogue (bias, activation) then runs in place,
in cache-sized pieces spread over the threads.
"""

from __future__ import annotations

import itertools
import math
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np

from engine.kernel.index import Div, Idx, Mod, Var, add, flatten, floordiv, lit, mod, scale, var
from engine.kernel.ir import Acc, Buffer, Const, Expr, Kernel, Load, Op, Reduce, Where, map_exprs, schedule
from engine.program.dtypes import DType
from engine.program.primitives import PrimNode
from engine.program.reference import eval_node, widen

CHUNK_ELEMENTS = 1 << 16
"""Default bound on the elements of a chunk (256 KiB of float32 per intermediate: L2-resident)."""

MAX_ELEMENTS = 1 << 22
"""Default bound on a chunk whose big values are only views, and on a contraction's materialised factors."""

Block = tuple[int, int]
"""``(start, length)`` of one chunk along one axis."""

Value = np.ndarray
T = TypeVar("T")

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


def _accumulator(op: str, dtype: DType) -> np.dtype:
    """The dtype a reduce accumulates in: what ``np.sum`` (the reference) uses; max keeps its dtype."""
    if op == "max":
        return dtype.numpy
    if dtype == DType.F16:
        return np.dtype(np.float32)
    if dtype == DType.BOOL or dtype.is_int:
        return np.dtype(np.int64)
    return dtype.numpy


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
    dot: tuple[Expr, Expr] | None = None
    """A streamed reduce's ``sum(a * b)`` factors: each block is reduced by a batched ``np.matmul``, unformed."""

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


def _subst(x: Idx, m: dict[Var, Idx]) -> Idx:
    """``x`` with each variable of ``m`` replaced, divisions and modulos simplified again.

    The coefficients under a ``% k`` are reduced modulo ``k`` first (to the
    residue nearest 0), so ``(g + 67*r) % 66`` becomes ``g + r`` when that stays
    below 66.
    """
    parts = [lit(x.const)]
    for atom, c in x.terms:
        if isinstance(atom, Var):
            y = m.get(atom, var(atom))
        elif isinstance(atom, Div):
            y = floordiv(_subst(atom.num, m), atom.k)
        else:
            k = atom.k
            num = _subst(atom.num, m)
            terms = [(a, (ca % k) - k if ca % k > k // 2 else ca % k) for a, ca in num.terms]
            y = mod(add(*(scale(Idx(((a, 1),), 0), ca) for a, ca in terms if ca), lit(num.const % k)), k)
        parts.append(scale(y, c))
    return add(*parts)


def _rewrite(kernel: Kernel, m: dict[Var, Idx], swap: Callable[[tuple[Var, ...]], tuple[Var, ...]]) -> Kernel:
    """``kernel`` with every index rewritten by ``_subst(., m)`` and its loop variables by ``swap``."""
    red = kernel.reduce
    mapped = map_exprs([*kernel.outputs, *([red.body] if red else [])], index=lambda x: _subst(x, m))
    vars_ = swap(kernel.vars)
    reduce = Reduce(red.op, swap(red.vars), mapped[-1]) if red else None
    return Kernel(kernel.inputs, tuple(u.size for u in vars_), vars_, reduce, tuple(mapped[: len(kernel.outputs)]))


def _has_mod(kernel: Kernel) -> bool:
    idxs = [i for e in schedule(kernel.exprs())
            for i in ([e.index] if isinstance(e, Load) else [b.index for b in e.bounds] if isinstance(e, Where) else [])]
    return any(not i.is_affine for i in idxs)


def _split_candidate(kernel: Kernel) -> tuple[Var, int] | None:
    """A loop variable ``v`` some index divides or reduces modulo ``k`` (a divisor of its size), if any."""
    loops = set(kernel.vars) | set(kernel.reduce.vars if kernel.reduce else ())
    for e in schedule(kernel.exprs()):
        idxs = [e.index] if isinstance(e, Load) else [b.index for b in e.bounds] if isinstance(e, Where) else []
        stack = [a for i in idxs for a in i.atoms()]
        while stack:
            atom = stack.pop()
            if isinstance(atom, Var):
                continue
            num = atom.num
            if len(num.terms) == 1 and num.const == 0 and num.terms[0][1] == 1:
                v = num.terms[0][0]
                if v in loops and isinstance(v, Var) and v.size % atom.k == 0 and atom.k < v.size:
                    return v, atom.k
            stack.extend(num.atoms())
    return None


def split_vars(kernel: Kernel) -> Kernel:
    """An equal kernel with simpler indices: modulo coefficients reduced, and variables taken ``// k`` or ``% k`` split.

    ``v`` becomes ``k * v_hi + v_lo`` (``v_hi`` before ``v_lo``, so a global
    split is a reshape of the output), which turns such indices affine: a
    batched matmul over heads read through ``g // 128`` becomes strided views.
    """
    if not _has_mod(kernel):
        return kernel
    kernel = _rewrite(kernel, {}, lambda vs: vs)
    names = {v.name for v in (*kernel.vars, *(kernel.reduce.vars if kernel.reduce else ()))}
    while (found := _split_candidate(kernel)) is not None:
        v, k = found
        hi, lo = (Var(_fresh(f"{v.name}{t}", names), n) for t, n in (("h", v.size // k), ("l", k)))

        def swap(vs: tuple[Var, ...], v: Var = v, hi: Var = hi, lo: Var = lo) -> tuple[Var, ...]:
            return tuple(x for u in vs for x in ((hi, lo) if u == v else (u,)))

        kernel = _rewrite(kernel, {v: add(scale(var(hi), k), var(lo))}, swap)
    return kernel


def _fresh(name: str, taken: set[str]) -> str:
    while name in taken:
        name += "_"
    taken.add(name)
    return name


def plan(kernel: Kernel, max_elements: int = CHUNK_ELEMENTS, view_elements: int | None = MAX_ELEMENTS) -> Plan:
    """Prepare ``kernel``: chunks whose materialised values hold at most ``max_elements`` elements.

    A chunk grows up to ``view_elements`` while its materialised values stay
    within ``max_elements`` (a reduce of a strided view needs no buffer); a
    contraction's factors and output chunk are bounded by ``view_elements``.
    With ``view_elements=None`` chunks hold at most ``max_elements`` and
    contractions are streamed like any reduce.  The plan's kernel is
    ``split_vars(kernel)``, whose shape may have more axes.
    """
    assert max_elements >= 1
    kernel = split_vars(kernel)
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
    if kernel.reduce is None:
        body: tuple[Expr, ...] = ()
    else:
        body = tuple(schedule(factors or dot or [kernel.reduce.body]))
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
    _allocate(body, ufuncs, spans, body_shape, slots, slot_types)
    _allocate(outputs, ufuncs, spans, first + (1,) * len(rdims), slots, slot_types)
    return Plan(kernel, axes, body, outputs, gblocks, rblocks, factors, spans, ufuncs, slots, tuple(slot_types),
                _pads(kernel), dot)


def _allocate(order: Sequence[Expr], ufuncs: dict[Expr, Ufunc], spans: dict[Expr, tuple[int, ...]],
              shape: tuple[int, ...], slots: dict[Expr, int], types: list[tuple[np.dtype, int]]) -> None:
    """Give each ufunc node of ``order`` a workspace buffer, reusing those of nodes no longer needed.

    Nodes of ``order`` that an earlier pass placed (the outputs recompute the body's elementwise nodes) keep
    their buffers, which may be shared in place (``add(v1, v3)`` writing into ``v1``'s): those buffers are
    never handed out again in this pass, or a new node would overwrite a value that is still to be read."""
    last = {c: i for i, e in enumerate(order) for c in e.children()}
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


def _fit_blocks(dims: list[int], spans: list[tuple[int, ...]], limit: int, most: int) -> list[tuple[Block, ...]]:
    """The biggest blocks (up to ``most`` elements a chunk) where every span in ``spans`` holds at most ``limit``."""
    size = max(most, limit)
    while True:
        blocks = _blocks(dims, size)
        first = [b[0][1] if b else 0 for b in blocks]
        if size <= limit or all(math.prod(first[a] for a in s) <= limit for s in spans):
            return blocks
        size = max(size // 2, limit)


def _contraction_blocks(gdims: list[int], rdims: list[int], spans: list[tuple[int, ...]],
                        limit: int) -> list[tuple[Block, ...]] | None:
    """Global blocks (reduce axes whole) within ``limit`` for the output chunk and each materialised factor."""
    size = limit
    while size >= 1:
        blocks = _blocks(gdims, size) + [((0, d),) for d in rdims]
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
    """One thread's buffers for a plan on given inputs and outputs, and each stage's node steps.

    Values are held in a list by node number; constants are filled in once.
    """

    def __init__(self, p: Plan, flats: Sequence[np.ndarray], outputs: Sequence[np.ndarray] = ()) -> None:
        self.plan = p
        self.flats = flats
        self.outputs = outputs
        self.buffers = [np.empty(n, dt) for dt, n in p.slot_types]
        red = p.kernel.reduce
        nodes = [*p.body, *p.outputs, *([Acc(red.dtype)] if red else [])]
        self.index = {e: i for i, e in enumerate(dict.fromkeys(nodes))}
        self.template: list[Value | None] = [None] * len(self.index)
        self.recipes: dict[tuple[int, ...], _Recipe] = {}
        self._whole = p.whole()
        for e, i in self.index.items():
            if isinstance(e, Const):
                self.template[i] = round_to(e.value.array(), e.dtype)
        self.body = [self._step(e) for e in p.body if not isinstance(e, Const)]
        self.store = [self._step(e) for e in p.outputs if not isinstance(e, (Const, Acc))]

    def _step(self, e: Expr) -> Step:
        p, k = self.plan, self.index[e]
        fn = p.ufuncs.get(e)
        if fn is not None:
            assert isinstance(e, (Op, Where))
            return self._ufunc_step(k, e, fn)
        if isinstance(e, Load) and e.index.is_affine:
            if e.clamped:
                j = next(j for j, (i, _, _) in enumerate(p.pads) if i == e.input)
                full = self._whole.view(self.flats[len(p.kernel.inputs) + j], add(e.index, lit(p.pads[j][1])))
            else:
                full = self._whole.view(self.flats[e.input], e.index)
            span = p.spans[e]
            ndim = p.ndim

            def view(vals: list, frame: Frame, shape: tuple[int, ...], sls: tuple[slice, ...], wins: list) -> None:
                key = [_ALL] * ndim
                for a in span:
                    key[a] = sls[a]
                vals[k] = full[tuple(key)]

            return view
        flat = self.flats[e.input] if isinstance(e, Load) else None
        args = [self.index[c] for c in e.children()]

        def generic(vals: list, frame: Frame, shape: tuple[int, ...], sls: tuple[slice, ...], wins: list) -> None:
            if isinstance(e, Load):
                assert flat is not None
                vals[k] = read(e, flat, frame)
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
        order += _factor_order(p, e, span) if p.factors is not None else list(span)
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


def _factor_order(p: Plan, e: Expr, span: tuple[int, ...]) -> list[int]:
    """The axis order of a contraction factor node's buffer, one BLAS reads as it is and ``e`` writes streaming.

    Batch axes (global axes both factors span) come first, then the reduce axes and the other global axes as
    one matrix in either order: the one whose inner axis is the unit-stride axis of the widest load ``e``
    reads (computing a factor in the other order than its input's runs several times slower).
    """
    assert p.factors is not None
    both = set(p.spans[p.factors[0]]) & set(p.spans[p.factors[1]])
    inner = [a for a in span if a in p.reduce_axes]
    batch = [a for a in span if a in both and a not in inner]
    free = [a for a in span if a not in both and a not in inner]
    loads = [x for x in schedule([e]) if isinstance(x, Load)]
    widest = max(loads, key=lambda x: len(p.spans[x]), default=None)
    unit = None
    if widest is not None:
        strides = {p.axes[v]: abs(c) for v, c in widest.index.terms if isinstance(v, Var) and c and p.axes[v] in span}
        unit = min(strides, key=strides.__getitem__, default=None)
    return batch + (free + inner if unit in inner else inner + free)


def _window(out: np.ndarray, blocks: Sequence[Block], shape: tuple[int, ...]) -> np.ndarray:
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


def _combine(op: str) -> np.ufunc:
    return np.add if op == "sum" else np.maximum


def reduce_blocks(ws: Workspace, chunk: tuple[Block, ...], rblocks: Sequence[tuple[Block, ...]]) -> np.ndarray:
    """The reduce over the global ``chunk`` and ``rblocks``, in its accumulator dtype (reduce axes kept, size 1)."""
    p = ws.plan
    red = p.kernel.reduce
    assert red is not None
    ufunc = _combine(red.op)
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
            np.copyto(target, _product(ws, frame, chunk, *(vals[ws.index[f]] for f in p.dot)), casting="unsafe")
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
        return _contract(ws, chunk)
    return round_to(reduce_blocks(ws, chunk, list(itertools.product(*p.reduce_blocks))), red.dtype)


def _contract(ws: Workspace, chunk: tuple[Block, ...], window: np.ndarray | None = None) -> np.ndarray:
    """A contraction's reduce over one global chunk: its factors over their spans, then ``_product``.

    With ``window`` (the chunk's part of the output, of the reduce's dtype) the matmul writes there when the
    layouts allow it, and the result is a view of it.
    """
    p = ws.plan
    red = p.kernel.reduce
    assert red is not None and p.factors is not None
    frame = Frame(p.axes, chunk + tuple((0, v.size) for v in red.vars))
    vals = eval_stage(ws.body, ws.template, frame, [])
    return round_to(_product(ws, frame, chunk, *(vals[ws.index[f]] for f in p.factors), window), red.dtype)


@dataclass(frozen=True)
class _Recipe:
    """How ``_product`` lays two factor values of one frame shape out as a batched matmul, and the result back."""

    shapes: tuple[tuple[int, ...], tuple[int, ...]]
    later: tuple[int, ...]
    """Reduce axes only one factor spans: rows or columns of the matmul, summed in its result (summing a factor
    first would compute ``sum(a) * b``, which differs from the sum of the products where they hold infinities)."""
    perms: tuple[tuple[int, ...], tuple[int, ...]]
    dims: tuple[tuple[int, int, int], tuple[int, int, int]]
    result: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]
    """Shape, then axis order, of the matmul's result, then the chunk's shape."""


def _recipe(p: Plan, shape: tuple[int, ...], chunk: tuple[Block, ...]) -> _Recipe:
    factors = p.factors or p.dot
    assert factors is not None
    ng, nd, raxes = len(p.kernel.vars), p.ndim, set(p.reduce_axes)
    sa, sb = (set(p.spans[f]) for f in factors)
    only = (sa ^ sb) & raxes
    sa_shape, sb_shape = (tuple(shape[i] if i in s else 1 for i in range(nd)) for s in (sa, sb))
    batch, inner = sorted(sa & sb - raxes), sorted(sa & sb & raxes)
    ma, nb = sorted(sa - sb), sorted(sb - sa)
    size = [math.prod(shape[i] for i in g) for g in (batch, ma, inner, nb)]
    rest = [i for i in range(nd) if i not in sa and i not in sb]
    order = batch + ma + nb
    return _Recipe(
        (sa_shape, sb_shape),
        tuple(sorted(only)),
        (tuple(batch + ma + inner + [i for i in range(nd) if i not in sa]),
         tuple(batch + inner + nb + [i for i in range(nd) if i not in sb])),
        ((size[0], size[1], size[2]), (size[0], size[2], size[3])),
        (tuple([shape[i] for i in order] + [1] * (len(rest) + len(inner))), tuple(np.argsort(order + rest + inner)),
         tuple(n for _, n in chunk) + (1,) * (nd - ng)),
    )


def _product(ws: Workspace, frame: Frame, chunk: tuple[Block, ...], av: np.ndarray, bv: np.ndarray,
             window: np.ndarray | None = None) -> np.ndarray:
    """``sum(a * b)`` over ``frame``'s reduce axes from the factors' values, by ``np.matmul`` (not yet rounded).

    Axes both factors span are batch (global) or contracted (reduce) axes; a
    reduce axis only one factor spans is summed in the matmul's result.  The matmul writes
    into ``window`` (the result's shape and dtype) where that is a row-major view
    of the result's matrices, saving a temporary and a copy.
    """
    shape = frame.shape
    r = ws.recipes.get(shape)
    if r is None:
        r = ws.recipes[shape] = _recipe(ws.plan, shape, chunk)
    ms = []
    for v, target, perm, dims in zip((av, bv), r.shapes, r.perms, r.dims):
        v = widen(v)
        if v.shape != target:
            v = np.broadcast_to(v, target)
        ms.append(v.transpose(perm).reshape(dims))
    am, bm = (_blasable(m) for m in ms)
    out = _matmul_out(window, r, (am.shape[0], am.shape[1], bm.shape[2]), np.result_type(am, bm))
    if am.shape[0] == 1:
        c = np.matmul(am[0], bm[0], out=None if out is None else out[0])[None]
    else:
        c = np.matmul(am, bm, out=out)
    c = c.reshape(r.result[0]).transpose(r.result[1])
    if r.later:
        c = np.add.reduce(c, axis=r.later, keepdims=True)
    return c if c.shape == r.result[2] else np.broadcast_to(c, r.result[2])


def _matmul_out(window: np.ndarray | None, r: _Recipe, dims: tuple[int, int, int], dtype: np.dtype) -> np.ndarray | None:
    """``window`` as the matmul's ``(batch, m, n)`` result, if it is a view BLAS can write (rows contiguous)."""
    if window is None or r.later or window.dtype != dtype or math.prod(r.result[0]) != window.size:
        return None
    try:
        out = window.transpose(np.argsort(r.result[1])).reshape(dims, copy=False)
    except ValueError:
        return None
    return out if out.strides[-1] == out.itemsize and out.strides[-2] >= max(dims[2], 1) * out.itemsize else None


def _blasable(x: np.ndarray) -> np.ndarray:
    """``x`` (a matrix or a stack of them) laid out so that ``np.matmul`` hands it to BLAS."""
    item = x.itemsize
    s1, s2 = x.strides[-2:]
    if (s2 == item and s1 >= max(x.shape[-1], 1) * item) or (s1 == item and s2 >= max(x.shape[-2], 1) * item):
        return x
    return np.ascontiguousarray(x)


def flat_inputs(kernel: Kernel, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The inputs as flat contiguous arrays of their buffers' dtypes (views when they already are)."""
    assert len(inputs) == len(kernel.inputs), (len(inputs), len(kernel.inputs))
    flats = []
    for a, b in zip(inputs, kernel.inputs):
        flat = np.ascontiguousarray(a, dtype=b.dtype.numpy).reshape(-1)
        assert flat.size == b.numel, (flat.shape, b)
        flats.append(flat)
    return flats


def _store(ws: Workspace, chunk: tuple[Block, ...], acc: np.ndarray | None) -> None:
    """Evaluate the outputs over the global ``chunk`` (given the reduce's result there) and write them."""
    p = ws.plan
    kernel = p.kernel
    frame = Frame(p.axes, chunk + ((0, 1),) * len(p.reduce_axes))
    shape = frame.shape
    windows = [_window(out, chunk, shape) for out in ws.outputs]
    template = ws.template
    if acc is not None:
        assert kernel.reduce is not None
        template = list(template)
        template[ws.index[Acc(kernel.reduce.dtype)]] = acc
    vals = eval_stage(ws.store, template, frame, windows)
    for i, e in enumerate(kernel.outputs):
        if p.slots.get(e) != -1 - i:
            np.copyto(windows[i], vals[ws.index[e]], casting="unsafe")


def _spread(p: Plan, flats: Sequence[np.ndarray], outputs: Sequence[np.ndarray], items: Sequence[T], threads: int,
            do: Callable[[Workspace, T], None]) -> None:
    """``do(workspace, item)`` for every item, on up to ``threads`` threads (this one among them).

    Each thread has its own workspace and takes the next item when it is done with one, so a thread slowed by
    other processes takes fewer; the items must write disjoint outputs.
    """
    pending = iter(items)
    lock = threading.Lock()

    def worker() -> None:
        ws = Workspace(p, flats, outputs)
        with np.errstate(all="ignore"):
            while True:
                with lock:
                    item = next(pending, None)
                if item is None:
                    return
                do(ws, item)

    n = min(threads, len(items))
    if n <= 1:
        worker()
        return
    with ThreadPoolExecutor(n - 1) as pool:
        helpers = [pool.submit(worker) for _ in range(n - 1)]
        worker()
        for f in helpers:
            f.result()


def _chunk(ws: Workspace, chunk: tuple[Block, ...]) -> None:
    """Evaluate and store one global chunk of a kernel that is not a contraction."""
    _store(ws, chunk, reduce_chunk(ws, chunk) if ws.plan.kernel.reduce is not None else None)


def _contract_chunk(p: Plan, flats: Sequence[np.ndarray], outputs: Sequence[np.ndarray], chunk: tuple[Block, ...],
                    threads: int) -> None:
    """A contraction over one global chunk: the matmul (into the output where it can), then the epilogue.

    A contraction's chunk is BLAS-sized: its epilogue runs in cache-sized pieces, on ``threads`` threads; it
    is skipped when the matmul wrote the output itself.  A single-output epilogue runs in place over the
    matmul's result unless its last node is a ``Where`` writing the output (whose first copy would overwrite
    the reduce values it reads); every other node reads a point's values before its output is written.
    """
    red = p.kernel.reduce
    assert red is not None
    (last, *more) = p.kernel.outputs
    window = None
    if not more and outputs[0].dtype == red.dtype.numpy and not (isinstance(last, Where) and p.slots.get(last) == -1):
        window = _window(outputs[0], chunk, tuple(n for _, n in chunk) + (1,) * len(red.vars))
    with np.errstate(all="ignore"):
        acc = _contract(Workspace(p, flats, outputs), chunk, window)
    if last == Acc(red.dtype) and window is not None and np.may_share_memory(acc, window):
        return

    def piece(ws: Workspace, blocks: tuple[Block, ...]) -> None:
        where = tuple(slice(s, s + n) for s, n in blocks)
        _store(ws, tuple((s0 + s, n) for (s0, _), (s, n) in zip(chunk, blocks)), acc[where])

    _spread(p, flats, outputs, list(itertools.product(*_blocks([n for _, n in chunk], CHUNK_ELEMENTS))), threads, piece)


def _reduce_part(p: Plan, chunk: tuple[Block, ...], rblocks: Sequence[tuple[Block, ...]],
                 flats: Sequence[np.ndarray]) -> np.ndarray:
    with np.errstate(all="ignore"):
        return reduce_blocks(Workspace(p, flats), chunk, rblocks)


def _split(items: Sequence[T], n: int) -> list[Sequence[T]]:
    """``items`` in ``n`` contiguous, nearly equal ranges (none empty)."""
    n = min(n, len(items))
    bounds = [len(items) * i // n for i in range(n + 1)]
    return [items[a:b] for a, b in itertools.pairwise(bounds)]


def run(p: Plan | RowPlan, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], threads: int = 1) -> None:
    """Evaluate planned kernel ``p`` on ``inputs``, writing every output array in place, on up to ``threads`` threads.

    Output arrays must not overlap the inputs.
    """
    if isinstance(p, RowPlan):
        temps: list[np.ndarray] = []
        for part in p.parts[:-1]:
            temps.append(np.empty(part.kernel.shape, part.kernel.output_types[0].dtype.numpy))
            run(part, [*inputs, *temps[:-1]], temps[-1:], threads)
        run(p.parts[-1], [*inputs, *temps], outputs, threads)
        return
    kernel = p.kernel
    assert len(outputs) == len(kernel.outputs)
    for out, t in zip(outputs, kernel.output_types):
        assert out.size == t.numel and out.dtype == t.dtype.numpy, (out.shape, out.dtype, t)
    if kernel.numel == 0:
        return
    flats = flat_inputs(kernel, inputs)
    for i, before, after in p.pads:
        flats.append(np.concatenate([np.zeros(before, flats[i].dtype), flats[i], np.zeros(after, flats[i].dtype)]))
    targets = [o if o.flags.c_contiguous else np.empty(o.shape, o.dtype) for o in outputs]
    _run(p, flats, [t.reshape(kernel.shape) for t in targets], threads)
    for out, target in zip(outputs, targets):
        if out is not target:
            out[...] = target


def _run(p: Plan, flats: Sequence[np.ndarray], outputs: Sequence[np.ndarray], threads: int) -> None:
    kernel = p.kernel
    chunks = list(p.chunks())
    rblocks = list(itertools.product(*p.reduce_blocks))
    if p.factors is not None:
        for chunk in chunks:
            _contract_chunk(p, flats, outputs, chunk, threads)
    elif threads > 1 and len(chunks) == 1 and kernel.reduce is not None and kernel.reduce.size and len(rblocks) > 1:
        (chunk,) = chunks
        with ThreadPoolExecutor(threads) as pool:
            parts = [f.result() for f in [pool.submit(_reduce_part, p, chunk, part, flats)
                                          for part in _split(rblocks, threads)]]
        total = parts[0]
        for part in parts[1:]:
            _combine(kernel.reduce.op)(total, part, out=total)
        with np.errstate(all="ignore"):
            _store(Workspace(p, flats, outputs), chunk, round_to(total, kernel.reduce.dtype))
    else:
        _spread(p, flats, outputs, chunks, threads, _chunk)


def evaluate(kernel: Kernel, inputs: Sequence[np.ndarray], max_elements: int = CHUNK_ELEMENTS, threads: int = 1,
             view_elements: int | None = MAX_ELEMENTS) -> list[np.ndarray]:
    """The outputs of ``kernel`` on ``inputs`` (arrays of its input buffers' shapes and dtypes)."""
    outputs = [np.empty(t.shape, t.dtype.numpy) for t in kernel.output_types]
    planned = plan_rows(kernel, max_elements, view_elements) if kernel.stages else plan(kernel, max_elements, view_elements)
    run(planned, inputs, outputs, threads)
    return outputs


@dataclass(frozen=True)
class RowPlan:
    """A row kernel prepared for evaluation: the plans of the ordinary kernels it fuses, in order."""

    kernel: Kernel
    parts: tuple[Plan, ...]
    """One per stage (its reduce, reading the earlier stages' results as inputs after the kernel's), then the
    outputs over the whole store shape (reading every stage's result)."""


def unfused(kernel: Kernel) -> list[Kernel]:
    """The ordinary kernels a row kernel fuses: stage ``i``'s reads inputs ``len(kernel.inputs) + j`` for stage
    ``j < i``'s results (``kernel.shape``-shaped), the last computes the outputs from all of them."""
    at = flatten([var(v) for v in kernel.vars], kernel.shape)
    temps = [Buffer(kernel.shape, s.dtype) for s in kernel.stages]
    loads = {Acc(s.dtype, i): Load(len(kernel.inputs) + i, at, kernel.numel, s.dtype) for i, s in enumerate(kernel.stages)}
    parts = []
    for i, s in enumerate(kernel.stages):
        (body,) = map_exprs([s.body], loads)
        parts.append(Kernel((*kernel.inputs, *temps[:i]), kernel.shape, kernel.vars, Reduce(s.op, s.vars, body),
                            (Acc(s.dtype),)))
    shape = tuple(v.size for v in kernel.store)
    parts.append(Kernel((*kernel.inputs, *temps), shape, kernel.store, None, tuple(map_exprs(kernel.outputs, loads))))
    return parts


def plan_rows(kernel: Kernel, max_elements: int = CHUNK_ELEMENTS, view_elements: int | None = MAX_ELEMENTS) -> RowPlan:
    """Prepare row kernel ``kernel``: ``plan`` of each kernel of ``unfused(kernel)``."""
    return RowPlan(kernel, tuple(plan(k, max_elements, view_elements) for k in unfused(kernel)))

"""The kernel IR: one loop nest over a global index space, at most one reduce loop, scalar expressions.

A ``Kernel`` reads contiguous input buffers and writes contiguous outputs, all
of the kernel's ``shape``.  For each point ``g`` of that shape it optionally runs
one reduce loop over ``reduce.vars`` (accumulating ``reduce.body``), then stores
each expression of ``outputs``; ``Acc`` in an output stands for the reduce's
result.  Views never appear: a permute, reshape, expand or pad of a tensor is
the ``Idx`` a ``Load`` reads at (and, for pads, a ``Where`` on index bounds).

Expressions are immutable and hashable; equal subexpressions are shared, so an
expression is a DAG and ``schedule`` lists each distinct node once.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from engine.egraph.egraph import Scalar
from engine.kernel.index import Idx, Var
from engine.program.dtypes import DType
from engine.program.primitives import Shape


class Expr:
    """Base of the scalar expressions; subclasses are frozen dataclasses with a cached hash."""

    dtype: DType

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash(tuple(getattr(self, f) for f in self.__dataclass_fields__)))

    def __hash__(self) -> int:
        return self._hash  # type: ignore[attr-defined]

    def children(self) -> tuple[Expr, ...]:
        return ()


@dataclass(frozen=True, eq=True)
class Load(Expr):
    """Element ``index`` of input buffer ``input`` (of ``size`` elements).

    ``clamped`` loads have an index that may leave the buffer in lanes a
    ``Where`` masks off; they read ``min(max(index, 0), size-1)`` instead.
    """

    input: int
    index: Idx
    size: int
    dtype: DType

    @property
    def clamped(self) -> bool:
        lo, hi = self.index.bounds
        return lo < 0 or hi >= self.size

    __hash__ = Expr.__hash__


@dataclass(frozen=True, eq=True)
class Const(Expr):
    value: Scalar
    dtype: DType

    __hash__ = Expr.__hash__


@dataclass(frozen=True, eq=True)
class Op(Expr):
    """A unary, binary or ``cast`` primitive applied to ``args`` (its result has ``dtype``)."""

    op: str
    args: tuple[Expr, ...]
    dtype: DType

    def children(self) -> tuple[Expr, ...]:
        return self.args

    __hash__ = Expr.__hash__


@dataclass(frozen=True)
class Bound:
    """``lo <= index < hi``."""

    index: Idx
    lo: int
    hi: int

    def __str__(self) -> str:
        return f"{self.lo} <= {self.index} < {self.hi}"


@dataclass(frozen=True, eq=True)
class Where(Expr):
    """``then`` where every bound holds, else ``otherwise`` (a pad)."""

    bounds: tuple[Bound, ...]
    then: Expr
    otherwise: Expr
    dtype: DType

    def children(self) -> tuple[Expr, ...]:
        return (self.then, self.otherwise)

    __hash__ = Expr.__hash__


@dataclass(frozen=True, eq=True)
class Acc(Expr):
    """The result of the kernel's reduce at the current global point."""

    dtype: DType

    __hash__ = Expr.__hash__


@dataclass(frozen=True)
class Reduce:
    """``op`` ("sum" or "max") of ``body`` over every value of ``vars``."""

    op: str
    vars: tuple[Var, ...]
    body: Expr

    @property
    def size(self) -> int:
        return math.prod(v.size for v in self.vars)

    @property
    def dtype(self) -> DType:
        return self.body.dtype


@dataclass(frozen=True)
class Buffer:
    """The type of a kernel input or output: a contiguous tensor."""

    shape: Shape
    dtype: DType

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize

    def __str__(self) -> str:
        return f"{self.dtype}[{', '.join(map(str, self.shape))}]"


@dataclass(frozen=True)
class Kernel:
    """One kernel: inputs, a global index space (``vars`` over ``shape``), an optional reduce, outputs."""

    inputs: tuple[Buffer, ...]
    shape: Shape
    vars: tuple[Var, ...]
    reduce: Reduce | None
    outputs: tuple[Expr, ...]
    key: str = field(init=False, compare=False)
    """A stable hash of the kernel's text: equal kernels have equal keys (the tuning cache's key)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", hashlib.sha256(format_kernel(self, "k").encode()).hexdigest()[:16])

    @property
    def name(self) -> str:
        return f"k_{self.key[:8]}"

    @property
    def output_types(self) -> tuple[Buffer, ...]:
        return tuple(Buffer(self.shape, e.dtype) for e in self.outputs)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def loads(self) -> Iterator[Load]:
        return (e for e in schedule(self.exprs()) if isinstance(e, Load))

    def exprs(self) -> list[Expr]:
        return [*self.outputs, *([self.reduce.body] if self.reduce else [])]

    def __str__(self) -> str:
        return format_kernel(self, self.name)


def schedule(roots: Iterable[Expr]) -> list[Expr]:
    """Every distinct node reachable from ``roots``, children before parents."""
    order: list[Expr] = []
    seen: set[Expr] = set()
    stack: list[tuple[Expr, bool]] = [(r, False) for r in reversed(list(roots))]
    while stack:
        e, expanded = stack.pop()
        if expanded:
            order.append(e)
            continue
        if e in seen:
            continue
        seen.add(e)
        stack.append((e, True))
        stack.extend((c, False) for c in reversed(e.children()) if c not in seen)
    return order


def reduce_dependent(kernel: Kernel) -> set[Expr]:
    """The body nodes that depend on a reduce variable (the rest can be hoisted out of the loop)."""
    if kernel.reduce is None:
        return set()
    rvars = set(kernel.reduce.vars)
    out: set[Expr] = set()
    for e in schedule([kernel.reduce.body]):
        if _index_vars(e) & rvars or any(c in out for c in e.children()):
            out.add(e)
    return out


def _index_vars(e: Expr) -> set[Var]:
    """The variables the indices of this one node (not its children) read."""
    if isinstance(e, Load):
        return e.index.variables()
    if isinstance(e, Where):
        return set().union(*(b.index.variables() for b in e.bounds))
    return set()


def describe(e: Expr, names: dict[Expr, str]) -> str:
    """One node as text, naming its children by ``names``."""
    if isinstance(e, Load):
        return f"in{e.input}[{e.index}]" + (" (clamped)" if e.clamped else "")
    if isinstance(e, Const):
        return f"{e.value}"
    if isinstance(e, Acc):
        return "acc"
    if isinstance(e, Where):
        return f"({' and '.join(map(str, e.bounds))}) ? {names[e.then]} : {names[e.otherwise]}"
    assert isinstance(e, Op)
    if e.op == "cast":
        return f"cast<{e.dtype}>({names[e.args[0]]})"
    return f"{e.op}({', '.join(names[a] for a in e.args)})"


def format_kernel(kernel: Kernel, name: str) -> str:
    """The kernel as readable pseudo-code: one SSA line per distinct expression."""
    ins = ", ".join(f"in{i}: {b}" for i, b in enumerate(kernel.inputs))
    outs = ", ".join(f"out{i}: {b}" for i, b in enumerate(kernel.output_types))
    lines = [f"kernel {name}({ins}) -> ({outs})"]
    loops = ", ".join(f"{v} < {v.size}" for v in kernel.vars) or "one point"
    lines.append(f"  for {loops}:")
    names: dict[Expr, str] = {}
    counter = itertools.count()
    inner = reduce_dependent(kernel)

    def emit(exprs: Sequence[Expr], indent: str, only: set[Expr] | None = None) -> None:
        for e in schedule(exprs):
            if e in names or (only is not None and e not in only):
                continue
            names[e] = f"v{next(counter)}"
            lines.append(f"{indent}{names[e]}: {e.dtype} = {describe(e, names)}")

    if kernel.reduce is not None:
        body = kernel.reduce.body
        emit([body], "    ", only=set(schedule([body])) - inner)
        rloops = ", ".join(f"{v} < {v.size}" for v in kernel.reduce.vars)
        lines.append(f"    acc: {kernel.reduce.dtype} = {kernel.reduce.op} over {rloops} of:")
        emit([body], "      ", only=inner | {body})
        lines.append(f"      {names[body]}")
        names[Acc(kernel.reduce.dtype)] = "acc"
    emit(kernel.outputs, "    ")
    for i, e in enumerate(kernel.outputs):
        lines.append(f"    out{i}[{'g' if kernel.vars else '0'}] = {names[e]}")
    return "\n".join(lines)

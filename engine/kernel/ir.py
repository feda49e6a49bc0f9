"""The kernel IR: one loop nest over a global index space, at most one reduce loop, scalar expressions.

A ``Kernel`` reads contiguous input buffers and writes contiguous outputs, all
of the kernel's ``shape``.  For each point ``g`` of that shape it optionally runs
one reduce loop over ``reduce.vars`` (accumulating ``reduce.body``), then stores
each expression of ``outputs``; ``Acc`` in an output stands for the reduce's
result.

A *row kernel* (``stages`` set, ``reduce`` None) fuses a chain of reduces over
one row with the elementwise output that uses them: for each point ``g`` it runs
the reduce of every stage in order (``Acc(dtype, i)`` is stage ``i``'s result;
a later stage's body may use it), then loops over the *row variables* (the
``store`` variables that are not global) and stores the outputs at every point
of the row.  Its outputs have the shape of ``store``; its ``shape`` (one point
per row) is the launch's index space.  A *siblings kernel* is a row kernel whose
row is one point (``store`` is ``vars``): independent reduces at each output
point, such as a gated unit's two products, side by side.

Views never appear: a permute, reshape, expand or pad of a tensor is the
``Idx`` a ``Load`` reads at (and, for pads, a ``Where`` on index bounds).

Expressions are immutable and hashable; equal subexpressions are shared, so an
expression is a DAG and ``schedule`` lists each distinct node once.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
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

    def __reduce__(self) -> tuple[type, tuple[object, ...]]:
        """Rebuilt from its fields, so that the hash is computed again: a hash cached in another process (another
        string-hash seed) would not match the same expression made here."""
        return type(self), tuple(getattr(self, f) for f in self.__dataclass_fields__)  # type: ignore[attr-defined]

    def children(self) -> tuple[Expr, ...]:
        return ()

    def index_vars(self) -> set[Var]:
        """The variables the indices of this one node (not its children) read."""
        return set()

    def rebuild(self, children: tuple[Expr, ...], index: Callable[[Idx], Idx]) -> Expr:
        """This node over ``children`` (its own, mapped), each index of its own mapped by ``index``."""
        return self


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

    def index_vars(self) -> set[Var]:
        return self.index.variables()

    def rebuild(self, children: tuple[Expr, ...], index: Callable[[Idx], Idx]) -> Expr:
        return Load(self.input, index(self.index), self.size, self.dtype)

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

    def rebuild(self, children: tuple[Expr, ...], index: Callable[[Idx], Idx]) -> Expr:
        return Op(self.op, children, self.dtype)

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

    def index_vars(self) -> set[Var]:
        return set().union(*(b.index.variables() for b in self.bounds))

    def rebuild(self, children: tuple[Expr, ...], index: Callable[[Idx], Idx]) -> Expr:
        then, otherwise = children
        return Where(tuple(Bound(index(b.index), b.lo, b.hi) for b in self.bounds), then, otherwise, self.dtype)

    __hash__ = Expr.__hash__


@dataclass(frozen=True, eq=True)
class Acc(Expr):
    """The result of the kernel's reduce (of a row kernel's stage ``stage``) at the current global point."""

    dtype: DType
    stage: int = 0

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


HOST = "host"
"""The host's memory pool (numpy arrays), where a program's inputs start and its outputs end: a pool of every
plan beside its devices' own (``engine.kernel.attach.ToDevice`` copies a class into one)."""


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
    """One kernel: inputs, a global index space (``vars`` over ``shape``), an optional reduce, outputs.

    A row kernel has ``stages`` instead of ``reduce`` and stores over ``store`` (see the module's text).
    """

    inputs: tuple[Buffer, ...]
    shape: Shape
    vars: tuple[Var, ...]
    reduce: Reduce | None
    outputs: tuple[Expr, ...]
    key: str = field(init=False, compare=False)
    """A stable hash of the kernel's text: equal kernels have equal keys (the tuning cache's key)."""
    stages: tuple[Reduce, ...] = ()
    """A row kernel's reduces, in order."""
    store: tuple[Var, ...] = ()
    """A row kernel's output axes: its global variables and its row variables, in the outputs' axis order."""

    def __post_init__(self) -> None:
        assert not self.stages or (self.reduce is None and set(self.vars) <= set(self.store)), "not a row kernel"
        object.__setattr__(self, "key", hashlib.sha256(format_kernel(self, "k").encode()).hexdigest()[:16])

    @property
    def name(self) -> str:
        return f"k_{self.key[:8]}"

    @property
    def output_types(self) -> tuple[Buffer, ...]:
        shape = tuple(v.size for v in self.store) if self.stages else self.shape
        return tuple(Buffer(shape, e.dtype) for e in self.outputs)

    @property
    def input_bytes(self) -> int:
        return sum(b.nbytes for b in self.inputs)

    @property
    def output_bytes(self) -> int:
        return sum(b.nbytes for b in self.output_types)

    @property
    def moved_bytes(self) -> int:
        """Bytes a launch must read and write at least: every input once, every output once."""
        return self.input_bytes + self.output_bytes

    @property
    def row(self) -> tuple[Var, ...]:
        """A row kernel's row variables (the store variables that are not global); empty for other kernels."""
        return tuple(v for v in self.store if v not in self.vars)

    @property
    def siblings(self) -> bool:
        """Whether this is a siblings kernel: a row kernel whose row is one point (see the module's text)."""
        return bool(self.stages) and not self.row

    @property
    def row_size(self) -> int:
        return math.prod(v.size for v in self.row)

    @property
    def reduces(self) -> tuple[Reduce, ...]:
        """The kernel's reduce (if any), or a row kernel's stages."""
        return (self.reduce,) if self.reduce is not None else self.stages

    def row_loops(self) -> list[tuple[list[Expr], set[Var], int]]:
        """A row kernel's loops per row, in order: (roots, loop variables, iterations) of each stage, then of the
        outputs over the row."""
        stages = [([s.body], set(s.vars), s.size) for s in self.stages]
        return [*stages, (list(self.outputs), set(self.row), self.row_size)]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def loads(self) -> Iterator[Load]:
        return (e for e in schedule(self.exprs()) if isinstance(e, Load))

    def exprs(self) -> list[Expr]:
        return [*self.outputs, *([self.reduce.body] if self.reduce else []), *(s.body for s in self.stages)]

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
    return dependent([kernel.reduce.body], set(kernel.reduce.vars))


def dependent(roots: Iterable[Expr], variables: set[Var]) -> set[Expr]:
    """The nodes under ``roots`` that depend on any of ``variables``."""
    out: set[Expr] = set()
    for e in schedule(roots):
        if e.index_vars() & variables or any(c in out for c in e.children()):
            out.add(e)
    return out


def map_exprs(roots: Sequence[Expr], table: Mapping[Expr, Expr] | None = None,
              index: Callable[[Idx], Idx] | None = None) -> list[Expr]:
    """``roots`` rebuilt bottom-up: a node of ``table`` becomes its value, every index (of a load, a bound, a
    code generator's own node) becomes ``index(idx)``, and every node above a changed one is rebuilt.

    The one substitution of the code base: lanes and unrolling (``lanes.rewrite``), split variables
    (``kernel.simplify``) and replaced subtrees (a row kernel's stages, a matmul's epilogue) all go through it.
    """
    memo: dict[Expr, Expr] = {}
    for e in schedule(roots):
        if table is not None and e in table:
            memo[e] = table[e]
            continue
        children = tuple(memo[c] for c in e.children())
        if index is None and all(new is old for new, old in zip(children, e.children())):
            memo[e] = e
        else:
            memo[e] = e.rebuild(children, index or _same)
    return [memo[r] for r in roots]


def _same(x: Idx) -> Idx:
    return x


def map_kernel(kernel: Kernel, table: Mapping[Expr, Expr] | None = None, index: Callable[[Idx], Idx] | None = None,
               loops: Callable[[tuple[Var, ...]], tuple[Var, ...]] = tuple) -> Kernel:
    """``kernel``'s outputs and reduce body rebuilt by ``map_exprs(., table, index)``, its loop variables by
    ``loops`` (the global ones giving the shape); a kernel without stages."""
    red = kernel.reduce
    mapped = map_exprs([*kernel.outputs, *([red.body] if red else [])], table, index)
    global_vars = loops(kernel.vars)
    reduce = Reduce(red.op, loops(red.vars), mapped[-1]) if red else None
    return Kernel(kernel.inputs, tuple(v.size for v in global_vars), global_vars, reduce,
                  tuple(mapped[: len(kernel.outputs)]))


def describe(e: Expr, names: dict[Expr, str]) -> str:
    """One node as text, naming its children by ``names``."""
    if isinstance(e, Load):
        return f"in{e.input}[{e.index}]" + (" (clamped)" if e.clamped else "")
    if isinstance(e, Const):
        return f"{e.value}"
    if isinstance(e, Acc):
        return f"acc{e.stage}" if e.stage else "acc"
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

    def emit(exprs: Sequence[Expr], indent: str, only: set[Expr] | None = None) -> None:
        for e in schedule(exprs):
            if e in names or (only is not None and e not in only):
                continue
            names[e] = f"v{next(counter)}"
            lines.append(f"{indent}{names[e]}: {e.dtype} = {describe(e, names)}")

    for i, red in enumerate(kernel.reduces):
        acc = f"acc{i}" if kernel.stages else "acc"
        body = red.body
        inner = dependent([body], set(red.vars))
        emit([body], "    ", only=set(schedule([body])) - inner)
        rloops = ", ".join(f"{v} < {v.size}" for v in red.vars)
        lines.append(f"    {acc}: {red.dtype} = {red.op} over {rloops} of:")
        emit([body], "      ", only=inner | {body})
        lines.append(f"      {names[body]}")
        names[Acc(red.dtype, i)] = acc
    indent, at = "    ", "g" if kernel.vars else "0"
    if kernel.row:
        inner = dependent(kernel.outputs, set(kernel.row))
        emit(kernel.outputs, indent, only=set(schedule(kernel.outputs)) - inner)
        lines.append(f"    for {', '.join(f'{v} < {v.size}' for v in kernel.row)}:")
        indent, at = "      ", ", ".join(map(str, kernel.store))
    emit(kernel.outputs, indent)
    for i, e in enumerate(kernel.outputs):
        lines.append(f"{indent}out{i}[{at}] = {names[e]}")
    return "\n".join(lines)

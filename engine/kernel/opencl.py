"""OpenCL C code generation: one ``Kernel`` becomes one ``__kernel`` function.

The kernel runs over a 1-D global range of ``numel(kernel.shape)`` work items (one
for a rank-0 shape); each work item derives its global variables from
``get_global_id(0)`` by the row-major strides, runs the reduce loop (if any) and
stores every output at its flat index.  Each distinct expression is one typed
temporary; the reduce body's loop-invariant part is computed before the loop.

Semantics follow ``engine.program.reference`` (numpy), with these choices:

* integer ``add``/``sub``/``mul``/``neg`` wrap (computed in unsigned arithmetic,
  so no signed-overflow undefined behaviour); integer ``div`` truncates toward
  zero and ``x / 0`` is 0; integer ``pow`` squares in unsigned arithmetic and a
  negative exponent gives 0 except for a base of +-1;
* float ``max`` and ``relu`` are ``np.maximum``: NaN propagates, and a tie (-0.0 and
  +0.0) gives the second operand, so ``relu(-0.0)`` is +0.0;
* bool is stored as ``uchar`` (0/1) and computed as ``bool``;
* f16 is stored as ``half`` (``vload_half``/``vstore_half_rte``, core OpenCL, no
  ``cl_khr_fp16`` needed) and computed in ``float``.  It is rounded to half at
  stores and at casts to f16 only, where the reference rounds after every op, so
  results may differ by a few half ulps (and an intermediate that overflows half
  stays finite here);
* index arithmetic is ``int`` unless some index could leave the int32 range
  (then ``long``); ``Div``/``Mod`` of operands that may be negative get floor
  semantics by adding a multiple of the divisor first.

Kernels using an op on a dtype it does not apply to (``sin`` of an int, ``and``
of floats, ...) raise ``UnsupportedKernelError``.

Variants (``engine.devices.base.Variant``; transforms in ``engine.kernel.lanes``):

* ``upcast``/``tile``: a work item computes ``upcast`` contiguous points of the
  last non-trivial axis times ``tile`` points of the axis before it (a register
  tile: loads shared by lanes are issued once);
* ``unroll``: the innermost reduce loop runs ``unroll`` iterations per step, then
  a remainder loop; accumulation order is unchanged;
* ``group``: one work-group per output point; its work items stride over the
  flattened reduce and combine their partials by a tree in local memory;
* ``smem`` (with a blocked work-group, see ``block``): the innermost reduce loop
  runs in tiles of ``smem`` steps; per tile the group's items copy, cooperatively
  and coalesced, every load that follows one tiled axis and the reduce (a
  matmul's two operands, ``staged_loads``) into local memory, synchronise, and
  compute their register tiles from it (aligned vector reads); steps past the
  last whole tile read global memory;
* float sums of more than ``SUM_BLOCK`` terms per loop accumulate each run of
  ``SUM_BLOCK`` terms into fresh partials first and add those to the
  accumulators (blocked summation: the rounding error grows with ``n / B + B``
  terms instead of ``n``), in every variant but the group reduce (a tree already);
* in any variant, loads of one buffer at consecutive constant offsets (lanes,
  unrolled iterations) become ``vloadN`` and contiguous unguarded stores
  ``vstoreN`` (N in 2, 4, 8, 16; only element alignment is required).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from engine.devices.base import DEFAULT_VARIANT, Variant
from engine.kernel.index import Div, Idx, Mod, Var, add, flatten, lit, scale, var
from engine.kernel.ir import Acc, Bound, Const, Expr, Kernel, Load, Op, Reduce, Where, schedule
from engine.kernel.lanes import (
    LaneAcc,
    Lanes,
    Staged,
    dependent,
    flat_reduce,
    lanes,
    rewrite,
    substitute,
    unroll,
    upcast_axes,
)
from engine.program.dtypes import DType
from engine.program.primitives import ARITHMETIC_OPS, COMPARE_OPS, LOGIC_OPS, UNARY_OPS

STORAGE = {
    DType.BOOL: "uchar",
    DType.I32: "int",
    DType.I64: "long",
    DType.F16: "half",
    DType.F32: "float",
    DType.F64: "double",
}
"""The C type of a buffer element."""

COMPUTE = {**STORAGE, DType.BOOL: "bool", DType.F16: "float"}
"""The C type a value is computed in."""

_UNSIGNED = {DType.I32: "uint", DType.I64: "ulong"}
_INT32_MAX = 2**31 - 1
_FLOAT_UNARY = ("exp2", "log2", "sin", "cos", "sqrt", "recip")
SUM_BLOCK = 64
"""Terms of a float sum accumulated into a fresh partial before it joins the accumulator (0: sequential)."""


class UnsupportedKernelError(ValueError):
    """The kernel uses something this code generator cannot express (an op on a dtype it does not apply to)."""


class InvalidVariantError(ValueError):
    """A variant that does not apply to the kernel (e.g. unroll without a reduce, a group that is no power of 2)."""


def variant_error(kernel: Kernel, variant: Variant) -> str | None:
    """Why ``variant`` cannot apply to ``kernel`` (device limits aside), or None."""
    if kernel.stages:
        return _rows.variant_error(kernel, variant)
    v = variant
    if min(v.upcast, v.tile, v.unroll) < 1 or min(v.group, v.smem) < 0 or (v.local_size is not None and v.local_size < 1):
        return f"non-positive parameter in {v}"
    last, before = upcast_axes(kernel)
    if v.upcast > 1 and last is None:
        return "upcast needs an axis of size > 1"
    if v.tile > 1 and before is None:
        return "tile needs two axes of size > 1"
    if v.unroll > 1 and (kernel.reduce is None or not kernel.reduce.vars):
        return "unroll needs a reduce loop"
    if v.group > 1:
        if kernel.reduce is None:
            return "group needs a reduce"
        if v.group & (v.group - 1):
            return f"group {v.group} is not a power of two"
        if (v.upcast, v.tile, v.unroll) != (1, 1, 1) or v.local_size not in (None, v.group):
            return "group excludes upcast, tile, unroll and another local size"
    if v.smem:
        return _staging_error(kernel, v)
    return None


def _staging_error(kernel: Kernel, v: Variant) -> str | None:
    shape = block(v)
    if shape is None or v.group > 1:
        return "smem needs a blocked work-group (tile > 1 and a power-of-two local size)"
    if kernel.reduce is None or not kernel.reduce.vars:
        return "smem needs a reduce loop"
    tiles = staging(kernel, v)
    if not tiles:
        return "smem needs a reduce load that follows one tiled axis"
    for t in tiles:
        if (t.width * v.smem) % (t.vector * shape[0] * shape[1]):
            return f"a {t.width} x {v.smem} tile does not split evenly across {v.local_size} work items"
    return None


def staged_loads(kernel: Kernel) -> list[tuple[Load, Var]]:
    """The reduce body's loads an ``smem`` variant stages: (load, the tiled axis it follows).

    A load is staged when its index reads the innermost reduce variable and exactly one of the two tiled axes
    (``upcast_axes``): a work-group's items then share its values over the group's block of that axis.
    """
    red = kernel.reduce
    last, before = upcast_axes(kernel)
    if red is None or not red.vars or before is None:
        return []
    out = []
    for e in schedule([red.body]):
        if isinstance(e, Load) and e.dtype in _VECTOR:
            vs = e.index.variables()
            axes = [a for a in (before, last) if a in vs]
            if red.vars[-1] in vs and len(axes) == 1:
                out.append((e, axes[0]))
    return out


@dataclass(frozen=True)
class Tile:
    """One staged load's local-memory tile: ``width`` points of ``axis`` (padded to ``stride``) by the reduce tile.

    The group's items fill it in ``vector``-element chunks along ``axis`` (``along_axis``) or along the reduce,
    whichever the load's index walks with unit stride (coalesced reads).
    """

    load: Load
    axis: Var
    width: int
    stride: int
    along_axis: bool
    vector: int


def staging(kernel: Kernel, variant: Variant) -> list[Tile]:
    """The local-memory tiles of ``kernel`` in the ``smem`` variant ``variant`` (empty if none applies)."""
    shape = block(variant)
    if shape is None or not variant.smem:
        return []
    _, before = upcast_axes(kernel)
    depth, items = variant.smem, shape[0] * shape[1]
    out = []
    for load, axis in staged_loads(kernel):
        assert kernel.reduce is not None
        width = shape[0] * variant.tile if axis == before else shape[1] * variant.upcast
        along_axis = abs(load.index.coefficient(axis)) == 1 or abs(load.index.coefficient(kernel.reduce.vars[-1])) != 1
        fast, size = (width, axis.size) if along_axis else (depth, depth)
        vector = next((n for n in (4, 2) if fast % n == 0 and size % n == 0 and (width * depth) % (n * items) == 0), 1)
        stride = width if along_axis else width + 4  # column writes at a stride off the 32 banks
        out.append(Tile(load, axis, width, stride, along_axis, vector))
    return out


def local_bytes(kernel: Kernel, variant: Variant) -> int:
    """Bytes of local memory the variant declares (group partials, staged tiles)."""
    if variant.group > 1 and kernel.reduce is not None:
        return variant.group * max(kernel.reduce.dtype.itemsize, 4)
    return sum(t.stride * variant.smem * t.load.dtype.itemsize * (2 if t.load.dtype == DType.F16 else 1)
               for t in staging(kernel, variant))


def function_name(kernel: Kernel, variant: Variant) -> str:
    """The ``__kernel`` function's name: ``kernel.name``, suffixed by the variant's tag unless it is the default."""
    return kernel.name if variant == DEFAULT_VARIANT else f"{kernel.name}_{variant.tag}"


def block(variant: Variant) -> tuple[int, int] | None:
    """(rows, columns) of the 2-D block of work items one work-group covers, or None for row-major order.

    A variant with a register tile (``tile > 1``) and a power-of-two local size lays its work-group out as a
    block of the two tiled axes, as square as the size allows (256: 16 x 16), so the items of a group share
    the rows of one operand and the columns of the other in cache.
    """
    local = variant.local_size
    if variant.tile <= 1 or local is None or local < 4 or local & (local - 1):
        return None
    columns = 1 << (local.bit_length() // 2)
    return local // columns, columns


def _blocks(kernel: Kernel, variant: Variant, shape: tuple[int, int]) -> tuple[int, int, int]:
    """(work-groups, blocks along the tile axis, blocks along the upcast axis) of a blocked launch."""
    plan = lanes(kernel, variant.upcast, variant.tile)
    last, before = upcast_axes(kernel)
    i, j = kernel.vars.index(before), kernel.vars.index(last)
    rows, columns = shape
    bp, bq = -(-plan.outer[i].size // rows), -(-plan.outer[j].size // columns)
    others = math.prod(v.size for n, v in enumerate(plan.outer) if n not in (i, j))
    return others * bp * bq, bp, bq


def launch_size(kernel: Kernel, variant: Variant) -> tuple[int, int | None]:
    """(global size, local size or None) of a 1-D launch of ``kernel`` in ``variant``."""
    if kernel.stages:
        return _rows.launch_size(kernel, variant)
    if variant.group > 1:
        return kernel.numel * variant.group, variant.group
    local = variant.local_size
    shape = block(variant)
    if shape is not None and kernel.numel and variant_error(kernel, variant) is None:
        return _blocks(kernel, variant, shape)[0] * local, local
    n = lanes(kernel, variant.upcast, variant.tile).numel if kernel.numel else 0
    return (n if local is None else math.ceil(n / local) * local), local


def applies(op: str, dtype: DType) -> bool:
    """Whether primitive ``op`` (unary, binary or ``cast``) applies to operands of ``dtype`` (the program's rules)."""
    if op == "cast" or op in COMPARE_OPS:
        return True
    if op == "not" or op in LOGIC_OPS:
        return dtype == DType.BOOL
    if op in _FLOAT_UNARY:
        return dtype.is_float
    if op in UNARY_OPS or op in ARITHMETIC_OPS:
        return dtype != DType.BOOL
    return False


def extensions(kernel: Kernel) -> frozenset[str]:
    """The OpenCL extensions the generated source needs (``cl_khr_fp64`` when any value is f64)."""
    dtypes = {b.dtype for b in kernel.inputs} | {e.dtype for e in schedule(kernel.exprs())}
    return frozenset({"cl_khr_fp64"} if DType.F64 in dtypes else ())


def check(kernel: Kernel) -> None:
    """Raise ``UnsupportedKernelError`` if ``generate`` cannot express ``kernel``."""
    reduces = kernel.reduces
    for red in reduces:
        if red.op not in ("sum", "max"):
            raise UnsupportedKernelError(f"reduce {red.op!r} (expected sum or max)")
    for e in schedule(kernel.exprs()):
        if isinstance(e, Op) and not applies(e.op, e.args[0].dtype):
            raise UnsupportedKernelError(f"{e.op} does not apply to {e.args[0].dtype}")
        if isinstance(e, Acc) and (e.stage >= len(reduces) or e.dtype != reduces[e.stage].dtype):
            raise UnsupportedKernelError("acc without a reduce of its dtype")
    _rows.check(kernel)


@functools.lru_cache(maxsize=1024)
def generate(kernel: Kernel, variant: Variant = DEFAULT_VARIANT) -> str:
    """OpenCL C source of one ``__kernel void <kernel.name>(inputs..., outputs...)``.

    Memoized (a plan's execution asks for each of its kernels' sources to find the built programs, and a big
    kernel takes milliseconds to generate); equal kernels and variants have equal sources.

    A set ``variant.local_size`` (or ``group``) adds a ``reqd_work_group_size``
    attribute (the launch rounds the global size up to it; the extra work items
    return at once).  The function is named ``function_name(kernel, variant)``.
    Raises ``InvalidVariantError`` for a variant that does not apply.
    """
    return program_source([(kernel, variant)])


def program_source(items: list[tuple[Kernel, Variant]], emitter: Callable[[Kernel, Variant], _Emitter] | None = None
                   ) -> str:
    """One program holding the kernel functions of ``items`` (built together: a build costs ~0.3 s on PoCL).

    Their names must differ; pragmas and helper functions are emitted once.  ``emitter`` makes each
    function's emitter (default ``_Emitter``; the C backend passes its subclass).
    """
    parts = [(emitter or (_rows.RowEmitter if kernel.stages else _Emitter))(kernel, variant).parts()
             for kernel, variant in items]
    names = [function_name(kernel, variant) for kernel, variant in items]
    assert len(set(names)) == len(names), "one program cannot hold two functions of one name"
    head = dict.fromkeys(line for lines, _ in parts for line in lines)
    return "".join(head) + "".join(function for _, function in parts)


# -- literals -----------------------------------------------------------------------


def literal(value: bool | int | float, dtype: DType) -> str:
    """A C literal of ``value`` in ``dtype``'s compute type (full precision; inf/nan as INFINITY/NAN)."""
    if dtype == DType.BOOL:
        return "true" if value else "false"
    if dtype.is_int:
        n = int(value)
        suffix = "L" if dtype == DType.I64 else ""
        bits = 8 * dtype.itemsize
        if n == -(2 ** (bits - 1)):
            return f"({n + 1}{suffix} - 1{suffix})"
        return f"({n}{suffix})" if n < 0 else f"{n}{suffix}"
    x = float(value)
    double = dtype == DType.F64
    if math.isnan(x):
        return "(double)NAN" if double else "NAN"
    if math.isinf(x):
        text = "INFINITY" if x > 0 else "(-INFINITY)"
        return f"(double){text}" if double else text
    # f16 is computed in float: print its exact value as the shortest float literal that round-trips
    text = repr(x) if double else str(np.float32(np.float16(x) if dtype == DType.F16 else x))
    if "." not in text and "e" not in text:
        text += ".0"
    text += "" if double else "f"
    return f"({text})" if text.startswith("-") else text


def _zero(dtype: DType) -> str:
    return literal(0, dtype)


# -- index expressions --------------------------------------------------------------


def _floor_offset(num: Idx, k: int) -> int:
    """A multiple of ``k`` that makes ``num`` non-negative (0 when it already is)."""
    lo = num.bounds[0]
    return 0 if lo >= 0 else -(lo // k) * k


def _magnitude(x: Idx) -> int:
    """An upper bound of every partial sum's absolute value while evaluating ``x`` in C."""
    total = abs(x.const)
    for atom, c in x.terms:
        m = atom.size if isinstance(atom, Var) else _magnitude(atom.num) + _floor_offset(atom.num, atom.k)
        total += abs(c) * max(m, abs(atom.bounds[0]), abs(atom.bounds[1]))
    return total


def _indices(kernel: Kernel) -> list[Idx]:
    out: list[Idx] = []
    for e in schedule(kernel.exprs()):
        if isinstance(e, Load):
            out.append(e.index)
        elif isinstance(e, Where):
            out.extend(b.index for b in e.bounds)
    return out


class _Emitter:
    """Builds the source of one kernel (names of temporaries, helper functions, lines)."""

    vectors = True
    """Whether runs of loads and stores become ``vloadN``/``vstoreN`` (a C backend leaves that to its compiler)."""
    sum_block = SUM_BLOCK
    """Terms per partial of a blocked float sum (0: one running sum)."""

    def __init__(self, kernel: Kernel, variant: Variant) -> None:
        error = variant_error(kernel, variant)
        if error is not None:
            raise InvalidVariantError(f"{variant} does not apply to {kernel.name}: {error}")
        self.kernel = kernel
        self.variant = variant
        self.local_size = variant.group if variant.group > 1 else variant.local_size
        self.vars: dict[Var, str] = {v: f"g{i}" for i, v in enumerate(kernel.vars)}
        if kernel.reduce is not None:
            self.vars |= {v: f"r{i}" for i, v in enumerate(kernel.reduce.vars)}
        sizes = [kernel.numel, *(b.numel for b in kernel.inputs), *map(_magnitude, _indices(kernel))]
        # lanes past a non-divisible end and group strides overshoot indices a little: keep a margin
        self.itype = "long" if 2 * max(sizes) + 64 > _INT32_MAX else "int"
        self.names: dict[Expr, str] = {}
        self.helpers: dict[str, str] = {}
        self.lines: list[str] = []
        self.count = 0
        self.late_guard = ""
        """The return of items past an end, when it must wait for the reduce's barriers."""

    # index arithmetic

    def ilit(self, n: int) -> str:
        text = f"{n}L" if self.itype == "long" else str(n)
        return f"({text})" if n < 0 else text

    def index(self, x: Idx) -> str:
        parts = []
        for atom, c in x.terms:
            a = self.atom(atom)
            parts.append(a if c == 1 else f"-{a}" if c == -1 else f"{c}*{a}")
        if x.const or not parts:
            parts.append(str(x.const))
        return " + ".join(parts).replace("+ -", "- ")

    def atom(self, atom: Var | Div | Mod) -> str:
        if isinstance(atom, Var):
            return self.vars[atom]
        m = _floor_offset(atom.num, atom.k)
        num = self.index(atom.num) + (f" + {m}" if m else "")
        if isinstance(atom, Div):
            return f"(({num}) / {atom.k} - {m // atom.k})" if m else f"(({num}) / {atom.k})"
        return f"(({num}) % {atom.k})"

    def condition(self, e: Where) -> str:
        return self.bounds(e.bounds)

    def bounds(self, bounds: tuple[Bound, ...]) -> str:
        """C condition of ``bounds``, leaving out the checks the index ranges prove; ``0`` when they prove one
        false (a constant operand of ``&&`` makes compilers warn)."""
        checks = []
        for b in bounds:
            lo, hi = b.index.bounds
            if hi < b.lo or lo >= b.hi:
                return "0"
            text = self.index(b.index)
            if lo < b.lo:
                checks.append(f"{text} >= {b.lo}")
            if hi >= b.hi:
                checks.append(f"{text} < {b.hi}")
        return " && ".join(f"({c})" for c in checks)

    # expressions

    def load(self, e: Load) -> str:
        idx = self.index(e.index)
        if e.clamped:
            lo, hi = e.index.bounds
            if lo < 0:
                idx = f"max({idx}, {self.ilit(0)})"
            if hi >= e.size:
                idx = f"min({idx}, {self.ilit(max(e.size - 1, 0))})"
        buf = f"in{e.input}"
        if e.dtype == DType.F16:
            return f"vload_half({idx}, {buf})"
        if e.dtype == DType.BOOL:
            return f"({buf}[{idx}] != 0)"
        return f"{buf}[{idx}]"

    def expr(self, e: Expr) -> str:
        if isinstance(e, Load):
            return self.load(e)
        if isinstance(e, Const):
            return literal(e.value.array().astype(e.dtype.numpy).item(), e.dtype)
        if isinstance(e, Acc):
            return "acc"
        if isinstance(e, Staged):
            return f"zx_s{e.buffer}[{self.index(e.index)}]"
        if isinstance(e, Where):
            cond = self.condition(e)
            then, otherwise = self.names[e.then], self.names[e.otherwise]
            return f"({cond}) ? {then} : {otherwise}" if cond else then
        assert isinstance(e, Op), e
        return self.op(e)

    def op(self, e: Op) -> str:
        a = [self.names[x] for x in e.args]
        src = e.args[0].dtype
        t = COMPUTE[e.dtype]
        if e.op == "cast":
            if e.dtype == DType.BOOL:
                return a[0] if src == DType.BOOL else f"{a[0]} != 0"
            if e.dtype == DType.F16 and src != DType.F16:
                return f"{self.round_half(src)}({a[0]})"
            return a[0] if COMPUTE[src] == t else f"({t}){a[0]}"
        if len(a) == 1:
            return self.unary(e.op, a[0], src)
        return self.binary(e.op, a[0], a[1], src)

    def unary(self, op: str, x: str, dtype: DType) -> str:
        if op == "neg":
            return f"({COMPUTE[dtype]})(-({_UNSIGNED[dtype]}){x})" if dtype.is_int else f"-{x}"
        if op == "relu":
            if dtype.is_float:
                return f"({x} > {_zero(dtype)} || isnan({x})) ? {x} : {_zero(dtype)}"
            return f"{x} < {_zero(dtype)} ? {_zero(dtype)} : {x}"
        if op == "recip":
            return f"{literal(1, dtype)} / {x}"
        if op == "not":
            return f"!{x}"
        if op == "exp2":  # PoCL folds exp2 of a NaN it can prove (a NaN constant times x) to garbage
            return f"isnan({x}) ? {x} : exp2({x})"
        return f"{op}({x})"

    def binary(self, op: str, x: str, y: str, dtype: DType) -> str:
        t = COMPUTE[dtype]
        if op in ("add", "sub", "mul"):
            sign = {"add": "+", "sub": "-", "mul": "*"}[op]
            if dtype.is_int:
                u = _UNSIGNED[dtype]
                return f"({t})(({u}){x} {sign} ({u}){y})"
            return f"{x} {sign} {y}"
        if op == "div":
            if dtype.is_int:
                minus = f"({t})(-({_UNSIGNED[dtype]}){x})"  # x / -1 wraps at the minimum instead of trapping
                return f"{y} == 0 ? {_zero(dtype)} : {y} == {literal(-1, dtype)} ? {minus} : {x} / {y}"
            return f"{x} / {y}"
        if op == "pow":
            return f"{self.int_pow(dtype)}({x}, {y})" if dtype.is_int else f"pow({x}, {y})"
        if op == "max":
            return f"max({x}, {y})" if dtype.is_int else f"({x} > {y} || isnan({x})) ? {x} : {y}"
        sign = {"cmplt": "<", "cmpgt": ">", "eq": "==", "noteq": "!=", "and": "&&", "or": "||"}[op]
        return f"{x} {sign} {y}"

    def int_pow(self, dtype: DType) -> str:
        """The helper computing ``reference._power`` for an integer dtype (defined once per source)."""
        t, u = COMPUTE[dtype], _UNSIGNED[dtype]
        name = f"zx_pow_{t}"
        self.helpers[name] = (
            f"{t} {name}({t} a, {t} b) {{\n"
            f"  if (b < 0) return (a == 1 || a == -1) ? ((b & 1) ? a : 1) : 0;\n"
            f"  {u} r = 1, x = ({u})a;\n"
            f"  for ({u} e = ({u})b; e != 0; e >>= 1) {{\n"
            f"    if (e & 1) r *= x;\n"
            f"    x *= x;\n"
            f"  }}\n"
            f"  return ({t})r;\n"
            f"}}\n"
        )
        return name

    def round_half(self, src: DType) -> str:
        """The helper rounding a ``src`` value to the nearest half (as a float), for casts to f16."""
        t = "double" if src == DType.F64 else "float"
        name = f"zx_half_of_{t}"
        self.helpers[name] = (
            f"float {name}({t} x) {{\n"
            f"  ushort bits;\n"
            f"  vstore_half_rte(x, 0, (__private half*)&bits);\n"
            f"  return vload_half(0, (__private const half*)&bits);\n"
            f"}}\n"
        )
        return name

    def emit(self, roots: list[Expr], indent: str, only: set[Expr] | None = None) -> list[Expr]:
        """Declare a temporary for each node of ``roots`` not yet named (restricted to ``only``); returns them.

        Loads of one buffer at consecutive offsets are read first, by vector loads.
        """
        order = [e for e in schedule(roots) if e not in self.names and (only is None or e in only)]
        new = self.vector_loads([e for e in order if isinstance(e, Load)], indent)
        new += self.staged_reads([e for e in order if isinstance(e, Staged)], indent)
        for e in order:
            if e in self.names:
                continue
            text = self.expr(e)
            name = f"t{self.count}"
            self.count += 1
            self.lines.append(f"{indent}const {COMPUTE[e.dtype]} {name} = {text};")
            self.names[e] = name
            new.append(e)
        return new

    def vector_loads(self, loads: list[Load], indent: str) -> list[Expr]:
        """Emit ``vloadN`` for runs of ``loads`` at consecutive offsets; name their lanes; returns the loads named."""
        ok = [e for e in loads if not e.clamped and e.dtype in _VECTOR] if self.vectors else []
        named: list[Expr] = []
        for base, run in _runs([((e.input, e.dtype), e.index, e) for e in ok]):
            if len(run) < 2:
                continue
            n, dtype, buf = len(run), run[0].dtype, f"in{run[0].input}"
            name = f"v{self.count}"
            self.count += 1
            fn = f"vload_half{n}" if dtype == DType.F16 else f"vload{n}"
            self.lines.append(f"{indent}const {COMPUTE[dtype]}{n} {name} = {fn}(0, {buf} + ({self.index(base)}));")
            for lane, e in enumerate(run):
                self.names[e] = f"{name}.s{lane:x}"
                named.append(e)
        return named

    def staged_reads(self, reads: list[Staged], indent: str) -> list[Expr]:
        """Emit vector reads (aligned casts where the offset is a multiple of the width) of runs of ``reads``."""
        named: list[Expr] = []
        for base, run in _runs([((e.buffer, e.dtype), e.index, e) for e in reads], widths=(4, 2, 1)):
            if len(run) < 2:
                continue
            n, t, buf = len(run), COMPUTE[run[0].dtype], f"zx_s{run[0].buffer}"
            at = f"{buf} + ({self.index(base)})"
            aligned = base.const % n == 0 and all(c % n == 0 for _, c in base.terms)
            name = f"v{self.count}"
            self.count += 1
            read = f"*(__local const {t}{n}*)({at})" if aligned else f"vload{n}(0, {at})"
            self.lines.append(f"{indent}const {t}{n} {name} = {read};")
            for lane, e in enumerate(run):
                self.names[e] = f"{name}.s{lane:x}"
                named.append(e)
        return named

    # the kernel

    def init(self, red: Reduce) -> str:
        dtype = red.dtype
        if red.op == "sum":
            return _zero(dtype)
        if dtype.is_float:
            return "(double)(-INFINITY)" if dtype == DType.F64 else "(-INFINITY)"
        return {DType.BOOL: "false", DType.I32: "INT_MIN", DType.I64: "LONG_MIN"}[dtype]

    def combine(self, red: Reduce, a: str, b: str) -> str:
        """``a`` and ``b`` combined by the reduce's op."""
        dtype, t = red.dtype, COMPUTE[red.dtype]
        if dtype == DType.BOOL:
            return f"{a} || {b}"
        if red.op == "sum":
            return f"({t})(({_UNSIGNED[dtype]}){a} + ({_UNSIGNED[dtype]}){b})" if dtype.is_int else f"{a} + {b}"
        return f"max({a}, {b})" if dtype.is_int else f"({a} > {b} || isnan({a})) ? {a} : {b}"

    def loop(self, v: Var, indent: str, start: str = "0", step: int = 1, stop: str | None = None) -> str:
        name = self.vars[v]
        inc = f"++{name}" if step == 1 else f"{name} += {step}"
        self.lines.append(f"{indent}for ({self.itype} {name} = {start}; {name} < {stop or v.size}; {inc}) {{")
        return indent + "  "

    def add_steps(self, steps: list[list[Expr]], indent: str, scope: set[Expr], target: str) -> list[Expr]:
        """Emit ``steps`` (each a body per lane) and add them into ``<target><lane>``; returns the nodes named."""
        red = self.kernel.reduce
        assert red is not None
        scoped = self.emit([b for step in steps for b in step], indent, only=scope)
        for step in steps:
            for lane, b in enumerate(step):
                self.lines.append(f"{indent}{target}{lane} = {self.combine(red, f'{target}{lane}', self.names[b])};")
        return scoped

    def accumulate(self, v: Var, per_trip: int, lanes_n: int, indent: str, body: Callable[[str, str], None]) -> None:
        """A loop over ``v`` whose ``body(indent, target)`` adds ``per_trip`` terms per lane into ``target<lane>``.

        A float sum of more than ``SUM_BLOCK`` terms runs the loop in blocks of ``SUM_BLOCK // per_trip`` trips,
        each summed into fresh partials ``zp<lane>`` that are then added to ``acc<lane>``.
        """
        red = self.kernel.reduce
        assert red is not None
        block = self.sum_block
        trips = max(1, block // per_trip) if red.op == "sum" and red.dtype.is_float and block else v.size
        if trips >= v.size:
            body(self.loop(v, indent), "acc")
            self.lines.append(f"{indent}}}")
            return
        t, c = COMPUTE[red.dtype], f"{self.vars[v]}b"
        self.lines.append(f"{indent}for ({self.itype} {c} = 0; {c} < {v.size}; {c} += {trips}) {{")
        inner = indent + "  "
        self.lines += [f"{inner}{t} zp{lane} = {self.init(red)};" for lane in range(lanes_n)]
        end = f"{c} + {trips}" if v.size % trips == 0 else f"({c} + {trips} < {v.size} ? {c} + {trips} : {v.size})"
        body(self.loop(v, inner, start=c, stop=end), "zp")
        self.lines.append(f"{inner}}}")
        self.lines += [f"{inner}acc{lane} = {self.combine(red, f'acc{lane}', f'zp{lane}')};" for lane in range(lanes_n)]
        self.lines.append(f"{indent}}}")

    def reduce(self, bodies: list[Expr]) -> None:
        """The reduce loops of every lane (``bodies``, one per lane), accumulating into ``acc<lane>``."""
        red = self.kernel.reduce
        assert red is not None
        t = COMPUTE[red.dtype]
        for lane in range(len(bodies)):
            self.lines.append(f"  {t} acc{lane} = {self.init(red)};")
        if not red.vars:
            for lane, b in enumerate(bodies):
                self.emit([b], "  ")
                self.lines.append(f"  acc{lane} = {self.combine(red, f'acc{lane}', self.names[b])};")
            return
        *outer, last = red.vars
        main, mains, rest, rsub = unroll(last, self.variant.unroll)
        self.vars[main] = self.vars[rest] = self.vars[last]
        steps = [rewrite(bodies, s) for s in mains]  # [iteration][lane]
        tail = rewrite(bodies, rsub) if rest.size else []
        roots = [b for step in steps for b in step] + tail
        inner = dependent(roots, {*outer, main, rest})
        self.emit(roots, "  ", only=set(schedule(roots)) - inner - set(roots))
        indent = "  "
        for v in outer:
            indent = self.loop(v, indent)
        scope = inner | set(roots)
        for v, loop_steps in ((main, steps), (rest, [tail] if tail else [])):
            if loop_steps and v.size:
                self.accumulate(v, len(loop_steps), len(bodies), indent,
                                lambda at, target, ls=loop_steps: self.forget(self.add_steps(ls, at, scope, target)))
        for _ in outer:
            indent = indent[:-2]
            self.lines.append(f"{indent}}}")

    def forget(self, scoped: list[Expr]) -> None:
        """Drop the names of nodes defined inside a loop (out of scope after it)."""
        for e in scoped:
            del self.names[e]

    def tiled_reduce(self, plan: Lanes, bodies: list[Expr]) -> None:
        """The reduce of an ``smem`` variant: per tile of the innermost reduce loop, the group stages its tiles
        of the staged loads in local memory, synchronises, and every lane reads them from there.

        Accumulation order per lane is unchanged (tile by tile, step by step); the steps past the last whole
        tile read global memory.  Every item runs every barrier: items past an end return after the reduce.
        """
        k, red, v = self.kernel, self.kernel.reduce, self.variant
        assert red is not None
        rows, columns = block(v) or (1, 1)
        last, before = upcast_axes(k)
        *outer, r = red.vars
        depth = v.smem
        tiles = staging(k, v)
        kt, kk, rr = Var("zkt", r.size // depth), Var("zkk", depth), Var("zrr", r.size % depth)
        self.vars |= {kt: "zkt", kk: "zkk", rr: "zrr"}
        ty, tx = Var("zty", rows), Var("ztx", columns)
        self.vars |= {ty: "zty", tx: "ztx"}
        spots = {before: Var("zti", rows * v.tile), last: Var("ztj", columns * v.upcast)}
        staged = {t.load: Staged(n, add(scale(var(kk), t.stride), var(spots[t.axis])), kt, t.load.dtype)
                  for n, t in enumerate(tiles)}
        (body,) = rewrite([red.body], {r: add(scale(var(kt), depth), var(kk))}, replace=staged)
        main, mains, rest, rsub = unroll(kk, v.unroll)
        self.vars[main] = self.vars[rest] = "zkk"
        tiled = []
        for lane in plan.lanes:
            u, w = (lane.subst[a].const if a in lane.subst else 0 for a in (before, last))
            where = {spots[before]: add(scale(var(ty), v.tile), lit(u)), spots[last]: add(scale(var(tx), v.upcast), lit(w))}
            tiled.append(rewrite(rewrite([body], lane.subst), where)[0])
        steps = [rewrite(tiled, m) for m in mains]
        tail = rewrite(tiled, rsub) if rest.size else []
        remainder = rewrite(bodies, {r: add(var(rr), lit(depth * kt.size))}) if rr.size else []
        roots = [b for step in steps for b in step] + tail + remainder
        inner = dependent(roots, {*outer, kt, main, rest, rr})
        self.emit(roots, "  ", only=set(schedule(roots)) - inner - set(roots))
        self.lines += [f"  {COMPUTE[red.dtype]} acc{lane} = {self.init(red)};" for lane in range(len(bodies))]
        for n, tile in enumerate(tiles):
            self.lines.append(f"  __local {COMPUTE[tile.load.dtype]} zx_s{n}[{tile.stride * depth}]"
                              " __attribute__((aligned(32)));")
        indent = "  "
        for u in outer:
            indent = self.loop(u, indent)
        scope = inner | set(roots)

        def tile_body(at: str, target: str) -> None:
            scoped = self.stage(tiles, at)
            self.lines.append(f"{at}barrier(CLK_LOCAL_MEM_FENCE);")
            for u, loop_steps in ((main, steps), (rest, [tail] if tail else [])):
                if loop_steps and u.size:
                    self.forget(self.add_steps(loop_steps, self.loop(u, at), scope, target))
                    self.lines.append(f"{at}}}")
            self.lines.append(f"{at}barrier(CLK_LOCAL_MEM_FENCE);")
            self.forget(scoped)

        if kt.size:
            self.accumulate(kt, depth, len(bodies), indent, tile_body)
        if remainder:
            self.accumulate(rr, 1, len(bodies), indent,
                            lambda at, target: self.forget(self.add_steps([remainder], at, scope, target)))
        for _ in outer:
            indent = indent[:-2]
            self.lines.append(f"{indent}}}")

    def stage(self, tiles: list[Tile], indent: str) -> list[Expr]:
        """Copy this reduce tile of every staged load into local memory, the group's items sharing the work.

        Item ``lid`` copies chunks ``lid, lid + items, ...`` of ``vector`` elements, consecutive along the axis
        the load's index walks with unit stride; rows past the axis' end read its last valid chunk (their
        results are never stored).  Returns the nodes named (scoped to the loop).
        """
        k, v, it = self.kernel, self.variant, self.itype
        assert k.reduce is not None
        r, depth = k.reduce.vars[-1], v.smem
        rows, columns = block(v) or (1, 1)
        items = rows * columns
        _, before = upcast_axes(k)
        named: list[Expr] = []
        for n, tile in enumerate(tiles):
            vec, origin = tile.vector, "zbi" if tile.axis == before else "zbj"
            fast = tile.width if tile.along_axis else depth
            for c in range(tile.width * depth // (vec * items)):
                e, a, q = f"zs{n}e{c}", f"zs{n}a{c}", f"zs{n}k{c}"
                self.lines.append(f"{indent}const {it} {e} = (lid + {c * items}) * {vec};")
                spot, step = (f"{e} % {fast}", f"{e} / {fast}") if tile.along_axis else (f"{e} / {fast}", f"{e} % {fast}")
                self.lines.append(f"{indent}const {it} {a} = {spot};")
                self.lines.append(f"{indent}const {it} {q} = {step};")
                ga = Var(f"zs{n}g{c}", tile.axis.size - (vec - 1 if tile.along_axis else 0))
                gr = Var(f"zs{n}r{c}", r.size - (0 if tile.along_axis else vec - 1))
                at = f"{origin} + {a}"
                self.lines.append(f"{indent}const {it} {ga.name} = min({at}, {self.ilit(ga.size - 1)});")
                self.lines.append(f"{indent}const {it} {gr.name} = zkt * {depth} + {q};")
                self.vars |= {ga: ga.name, gr: gr.name}
                loads = []
                for lane in range(vec):
                    da, dr = (lane, 0) if tile.along_axis else (0, lane)
                    m = {tile.axis: add(var(ga), lit(da)), r: add(var(gr), lit(dr))}
                    loads.append(Load(tile.load.input, substitute(tile.load.index, m), tile.load.size, tile.load.dtype))
                named += self.emit(loads, indent)
                for lane, load in enumerate(loads):
                    row, col = (q, f"{a} + {lane}") if tile.along_axis else (f"({q} + {lane})", a)
                    self.lines.append(f"{indent}zx_s{n}[{row} * {tile.stride} + {col}] = {self.names[load]};")
        return named

    def group_reduce(self) -> None:
        """The reduce split across the work-group: strided partial loops, then a tree in local memory."""
        red = self.kernel.reduce
        assert red is not None
        g, it, t = self.variant.group, self.itype, COMPUTE[red.dtype]
        flat, sub = flat_reduce(red.vars)
        self.vars[flat] = "ri"
        (body,) = rewrite([red.body], sub)
        inner = dependent([body], {flat}) | {body}
        self.emit([body], "  ", only=set(schedule([body])) - inner)
        self.lines.append(f"  {t} acc0 = {self.init(red)};")
        indent = self.loop(flat, "  ", start="lid", step=g)
        scoped = self.emit([body], indent, only=inner)
        self.lines.append(f"{indent}acc0 = {self.combine(red, 'acc0', self.names[body])};")
        self.lines.append("  }")
        for e in scoped:
            del self.names[e]
        part = "int" if red.dtype == DType.BOOL else t
        self.lines += [
            f"  __local {part} zx_part[{g}];",
            "  zx_part[lid] = acc0;",
            "  barrier(CLK_LOCAL_MEM_FENCE);",
            f"  for ({it} s = {g // 2}; s > 0; s >>= 1) {{",
            f"    if (lid < s) zx_part[lid] = {self.combine(red, 'zx_part[lid]', 'zx_part[lid + s]')};",
            "    barrier(CLK_LOCAL_MEM_FENCE);",
            "  }",
            "  if (lid != 0) return;",
            "  acc0 = zx_part[0];",
        ]

    def parts(self) -> tuple[list[str], str]:
        """The preamble lines (pragmas, helper functions) and the kernel function."""
        k = self.kernel
        assert len(k.vars) == len(k.shape), (k.vars, k.shape)
        check(k)
        self.body()
        params = [f"__global const {STORAGE[b.dtype]}* in{i}" for i, b in enumerate(k.inputs)]
        params += [f"__global {STORAGE[b.dtype]}* out{i}" for i, b in enumerate(k.output_types)]
        head = [f"#pragma OPENCL EXTENSION {x} : enable\n" for x in sorted(extensions(k))]
        head += [f"{h}\n" for h in self.helpers.values()]
        attr = f"__attribute__((reqd_work_group_size({self.local_size}, 1, 1))) " if self.local_size else ""
        signature = f"__kernel {attr}void {function_name(k, self.variant)}({', '.join(params)}) {{"
        return head, "\n".join([signature, *self.lines, "}"]) + "\n"

    def decompose(self, index: str, vs: tuple[Var, ...]) -> None:
        """Declare each variable of ``vs`` (size > 1) from the row-major flat ``index``."""
        it = self.itype
        stride = math.prod(v.size for v in vs)
        for i, v in enumerate(vs):
            stride //= max(v.size, 1)
            if v.size <= 1:
                continue
            value = index if stride == 1 else f"({index} / {stride})"
            value = value if all(u.size <= 1 for u in vs[:i]) else f"{value} % {v.size}"
            self.lines.append(f"  const {it} {self.vars[v]} = {value};")

    def blocked(self, plan: Lanes, shape: tuple[int, int]) -> None:
        """Declare the tiled axes' variables from the work-group's block and the local id (see ``block``).

        The other axes come from the group id (``decompose`` of ``gid``); items past an end return.
        """
        k, it = self.kernel, self.itype
        rows, columns = shape
        groups, bp, bq = _blocks(k, self.variant, shape)
        last, before = upcast_axes(k)
        p, q = plan.outer[k.vars.index(before)], plan.outer[k.vars.index(last)]
        self.lines.append(f"  const {it} grp = ({it})get_group_id(0);")
        self.lines.append(f"  const {it} lid = ({it})get_local_id(0);")
        guards = []
        row_block = "grp" if bq == 1 else f"(grp / {bq})"
        row_block = row_block if bp * bq == groups else f"({row_block} % {bp})"
        col_block = "0" if bq == 1 else f"(grp % {bq})"
        if self.variant.smem:  # the staged tiles' origins and the item's place in the block
            self.lines += [f"  const {it} zbi = {row_block} * {rows * self.variant.tile};",
                           f"  const {it} zbj = {col_block} * {columns * self.variant.upcast};",
                           f"  const {it} zty = lid / {columns};", f"  const {it} ztx = lid % {columns};"]
        for v, value, n in ((p, f"{row_block} * {rows} + lid / {columns}", bp * rows),
                            (q, f"{col_block} * {columns} + lid % {columns}", bq * columns)):
            name = self.vars[v]
            if n > v.size:
                guards.append(f"{name}_ >= {v.size}" if self.variant.smem else f"{name} >= {v.size}")
            if n > v.size and self.variant.smem:  # items past the end compute the last point and store nothing
                self.lines.append(f"  const {it} {name}_ = {value};")
                value = f"min({name}_, {self.ilit(v.size - 1)})"
            self.lines.append(f"  const {it} {name} = {value};")
        if guards and self.variant.smem:
            self.late_guard = f"  if ({' || '.join(guards)}) return;"
        elif guards:
            self.lines.append(f"  if ({' || '.join(guards)}) return;")
        others = tuple(Var(v.name, 1) if v in (p, q) else v for v in plan.outer)
        if any(v.size > 1 for v in others):
            self.lines.append(f"  const {it} gid = grp / {bp * bq};")
            self.decompose("gid", others)

    def body(self) -> None:
        """Work item -> lanes (or work-group -> point), the reduce, the outputs and their stores."""
        k, it = self.kernel, self.itype
        if self.variant.group > 1:
            if k.numel == 0:
                return
            self.lines.append(f"  const {it} grp = ({it})get_group_id(0);")
            self.lines.append(f"  const {it} lid = ({it})get_local_id(0);")
            self.decompose("grp", k.vars)
            self.group_reduce()
            plan = lanes(k, 1, 1)
        else:
            plan = lanes(k, self.variant.upcast, self.variant.tile)
            shape = block(self.variant)
            if shape is None:
                self.lines.append(f"  if (get_global_id(0) >= {plan.numel}) return;")
            if k.numel == 0:
                return
            for u, v in zip(plan.outer, k.vars):
                self.vars[u] = self.vars[v]
            if shape is not None:
                self.blocked(plan, shape)
            else:
                if any(v.size > 1 for v in plan.outer):
                    self.lines.append(f"  const {it} gid = ({it})get_global_id(0);")
                self.decompose("gid", plan.outer)
            if k.reduce is not None:
                bodies = [rewrite([k.reduce.body], lane.subst)[0] for lane in plan.lanes]
                self.tiled_reduce(plan, bodies) if self.variant.smem else self.reduce(bodies)
            if self.late_guard:
                self.lines.append(self.late_guard)
        self.finish(plan)

    def finish(self, plan: Lanes) -> None:
        """The outputs of every lane of ``plan`` (``acc<lane>`` standing for the reduce) and their stores."""
        k = self.kernel
        outputs = [rewrite(list(k.outputs), lane.subst, LaneAcc(i, k.reduce.dtype) if k.reduce else None)
                   for i, lane in enumerate(plan.lanes)]
        for i in range(len(plan.lanes)):
            self.names[LaneAcc(i, k.reduce.dtype if k.reduce else None)] = f"acc{i}"
        self.emit([e for outs in outputs for e in outs], "  ")
        for o, e in enumerate(k.outputs):
            self.store(o, e.dtype, [(lane, outs[o]) for lane, outs in zip(plan.lanes, outputs)])

    def store(self, o: int, dtype: DType, values: list) -> None:
        """Store output ``o``'s value of every lane: vector stores for contiguous unguarded lanes."""
        k, buf = self.kernel, f"out{o}"
        items = []
        for lane, e in values:
            index = flatten([lane.subst.get(v, var(v)) for v in k.vars], k.shape)
            items.append(((bool(lane.guards), id(lane) if lane.guards else 0), index, (lane, self.names[e])))
        for base, run in _runs(items):
            if len(run) > 1 and dtype != DType.BOOL and self.vectors:
                vec = f"({COMPUTE[dtype]}{len(run)})({', '.join(name for _, name in run)})"
                fn = f"vstore_half{len(run)}_rte" if dtype == DType.F16 else f"vstore{len(run)}"
                self.lines.append(f"  {fn}({vec}, 0, {buf} + ({self.index(base)}));")
                continue
            for m, (lane, name) in enumerate(run):
                at = self.index(Idx(base.terms, base.const + m))
                guard = f"if ({self.bounds(lane.guards)}) " if lane.guards else ""
                if dtype == DType.F16:
                    self.lines.append(f"  {guard}vstore_half_rte({name}, {at}, {buf});")
                elif dtype == DType.BOOL:
                    self.lines.append(f"  {guard}{buf}[{at}] = (uchar){name};")
                else:
                    self.lines.append(f"  {guard}{buf}[{at}] = {name};")


_VECTOR = (DType.F32, DType.F64, DType.I32, DType.I64, DType.F16)
"""Dtypes read by ``vloadN`` (half through ``vload_halfN``, as float)."""


def _runs(items: list, widths: tuple[int, ...] = (16, 8, 4, 2, 1)) -> list[tuple[Idx, list]]:
    """Group ``(key, index, payload)`` items with equal key and index terms into runs of consecutive constants.

    Runs are cut into pieces of ``widths`` (the largest that fits first); returns ``(index of the first,
    payloads)`` per piece.
    """
    groups: dict[tuple, list[tuple[int, object]]] = {}
    for key, index, payload in items:
        groups.setdefault((key, index.terms), []).append((index.const, payload))
    out = []
    for (_, terms), members in groups.items():
        members.sort(key=lambda m: m[0])
        i = 0
        while i < len(members):
            j = i
            while j + 1 < len(members) and members[j + 1][0] == members[j][0] + 1:
                j += 1
            while i <= j:
                n = next(w for w in widths if w <= j - i + 1)
                out.append((Idx(terms, members[i][0]), [p for _, p in members[i : i + n]]))
                i += n
    return out


from engine.kernel import opencl_rows as _rows  # noqa: E402  (row kernels' codegen; it subclasses _Emitter)

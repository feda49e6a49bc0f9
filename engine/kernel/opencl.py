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
* float ``max`` and ``relu`` propagate NaN like ``np.maximum``;
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
"""

from __future__ import annotations

import math

import numpy as np

from engine.devices.base import DEFAULT_VARIANT, Variant
from engine.kernel.index import Div, Idx, Mod, Var
from engine.kernel.ir import Acc, Const, Expr, Kernel, Load, Op, Where, reduce_dependent, schedule
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


class UnsupportedKernelError(ValueError):
    """The kernel uses something this code generator cannot express (an op on a dtype it does not apply to)."""


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
    if kernel.reduce is not None and kernel.reduce.op not in ("sum", "max"):
        raise UnsupportedKernelError(f"reduce {kernel.reduce.op!r} (expected sum or max)")
    for e in schedule(kernel.exprs()):
        if isinstance(e, Op) and not applies(e.op, e.args[0].dtype):
            raise UnsupportedKernelError(f"{e.op} does not apply to {e.args[0].dtype}")
        if isinstance(e, Acc) and (kernel.reduce is None or e.dtype != kernel.reduce.dtype):
            raise UnsupportedKernelError("acc without a reduce of its dtype")


def generate(kernel: Kernel, variant: Variant = DEFAULT_VARIANT) -> str:
    """OpenCL C source of one ``__kernel void <kernel.name>(inputs..., outputs...)``.

    A set ``variant.local_size`` adds a ``reqd_work_group_size`` attribute (the
    launch rounds the global size up to it; the extra work items return at once).
    """
    return program_source([(kernel, variant)])


def program_source(items: list[tuple[Kernel, Variant]]) -> str:
    """One program holding the kernel functions of ``items`` (built together: a build costs ~0.3 s on PoCL).

    Their names must differ; pragmas and helper functions are emitted once.
    """
    parts = [_Emitter(kernel, variant.local_size).parts() for kernel, variant in items]
    names = [kernel.name for kernel, _ in items]
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

    def __init__(self, kernel: Kernel, local_size: int | None) -> None:
        self.kernel = kernel
        self.local_size = local_size
        self.vars: dict[Var, str] = {v: f"g{i}" for i, v in enumerate(kernel.vars)}
        if kernel.reduce is not None:
            self.vars |= {v: f"r{i}" for i, v in enumerate(kernel.reduce.vars)}
        sizes = [kernel.numel, *(b.numel for b in kernel.inputs), *map(_magnitude, _indices(kernel))]
        self.itype = "long" if max(sizes) > _INT32_MAX else "int"
        self.names: dict[Expr, str] = {}
        self.helpers: dict[str, str] = {}
        self.lines: list[str] = []
        self.count = 0

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
        checks = []
        for b in e.bounds:
            lo, hi = b.index.bounds
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
            return f"{x} < {_zero(dtype)} ? {_zero(dtype)} : {x}"
        if op == "recip":
            return f"{literal(1, dtype)} / {x}"
        if op == "not":
            return f"!{x}"
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
            return f"max({x}, {y})" if dtype.is_int else f"({x} >= {y} || isnan({x})) ? {x} : {y}"
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
        """Declare a temporary for each node of ``roots`` not yet named (restricted to ``only``); returns them."""
        new = []
        for e in schedule(roots):
            if e in self.names or (only is not None and e not in only):
                continue
            if isinstance(e, Acc):
                self.names[e] = "acc"
                continue
            text = self.expr(e)
            name = f"t{self.count}"
            self.count += 1
            self.lines.append(f"{indent}const {COMPUTE[e.dtype]} {name} = {text};")
            self.names[e] = name
            new.append(e)
        return new

    # the kernel

    def reduce(self) -> None:
        red = self.kernel.reduce
        assert red is not None
        dtype, body = red.dtype, red.body
        inner = reduce_dependent(self.kernel) | {body}
        self.emit([body], "  ", only=set(schedule([body])) - inner)
        t = COMPUTE[dtype]
        if red.op == "sum":
            init = _zero(dtype)
        elif dtype.is_float:
            init = "(double)(-INFINITY)" if dtype == DType.F64 else "(-INFINITY)"
        else:
            init = {DType.BOOL: "false", DType.I32: "INT_MIN", DType.I64: "LONG_MIN"}[dtype]
        self.lines.append(f"  {t} acc = {init};")
        indent = "  "
        for v in red.vars:
            name = self.vars[v]
            self.lines.append(f"{indent}for ({self.itype} {name} = 0; {name} < {v.size}; ++{name}) {{")
            indent += "  "
        scoped = self.emit([body], indent, only=inner)
        v = self.names[body]
        if dtype == DType.BOOL:
            update = f"acc || {v}"
        elif red.op == "sum":
            update = f"({t})(({_UNSIGNED[dtype]})acc + ({_UNSIGNED[dtype]}){v})" if dtype.is_int else f"acc + {v}"
        else:
            update = f"max(acc, {v})" if dtype.is_int else f"(acc >= {v} || isnan(acc)) ? acc : {v}"
        self.lines.append(f"{indent}acc = {update};")
        for _ in red.vars:
            indent = indent[:-2]
            self.lines.append(f"{indent}}}")
        for e in scoped:  # defined inside the loop: out of scope after it
            del self.names[e]

    def parts(self) -> tuple[list[str], str]:
        """The preamble lines (pragmas, helper functions) and the kernel function."""
        k = self.kernel
        assert len(k.vars) == len(k.shape), (k.vars, k.shape)
        check(k)
        self.lines.append(f"  if (get_global_id(0) >= {k.numel}) return;")
        if k.numel > 0:
            self.body()
        params = [f"__global const {STORAGE[b.dtype]}* in{i}" for i, b in enumerate(k.inputs)]
        params += [f"__global {STORAGE[b.dtype]}* out{i}" for i, b in enumerate(k.output_types)]
        head = [f"#pragma OPENCL EXTENSION {x} : enable\n" for x in sorted(extensions(k))]
        head += [f"{h}\n" for h in self.helpers.values()]
        attr = f"__attribute__((reqd_work_group_size({self.local_size}, 1, 1))) " if self.local_size else ""
        signature = f"__kernel {attr}void {k.name}({', '.join(params)}) {{"
        return head, "\n".join([signature, *self.lines, "}"]) + "\n"

    def body(self) -> None:
        """Global variables, the reduce loop, the outputs and their stores (for a non-empty shape)."""
        k, it = self.kernel, self.itype
        if any(v.size > 1 for v in k.vars):
            self.lines.append(f"  const {it} gid = ({it})get_global_id(0);")
        stride = k.numel
        for i, v in enumerate(k.vars):
            stride //= max(v.size, 1)
            if v.size <= 1:
                continue
            value = "gid" if stride == 1 else f"(gid / {stride})"
            value = value if i == 0 or all(u.size <= 1 for u in k.vars[:i]) else f"{value} % {v.size}"
            self.lines.append(f"  const {it} {self.vars[v]} = {value};")
        if k.reduce is not None:
            self.reduce()
        self.emit(list(k.outputs), "  ")
        at = "gid" if any(v.size > 1 for v in k.vars) else "0"
        for i, e in enumerate(k.outputs):
            value = self.names[e]
            if e.dtype == DType.F16:
                self.lines.append(f"  vstore_half_rte({value}, {at}, out{i});")
            elif e.dtype == DType.BOOL:
                self.lines.append(f"  out{i}[{at}] = (uchar){value};")
            else:
                self.lines.append(f"  out{i}[{at}] = {value};")

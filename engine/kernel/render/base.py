"""The C-style emitter every renderer builds on: a kernel's expressions, reduce loops and stores as OpenCL C.

Each renderer subclasses ``CStyleEmitter`` and writes the ``body`` that maps the kernel's points onto its
machine (``opencl``: work items; ``rows``: a work item or group per row; ``c``: loops; ``cuda``: OpenCL's
bodies under a prelude). The C and CUDA renderers compile this OpenCL C under preludes that name its words
(``half``, ``vload_half``, ``__local``, ...). Each distinct expression is one typed temporary; a reduce body's
loop-invariant part is computed before the loop.

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
  semantics by adding a multiple of the divisor first;
* float sums of more than ``SUM_BLOCK`` terms per loop accumulate each run of
  ``SUM_BLOCK`` terms into fresh partials first and add those to the
  accumulators (blocked summation: the rounding error grows with ``n / B + B``
  terms instead of ``n``);
* loads of one buffer at consecutive constant offsets (lanes, unrolled
  iterations) become ``vloadN`` and contiguous unguarded stores ``vstoreN``
  (N in 2, 4, 8, 16; only element alignment is required), where the renderer
  keeps ``vectors``.

Kernels using an op on a dtype it does not apply to (``sin`` of an int, ``and``
of floats, ...) raise ``UnsupportedKernelError``.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable

import numpy as np

from engine.kernel.index import Div, Idx, Mod, Var, flatten, var
from engine.kernel.ir import Acc, Bound, Const, Expr, Kernel, Load, Op, Reduce, Where, schedule
from engine.kernel.lanes import LaneAcc, Lanes, Staged, dependent, rewrite, unroll
from engine.kernel.schedule import DEFAULT_VARIANT, VECTOR_DTYPES, InvalidVariantError, Variant, variant_error
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
INT32_MAX = 2**31 - 1
_FLOAT_UNARY = ("exp2", "log2", "sin", "cos", "sqrt", "recip")
SUM_BLOCK = 64
"""Terms of a float sum accumulated into a fresh partial before it joins the accumulator (0: sequential)."""


class UnsupportedKernelError(ValueError):
    """The kernel uses something this code generator cannot express (an op on a dtype it does not apply to)."""


def function_name(kernel: Kernel, variant: Variant) -> str:
    """The ``__kernel`` function's name: ``kernel.name``, suffixed by the variant's tag unless it is the default."""
    return kernel.name if variant == DEFAULT_VARIANT else f"{kernel.name}_{variant.tag}"


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
    """Raise ``UnsupportedKernelError`` if the renderers cannot express ``kernel``."""
    reduces = kernel.reduces
    for red in reduces:
        if red.op not in ("sum", "max"):
            raise UnsupportedKernelError(f"reduce {red.op!r} (expected sum or max)")
    for e in schedule(kernel.exprs()):
        if isinstance(e, Op) and not applies(e.op, e.args[0].dtype):
            raise UnsupportedKernelError(f"{e.op} does not apply to {e.args[0].dtype}")
        if isinstance(e, Acc) and (e.stage >= len(reduces) or e.dtype != reduces[e.stage].dtype):
            raise UnsupportedKernelError("acc without a reduce of its dtype")
    for i, stage in enumerate(kernel.stages):  # a row kernel's stages read only the stages before them
        late = [e for e in schedule([stage.body]) if isinstance(e, Acc) and e.stage >= i]
        if late:
            raise UnsupportedKernelError(f"stage {i} reads the result of stage {late[0].stage}")


def program_source(items: list[tuple[Kernel, Variant]], emitter: Callable[[Kernel, Variant], CStyleEmitter]) -> str:
    """One program holding the kernel functions of ``items`` (built together: every build has a fixed cost).

    Their names must differ; pragmas and helper functions are emitted once.  ``emitter`` makes each
    function's emitter (the renderer's ``CStyleEmitter`` subclass).
    """
    parts = [emitter(kernel, variant).parts() for kernel, variant in items]
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


class CStyleEmitter(ABC):
    """Builds the source of one kernel (names of temporaries, helper functions, lines); subclasses write ``body``."""

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
        self.itype = "long" if 2 * max(sizes) + 64 > INT32_MAX else "int"
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
        ok = [e for e in loads if not e.clamped and e.dtype in VECTOR_DTYPES] if self.vectors else []
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


    @abstractmethod
    def body(self) -> None:
        """The function's lines: the kernel's points mapped onto the machine, its reduces, its stores."""

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

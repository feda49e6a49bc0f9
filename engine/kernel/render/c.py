"""C code generation for the native CPU device: one ``Kernel`` becomes one C function over all of its points.

This is a departure from DESIGN.md, which names two executors (numpy and OpenCL). On a CPU neither
reaches the memory floor: the numpy device makes a pass over memory per op, and PoCL's work items
vectorise badly (benchmarks/RESULTS.md, "CPU, the native C device", has the figures). Here each kernel is compiled by the system C compiler and runs in
place on the host's numpy arrays (``engine.devices.native``).

The expressions come from the C-style emitter (``engine.kernel.render.base.CStyleEmitter``): OpenCL C's scalar
subset is C once the preamble below names ``half``, ``uchar``, ``max``, ``vload_half`` and kin and
``<tgmath.h>`` makes ``exp2``/``sqrt``/... type-generic. Only the work-item prologue differs, and
vector loads and stores are left to the compiler's vectoriser. The function's loops::

    int k(const float* restrict in0, ..., float* restrict out0) {
      #pragma omp parallel for ...          // chunks of the flat range of points, across threads
      for (long c = 0; c < chunks; ++c)
        for (long f = chunk start; f < chunk end;) {   // one row at a time
          const long g0 = row / ...;                    // the outer variables of the row (64-bit: see CEmitter)
          #pragma omp simd                              // (no reduce: the points are independent)
          for (long g1 = lo; g1 < end; ++g1) { reduce loop; outputs; stores }
          f += end - lo;
        }
      return 0;
    }

Variants (``engine.kernel.schedule.Variant``), read for a CPU:

* ``upcast``/``tile``: lanes as in OpenCL (a register tile: loads shared by lanes are issued once);
* ``unroll`` 4: the innermost reduce loop is ``#pragma omp simd reduction`` (vector partial
  accumulators: reassociated, like a group reduce); other factors are refused (they would be the same code:
  gcc takes no unroll pragma on an ``omp simd`` loop);
* ``group`` > 1: each point's flattened reduce is cut into ``group`` contiguous pieces computed in
  parallel (vectorised) into a scratch array, then combined in order (for few, long reduces);
* ``local_size`` L: chunks of about ``L * CHUNK_STEPS`` loop steps handed out dynamically (threads that
  other processes slow down take fewer); by default one static share per thread.

A row kernel (``Kernel.stages``) is ``CRowEmitter``'s: rows in parallel, each row's stages and outputs as the
OpenCL row renderer writes them for one work item (``engine.kernel.render.rows``). Its default keeps each stage
in order (a float sum in blocks); ``unroll`` 4 makes every stage ``omp simd reduction``; the outputs' loop is
``omp simd`` in both. No other variant applies. A summand that the outputs use again (softmax's ``exp``) is
stored into the output's row by its stage and read back (``stored_summand``).

Transcendentals are declared ``#pragma omp declare simd`` so gcc calls glibc's libmvec vector
variants (at most 4 ulp, special values handled), with ``-fno-math-errno`` but no ``-ffast-math``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from engine.kernel.index import Idx, Var, var
from engine.kernel.ir import Expr, Kernel, Load, Op, Reduce, schedule
from engine.kernel.lanes import Lanes, Subst, dependent, flat_reduce, lanes, rewrite, substitute, unroll
from engine.kernel.render.base import COMPUTE, STORAGE, CStyleEmitter, check, function_name, program_source
from engine.kernel.render.rows import RowEmitter
from engine.kernel.schedule import DEFAULT_VARIANT, Variant, variant_error
from engine.program.dtypes import DType

PARALLEL_STEPS = 1 << 16
"""Kernels of fewer loop steps (points times reduce length) run on the calling thread alone."""
VECTOR_UNROLL = 4
"""The ``unroll`` that means a vectorised (reassociated) reduce loop."""
ROW_VECTOR = Variant(unroll=VECTOR_UNROLL)
"""A row kernel's one variant beside the default: its stages vectorised."""
DEAR = frozenset({"exp2", "log2", "sin", "cos", "pow"})
"""Ops dear enough that a row kernel stores a summand holding one rather than compute it again (libmvec calls)."""
CHUNK_STEPS = 1024
"""Loop steps per unit of ``local_size`` in a dynamically scheduled chunk."""

SIMD_MATH = ("exp2f", "log2f", "sinf", "cosf", "exp2", "log2", "sin", "cos")
"""Functions declared ``omp declare simd`` (libmvec has vector variants of each)."""

PREAMBLE = """#include <tgmath.h>
#include <stdbool.h>
#include <limits.h>
#include <stdlib.h>
typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef unsigned long ulong;
#define max(a, b) ((a) > (b) ? (a) : (b))
#define min(a, b) ((a) < (b) ? (a) : (b))
#define vload_half(i, p) ((float)(p)[i])
#define vstore_half_rte(x, i, p) ((p)[i] = (half)(x))
#pragma omp declare reduction(zx_max_f : float : omp_out = (omp_out > omp_in || isnan(omp_out)) ? omp_out : omp_in) \\
  initializer(omp_priv = -INFINITY)
#pragma omp declare reduction(zx_max_d : double : omp_out = (omp_out > omp_in || isnan(omp_out)) ? omp_out : omp_in) \\
  initializer(omp_priv = -INFINITY)
"""

HALF = "typedef _Float16 half;\n"
"""Half storage, for compilers that have ``_Float16`` (gcc >= 12 and clang >= 15 on x86-64)."""


def simd_declarations() -> str:
    """``omp declare simd`` declarations of the transcendentals (libmvec's vector variants get called)."""
    out = []
    for name in SIMD_MATH:
        t = "float" if name.endswith("f") else "double"
        out.append(f"#pragma omp declare simd notinbranch\n{t} ({name})({t});\n")
    for t, name in (("float", "powf"), ("double", "pow")):
        out.append(f"#pragma omp declare simd notinbranch\n{t} ({name})({t}, {t});\n")
    return "".join(out)


def uses_half(kernel: Kernel) -> bool:
    """Whether ``kernel`` reads, computes or writes f16."""
    return any(b.dtype == DType.F16 for b in kernel.inputs) or any(
        e.dtype == DType.F16 for e in schedule(kernel.exprs()))


def native_variant_error(kernel: Kernel, variant: Variant) -> str | None:
    """Why ``variant`` cannot apply to ``kernel`` on the native device, or None."""
    if kernel.stages:
        if variant not in (DEFAULT_VARIANT, ROW_VECTOR):
            return f"a row kernel's stages are vectorised ({ROW_VECTOR}) or kept in order (the default)"
        return None
    error = variant_error(kernel, variant)
    if error is not None:
        return error
    red = kernel.reduce
    if variant.unroll not in (1, VECTOR_UNROLL):
        return f"unroll {variant.unroll}: a reduce is vectorised (unroll {VECTOR_UNROLL}) or kept in order (1)"
    if variant.unroll > 1 and strided_loads(kernel):
        return "unroll 4 vectorises the reduce loop: it has strided loads (gathers)"
    if variant.group > 1 and red is not None and (not red.vars or variant.group > red.size):
        return f"group {variant.group} exceeds the reduce's {red.size} steps"
    return None


def loop_steps(kernel: Kernel) -> int:
    """Loop iterations of one launch: points times reduce steps, or rows times the row's loops (a row kernel)."""
    if kernel.stages:
        return kernel.numel * max(sum(size for _, _, size in kernel.row_loops()), 1)
    red = kernel.reduce
    return kernel.numel * max(red.size if red is not None else 1, 1)


def strided_loads(kernel: Kernel) -> int:
    """Loads of the reduce body that do not step by 0 or 1 element along the innermost reduce variable.

    Each of their reads touches its own cache line (a matmul's column operand): the loop nest's real cost.
    """
    red = kernel.reduce
    if red is None or not red.vars:
        return 0
    last = red.vars[-1]
    count = 0
    for e in schedule([red.body]):
        if isinstance(e, Load) and last in e.index.variables():
            step = sum(c for atom, c in e.index.terms if atom == last)
            affine = all(isinstance(atom, Var) or last not in atom.num.variables() for atom, _ in e.index.terms)
            count += not (affine and abs(step) == 1)
    return count


def reduction(dtype: DType, op: str) -> str:
    """The OpenMP reduction identifier of a reduce (float max: a NaN-propagating declared reduction)."""
    if dtype == DType.BOOL:
        return "||"
    if op == "sum":
        return "+"
    if dtype.is_int:
        return "max"
    return "zx_max_d" if dtype == DType.F64 else "zx_max_f"


class CFunction(CStyleEmitter):
    """What every native kernel's emitter shares: the C function around the body, threads, f16 rounding."""

    vectors = False

    def __init__(self, kernel: Kernel, variant: Variant, threads: int) -> None:
        error = native_variant_error(kernel, variant)
        assert error is None, error
        # the base emitter's unroll substitutes strided steps and its local size is a work-group; neither applies
        super().__init__(kernel, replace(variant, unroll=1, local_size=None))
        self.native = variant
        # 64-bit index arithmetic: under -fwrapv an int index such as 4096*g0 + g1 may wrap, so gcc cannot prove
        # consecutive lanes' addresses consecutive and vectorises a row's contiguous loads and stores as gathers
        # and scatters (a 2-D kernel then runs several times slower than a 1-D one of the same bytes)
        self.itype = "long"
        self.threads = threads
        self.steps = loop_steps(kernel)

    def parallel(self, count: int, dynamic: bool = False) -> None:
        """``omp parallel for`` over the next loop of ``count`` iterations (when worth threads)."""
        if count > 1 and self.threads > 1 and self.steps >= PARALLEL_STEPS:
            schedule = "dynamic, 1" if dynamic else "static"
            self.lines.append(f"  #pragma omp parallel for num_threads({self.threads}) schedule({schedule})")

    def indent(self, start: int, depth: int) -> None:
        """Indent the lines from ``start`` on by ``depth`` levels (the base emitter writes at one level)."""
        self.lines[start:] = [" " * (2 * depth) + line for line in self.lines[start:]]

    def round_half(self, src: DType) -> str:
        t = "double" if src == DType.F64 else "float"
        name = f"zx_half_of_{t}"
        self.helpers[name] = f"float {name}({t} x) {{\n  return (float)(half)x;\n}}\n"
        return name

    def parts(self) -> tuple[list[str], str]:
        """The helper functions (static) and the kernel's C function (returns 0, or 1 when out of memory)."""
        k = self.kernel
        check(k)
        self.body()
        params = [f"const {STORAGE[b.dtype]}* restrict in{i}" for i, b in enumerate(k.inputs)]
        params += [f"{STORAGE[b.dtype]}* restrict out{i}" for i, b in enumerate(k.output_types)]
        head = [f"static {h}\n" for h in self.helpers.values()]
        signature = f"int {function_name(k, self.native)}({', '.join(params) or 'void'}) {{"
        return head, "\n".join([signature, *self.lines, "  return 0;", "}"]) + "\n"


class CEmitter(CFunction):
    """The C-style emitter's expressions inside C loops over the kernel's points (see the module docstring)."""

    sum_block = 0  # its reduce loops carry ``omp simd reduction`` clauses over ``acc``, which partials would break

    def __init__(self, kernel: Kernel, variant: Variant, threads: int) -> None:
        super().__init__(kernel, variant, threads)
        red = kernel.reduce
        self.simd_loop = unroll(red.vars[-1], 1)[0] if red is not None and red.vars and variant.unroll > 1 else None
        """The innermost reduce loop's variable when that loop is vectorised (``unroll`` > 1)."""

    # loops

    def loop(self, v: Var, indent: str, start: str = "0", step: int = 1, stop: str | None = None) -> str:
        if v == self.simd_loop:
            self.lines.append(f"{indent}#pragma omp simd reduction({self.reduction_clause()})")
        return super().loop(v, indent, start, step, stop)

    def reduction_clause(self, lanes_: int | None = None) -> str:
        red = self.kernel.reduce
        assert red is not None
        count = len(lanes(self.kernel, self.variant.upcast, self.variant.tile).lanes) if lanes_ is None else lanes_
        return f"{reduction(red.dtype, red.op)}:{','.join(f'acc{i}' for i in range(count))}"

    def chunks(self, n: int) -> tuple[int, int, bool]:
        """(points per chunk, chunks, dynamic) of a range of ``n`` points."""
        if self.threads == 1 or self.steps < PARALLEL_STEPS:
            return n, 1, False
        per_point = max(self.steps // max(n, 1), 1)
        if self.native.local_size is not None:
            chunk = max(self.native.local_size * CHUNK_STEPS // per_point, 1)
            return chunk, -(-n // chunk), True
        chunk = -(-n // self.threads)
        if n >= 16 * self.threads:
            chunk = -(-chunk // 16) * 16  # multiples of a vector of floats
        return chunk, -(-n // chunk), False

    def points(self, plan: Lanes, body: Callable[[], None]) -> None:
        """The loops over ``plan``'s points around ``body()`` (which emits one point's lines)."""
        outer = plan.outer
        big = [v for v in outer if v.size > 1]
        if not big:
            body()
            return
        it = self.itype
        last = big[-1]
        n, s = math.prod(v.size for v in outer), last.size
        chunk, count, dynamic = self.chunks(n)
        self.parallel(count, dynamic)
        self.lines += [f"  for (long c = 0; c < {count}; ++c) {{",
                       f"    const long hi = min({n}L, (c + 1) * {chunk}L);",
                       f"    for (long f = c * {chunk}L; f < hi;) {{"]
        if n == s:
            self.lines += ["      const long lo = f, end = hi;"]
        else:
            self.lines += [f"      const long o = f / {s}, lo = f - o * {s};",
                           f"      const long end = min({s}L, lo + (hi - f));"]
            start = len(self.lines)
            self.decompose("o", tuple(v if v != last else replace(v, size=1) for v in outer))
            self.indent(start, 2)
        if self.kernel.reduce is None:
            self.lines.append("      #pragma omp simd")
        name = self.vars[last]
        self.lines.append(f"      for ({it} {name} = lo; {name} < end; ++{name}) {{")
        start = len(self.lines)
        body()
        self.indent(start, 3)
        self.lines += ["      }", "      f += end - lo;", "    }", "  }"]

    # the kernel

    def body(self) -> None:
        k = self.kernel
        if k.numel == 0:
            return
        if self.native.group > 1:
            self.split_reduce()
            return
        plan = lanes(k, self.variant.upcast, self.variant.tile)
        for u, v in zip(plan.outer, k.vars):
            self.vars[u] = self.vars[v]

        def point() -> None:
            if k.reduce is not None:
                self.reduce([rewrite([k.reduce.body], lane.subst)[0] for lane in plan.lanes])
            self.finish(plan)

        self.points(plan, point)

    def split_reduce(self) -> None:
        """``group`` contiguous pieces of each point's reduce in parallel into ``part``, then combined in order."""
        k, red, g = self.kernel, self.kernel.reduce, self.native.group
        assert red is not None
        t = COMPUTE[red.dtype]
        points, size = k.numel, red.size
        flat, sub = flat_reduce(red.vars)
        self.vars[flat] = "ri"
        (body,) = rewrite([red.body], sub)
        inner = dependent([body], {flat}) | {body}
        self.lines.append(f"  {t}* part = ({t}*)malloc(sizeof({t}) * {points * g}L);")
        self.lines.append("  if (!part) return 1;")
        self.parallel(points * g)
        self.lines += [f"  for (long task = 0; task < {points * g}L; ++task) {{",
                       f"    const long p = task / {g}, piece = task % {g};"]
        start = len(self.lines)
        self.decompose("p", k.vars)
        names = dict(self.names)
        self.emit([body], "  ", only=set(schedule([body])) - inner)
        self.lines.append(f"  {t} acc0 = {self.init(red)};")
        self.lines.append(f"  #pragma omp simd reduction({self.reduction_clause(1)})")
        self.lines.append(f"  for (long ri = piece * {size}L / {g}; ri < (piece + 1) * {size}L / {g}; ++ri) {{")
        self.emit([body], "    ", only=inner)
        self.lines.append(f"    acc0 = {self.combine(red, 'acc0', self.names[body])};")
        self.lines += ["  }", "  part[task] = acc0;"]
        self.indent(start, 1)
        self.lines.append("  }")
        self.names = names
        plan = lanes(k, 1, 1)

        def point() -> None:
            self.lines.append(f"  {t} acc0 = part[p * {g}];")
            self.lines.append(f"  for (int j = 1; j < {g}; ++j) acc0 = {self.combine(red, 'acc0', f'part[p * {g} + j]')};")
            self.finish(plan)

        self.parallel(points)
        self.lines.append(f"  for (long p = 0; p < {points}L; ++p) {{")
        start = len(self.lines)
        self.decompose("p", k.vars)
        point()
        self.indent(start, 1)
        self.lines += ["  }", "  free(part);"]


def stored_summand(kernel: Kernel) -> tuple[int, int, Expr] | None:
    """(stage, output, expression) where a stage's summand, a transcendental of the row's points, is also part of
    an output at the same points (softmax's ``exp``): the stage stores it into that output's row as it sums it, and
    the outputs' loop reads it back instead of computing it again. The output must hold it exactly (its dtype)."""
    row, outputs = kernel.row, set(schedule(kernel.outputs))
    for i, stage in enumerate(kernel.stages):
        if [v.size for v in stage.vars] != [v.size for v in row]:
            continue
        (e,) = rewrite([stage.body], {r: var(v) for r, v in zip(stage.vars, row)})
        if e not in outputs or e.dtype not in (DType.F32, DType.F64):
            continue
        if not any(isinstance(x, Op) and x.op in DEAR for x in schedule([e])):
            continue
        for o, out in enumerate(kernel.outputs):
            if out.dtype == e.dtype and e in set(schedule([out])):
                return i, o, e
    return None


class CRowEmitter(CFunction, RowEmitter):
    """A row kernel's rows in a parallel loop, each row as the OpenCL row renderer's work item computes it."""

    def __init__(self, kernel: Kernel, variant: Variant, threads: int) -> None:
        super().__init__(kernel, variant, threads)
        self.stored = stored_summand(kernel)

    def body(self) -> None:
        k = self.kernel
        if k.numel == 0:
            return
        self.parallel(k.numel)
        self.lines.append(f"  for (long row = 0; row < {k.numel}L; ++row) {{")
        start = len(self.lines)
        self.decompose("row", k.vars)
        self.row()
        self.indent(start, 1)
        self.lines.append("  }")

    def loop_pragma(self, red: Reduce | None, acc: str) -> str | None:
        """The outputs' loop is ``omp simd``; a stage's is ``omp simd reduction`` in the vectorised variant."""
        if red is None:
            return "#pragma omp simd"
        if self.native == ROW_VECTOR:
            return f"#pragma omp simd reduction({reduction(red.dtype, red.op)}:{acc})"
        return None

    def siblings_pragma(self) -> str | None:
        """One ``omp simd`` reducing every stage in the vectorised variant."""
        if self.native != ROW_VECTOR:
            return None
        clauses = " ".join(f"reduction({reduction(s.dtype, s.op)}:acc{i})" for i, s in enumerate(self.kernel.stages))
        return f"#pragma omp simd {clauses}"

    def stage_stores(self, i: int, body: Expr, sub: Subst) -> list[str]:
        """The stored summand's stage writes it into its output's row (``stored_summand``)."""
        if self.stored is None or self.stored[0] != i:
            return []
        k, o = self.kernel, self.stored[1]
        at = substitute(self.store_index(), {v: sub[r] for v, r in zip(k.row, k.stages[i].vars)})
        return [self.put(o, body.dtype, self.index(at), self.names[body])]

    def reread(self, at: Idx) -> list[Expr]:
        """The stored summand is read back from its output where the outputs use it."""
        if self.stored is None:
            return []
        _, o, e = self.stored
        self.names[e] = f"out{o}[{self.index(at)}]"
        return [e]


def source(items: list[tuple[Kernel, Variant]], threads: int, half: bool, simd_math: bool) -> str:
    """One C file holding the functions of ``items`` (named ``function_name(kernel, variant)``)."""
    head = PREAMBLE + (HALF if half else "") + (simd_declarations() if simd_math else "")
    return head + program_source(items, lambda k, v: (CRowEmitter if k.stages else CEmitter)(k, v, threads))

"""CUDA C of an implicit GEMM for NVRTC: a contraction ``sum(a * b)`` whose factors are gathered straight from
the kernel's inputs into shared-memory tiles, never written to memory first.

A contraction kernel (``engine.devices.cuda_blas.as_matmul`` finds which: its two factors and which global axes
are batch, m and n, which reduce axes are k) runs as ``(batch, m, k) @ (batch, k, n)`` without a scratch operand:
each block computes a ``BM x BN`` tile of one batch, stepping over k in slices of ``BK``; its threads first
evaluate the factors' expressions (a padded convolution's bounds and shifted index, rmsnorm's scaled rows, a
plain strided load) at the slice's points into registers, store them to shared memory, and while the slice is
multiplied (fp32 ``fmaf``, each thread a ``TM x TN`` register tile read as ``float4``) the next slice's values
are already loading.  Each index a factor reads at or bounds-checks is its part over the row's axes plus its part
over k: a multiple of the flat ``kk`` where k's axes step it evenly (a matmul, a convolution's weights), else an
entry of a shared table of that part at every k (a padded convolution's input offset and window), filled once
per block, so that no gathered element decodes k's axes by division.  The kernel's outputs (bias, activation, residual) are evaluated at each result in
registers, so one launch replaces im2col prologue, GEMM and epilogue.

The variant's fields (``Variant.smem``'s meaning, operands staged in local memory, on this device): ``smem`` is
``BK``, ``local_size`` the block's threads laid out ``rows x columns`` by ``schedule.block``, ``tile`` the m
outputs and ``upcast`` the n outputs per thread (multiples of 4); ``BM = rows * tile``, ``BN = columns *
upcast``.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from engine.kernel.index import Idx, Var, flatten, var
from engine.kernel.ir import Acc, Expr, Kernel, Load, Where, schedule
from engine.kernel.render.base import function_name as base_name
from engine.kernel.render.cuda import PRELUDE, CudaEmitter, cuda_error, restrict
from engine.kernel.schedule import Variant, block
from engine.program.dtypes import DType

DEPTHS = (8, 16, 32)
"""Slices of k (``smem``) the kernel takes."""
MAX_SHARED = 48 << 10
"""Bytes of static shared memory a block may declare."""
MAX_BATCH = 65535
"""Batches one launch covers (the grid's z limit)."""


@dataclass(frozen=True)
class Gemm:
    """A contraction kernel's GEMM roles: its two factors (any reduce-free expressions of its inputs) and its axes
    (variables of ``kernel``, a ``split_vars`` kernel whose reduce body is ``a * b``)."""

    kernel: Kernel
    a: Expr
    b: Expr
    batch: tuple[Var, ...]
    m: tuple[Var, ...]
    n: tuple[Var, ...]
    k: tuple[Var, ...]

    @property
    def sizes(self) -> tuple[int, int, int, int]:
        """(batch, M, N, K)."""
        return (math.prod(v.size for v in self.batch), math.prod(v.size for v in self.m),
                math.prod(v.size for v in self.n), math.prod(v.size for v in self.k))


def variant_error(g: Gemm, variant: Variant) -> str | None:
    """Why ``variant`` cannot run ``g`` as an implicit GEMM (None when it can)."""
    v = variant
    if v.smem not in DEPTHS:
        return f"an implicit GEMM's k slice (smem) is one of {DEPTHS}"
    if block(v) is None or v.local_size is None or not 64 <= v.local_size <= 512:
        return "an implicit GEMM needs a power-of-two block of 64 to 512 threads and tile > 1"
    if v.tile % 4 or v.upcast % 4 or v.tile * v.upcast > 64:
        return "an implicit GEMM's register tile is a multiple of 4 by a multiple of 4, at most 64 outputs"
    if (v.unroll, v.group) != (1, 0):
        return "an implicit GEMM has no unroll or group"
    if shared_bytes(v) > MAX_SHARED:
        return f"the tiles need {shared_bytes(v)} bytes of shared memory, more than {MAX_SHARED}"
    if g.sizes[0] > MAX_BATCH:
        return f"more than {MAX_BATCH} batches"
    for f in (g.a, g.b):
        if f.dtype != DType.F32:
            return "an implicit GEMM's factors are float32"
    return cuda_error(Kernel(g.kernel.inputs, g.kernel.shape, g.kernel.vars, None, (g.a, g.b)))


def shared_bytes(variant: Variant) -> int:
    """Bytes of the two buffers of both operands' tiles (padded rows: the larger case)."""
    _, _, bm, bn, bk = shape(variant)
    return 2 * bk * (bm + 4 + bn + 4) * 4


def shape(variant: Variant) -> tuple[int, int, int, int, int]:
    """(threads along m, threads along n, BM, BN, BK) of ``variant``."""
    rows, columns = block(variant) or (1, 1)
    return rows, columns, rows * variant.tile, columns * variant.upcast, variant.smem


def grid(g: Gemm, variant: Variant) -> tuple[tuple[int, int, int], int]:
    """(blocks along m, n and batch) and threads per block."""
    batch, m, n, _ = g.sizes
    _, _, bm, bn, _ = shape(variant)
    assert variant.local_size is not None
    return (math.ceil(m / bm), math.ceil(n / bn), batch), variant.local_size


def _along(f: Expr, outer: tuple[Var, ...], k: tuple[Var, ...]) -> bool:
    """Whether consecutive threads gather factor ``f`` along its m or n axes ``outer`` (coalesced when it is
    contiguous there, or nowhere along k) rather than along k; its shared tile is then written row by row, and
    needs no padding against bank conflicts."""
    return _contiguous(f, outer) or not _contiguous(f, k)


def _contiguous(f: Expr, axes: tuple[Var, ...]) -> bool:
    """Whether some load of ``f`` reads consecutive elements along the innermost of ``axes`` of size > 1."""
    inner = [v for v in axes if v.size > 1]
    return bool(inner) and any(isinstance(e, Load) and abs(e.index.coefficient(inner[-1])) == 1 for e in schedule([f]))


def _indices(f: Expr) -> list[Idx]:
    """Every index ``f`` reads at or bounds-checks, once each."""
    out: dict[Idx, None] = {}
    for e in schedule([f]):
        if isinstance(e, Load):
            out[e.index] = None
        elif isinstance(e, Where):
            out.update(dict.fromkeys(b.index for b in e.bounds))
    return list(out)


def _k_part(x: Idx, k: tuple[Var, ...]) -> Idx | None:
    """The terms of ``x`` over the k axes, or None when ``x`` is not affine (a division or modulo of them)."""
    if not x.is_affine and any(v in k for v in x.variables()):
        return None
    return Idx(tuple((a, c) for a, c in x.terms if a in k))


def _flat_step(part: Idx, k: tuple[Var, ...]) -> int | None:
    """``c`` when ``part`` is ``c * kk`` (the k axes' coefficients nest row-major, as a plain matmul's and a
    convolution's weights do), else None."""
    live = [v for v in k if v.size > 1]
    if not live:
        return 0
    step = part.coefficient(live[-1])
    for outer, inner in itertools.pairwise(live):
        if part.coefficient(outer) != part.coefficient(inner) * inner.size:
            return None
    return step


def k_tables(g: Gemm, variant: Variant) -> list[Idx] | None:
    """The k parts of the factors' indices that are no multiple of the flat k (a padded convolution's input offset
    ``4096*r0 + 64*r1 + r2`` and the window's row and column ``r1``, ``r2`` in its bounds).  Each is looked up in
    a shared table of its value at every k, filled once per block, instead of decoding k's axes by division in
    every gathered element.  None where some index is not affine in k, or the tables do not fit beside the tiles:
    the gather then decodes k's axes."""
    parts = [_k_part(x, g.k) for f in (g.a, g.b) for x in _indices(f)]
    if any(p is None for p in parts):
        return None
    tables = list(dict.fromkeys(p for p in parts if p is not None and _flat_step(p, g.k) is None))
    return tables if shared_bytes(variant) + 4 * g.sizes[3] * len(tables) <= MAX_SHARED else None


class _GemmEmitter(CudaEmitter):
    """Builds the implicit GEMM's function; expressions (factors, outputs) are the CUDA emitter's."""

    def __init__(self, g: Gemm, variant: Variant) -> None:
        super().__init__(g.kernel, Variant(local_size=variant.local_size))
        self.gemm = g
        self.gv = variant
        self.tables = k_tables(g, variant)
        self.split: dict[Idx, str] = {}
        """How the gathered element being emitted renders each index: its m part plus its k part at ``kk``."""

    def index(self, x: Idx) -> str:
        return self.split.get(x) or super().index(x)

    def fill_tables(self) -> None:
        """Declare the k tables and fill them, every thread a share of k, before the first slice is gathered."""
        if not self.tables:
            return
        it, k = self.itype, self.gemm.sizes[3]
        for j in range(len(self.tables)):
            self.lines.append(f"  __shared__ {it} kt{j}[{k}];")
        self.lines.append(f"  for ({it} kk = threadIdx.x; kk < {k}; kk += {self.gv.local_size}) {{")
        self.declare("kk", self.gemm.k, "    ")
        for j, part in enumerate(self.tables):
            self.lines.append(f"    kt{j}[kk] = {super().index(part)};")
        self.lines += ["  }", "  __syncthreads();"]

    def split_indices(self, f: Expr) -> None:
        """Render each index of ``f`` as its m part (the slice row's axes, declared) plus its k part: a multiple of
        ``kk`` or a k table's entry."""
        assert self.tables is not None
        self.split = {}
        for x in _indices(f):
            part = _k_part(x, self.gemm.k)
            assert part is not None
            rest = Idx(tuple(t for t in x.terms if t not in part.terms), x.const)
            step = _flat_step(part, self.gemm.k)
            at = f"kt{self.tables.index(part)}[kk]" if step is None else "kk" if step == 1 else f"{step}*kk"
            self.split[x] = f"({super().index(rest)} + {at})" if step != 0 else f"({super().index(rest)})"

    def declare(self, flat: str, vs: tuple[Var, ...], indent: str) -> None:
        """Each variable of ``vs`` (row-major) from the flat index ``flat``."""
        stride = math.prod(v.size for v in vs)
        for v in vs:
            stride //= v.size
            value = flat if stride == 1 else f"({flat} / {stride})"
            if v is not vs[0] and v.size > 1:
                value = f"({value} % {v.size})"
            self.lines.append(f"{indent}const {self.itype} {self.vars[v]} = {value};" if v.size > 1
                              else f"{indent}const {self.itype} {self.vars[v]} = 0;")

    def value(self, root: Expr, indent: str) -> str:
        """Emit ``root``'s temporaries at ``indent`` (a fresh scope) and return the name of its value."""
        saved, self.names = self.names, {}
        self.emit([root], indent)
        name = self.names[root]
        self.names = saved
        return name

    def gather(self, f: Expr, outer: tuple[Var, ...], tile: int, reg: str, smem: str) -> list[str]:
        """Lines that load the ``tile x BK`` slice at ``k0`` of factor ``f`` (``outer``: its m or n axes) into the
        registers ``reg``; the statements moving ``reg`` into shared ``smem[buf]`` go to ``self.stores``."""
        g, it = self.gemm, self.itype
        threads, bk = self.gv.local_size, self.gv.smem
        assert threads is not None
        along = _along(f, outer, g.k)
        lines = [f"// {smem}: consecutive threads along {'its rows' if along else 'k'}"]
        for q in range(math.ceil(tile * bk / threads)):
            e = f"(tid + {threads * q})"
            row, kl = (f"({e} % {tile})", f"({e} / {tile})") if along else (f"({e} / {bk})", f"({e} % {bk})")
            limit = f"{e} < {tile * bk}" if tile * bk % threads else ""
            lines += ["{", f"  const {it} p = {'m0' if outer is g.m else 'n0'} + {row};",
                      f"  const {it} kk = k0 + {kl};", "  float v = 0.0f;",
                      f"  if ({limit + ' && ' if limit else ''}p < {math.prod(v.size for v in outer)} && "
                      f"kk < {g.sizes[3]}) {{"]
            body_start = len(self.lines)
            self.declare("p", outer, "    ")
            if self.tables is None:
                self.declare("kk", g.k, "    ")
            else:
                self.split_indices(f)
            name = self.value(f, "    ")
            self.split = {}
            lines += self.lines[body_start:]
            del self.lines[body_start:]
            lines += [f"    v = {name};", "  }", f"  {reg}[{q}] = v;", "}"]
            self.stores.append(f"{'if (' + limit + ') ' if limit else ''}{smem}[buf][{kl}][{row}] = {reg}[{q}];")
        return lines

    def body(self) -> None:
        """Each slice of k: loaded into registers while the slice before is multiplied, then stored into the
        other of two shared buffers, one barrier per slice; then the epilogue."""
        g, it, lines = self.gemm, self.itype, self.lines
        rows, columns, bm, bn, bk = shape(self.gv)
        tm, tn, k = self.gv.tile, self.gv.upcast, g.sizes[3]
        out_m = _contiguous(Load(0, flatten([var(v) for v in g.kernel.vars], g.kernel.shape), 1, DType.F32), g.m)
        self.stores: list[str] = []
        lines.append("  const int tid = threadIdx.x;")
        # consecutive threads along the output's contiguous axis, so that the stores coalesce
        ty, tx = (f"(tid % {rows})", f"(tid / {rows})") if out_m else (f"(tid / {columns})", f"(tid % {columns})")
        lines.append(f"  const int ty = {ty}; const int tx = {tx};")
        lines.append(f"  const {it} m0 = ({it})blockIdx.x * {bm}; const {it} n0 = ({it})blockIdx.y * {bn};")
        if g.batch:
            lines.append(f"  const {it} bz = blockIdx.z;")
            self.declare("bz", g.batch, "  ")
        self.fill_tables()
        pad_a, pad_b = (0 if _along(f, outer, g.k) else 4 for f, outer in ((g.a, g.m), (g.b, g.n)))
        lines.append(f"  __shared__ __align__(16) float As[2][{bk}][{bm + pad_a}];")
        lines.append(f"  __shared__ __align__(16) float Bs[2][{bk}][{bn + pad_b}];")
        lines.append(f"  float c[{tm}][{tn}];")
        lines.append(f"  #pragma unroll\n  for (int i = 0; i < {tm}; ++i)\n    #pragma unroll\n"
                     f"    for (int j = 0; j < {tn}; ++j) c[i][j] = 0.0f;")
        qa, qb = (math.ceil(t * bk / (self.gv.local_size or 1)) for t in (bm, bn))
        lines.append(f"  float ra[{qa}], rb[{qb}];")
        loads = self.gather(g.a, g.m, bm, "ra", "As") + self.gather(g.b, g.n, bn, "rb", "Bs")
        lines += ["  {", f"    const {it} k0 = 0;", *("    " + line for line in loads), "  }"]
        lines += ["  {", "    const int buf = 0;", *("    " + line for line in self.stores), "  }", "  __syncthreads();"]
        lines.append(f"  for ({it} k0 = 0, buf = 0; k0 < {k}; k0 += {bk}, buf ^= 1) {{")
        lines.append(f"    const bool more = k0 + {bk} < {k};")
        lines.append("    if (more) {")
        lines.append(f"      const {it} next = k0 + {bk};")
        lines += ["      {", f"        const {it} k0 = next;", *("        " + line for line in loads), "      }"]
        lines.append("    }")
        lines.append("    #pragma unroll")
        lines.append(f"    for (int kk = 0; kk < {bk}; ++kk) {{")
        lines.append(f"      float a[{tm}], b[{tn}];")
        for name, count, offset, width in (("a", tm // 4, "ty", rows), ("b", tn // 4, "tx", columns)):
            smem = "As" if name == "a" else "Bs"
            for i4 in range(count):
                lines.append(f"      {{ const float4 t = *(const float4*)&{smem}[buf][kk][{i4 * width * 4} + {offset} * 4]; "
                             + " ".join(f"{name}[{4 * i4 + n}] = t.{c};" for n, c in enumerate("xyzw")) + " }")
        lines.append(f"      #pragma unroll\n      for (int i = 0; i < {tm}; ++i)\n        #pragma unroll\n"
                     f"        for (int j = 0; j < {tn}; ++j) c[i][j] = fmaf(a[i], b[j], c[i][j]);")
        lines.append("    }")
        lines.append("    if (more) {")
        lines.append("      const int nb = buf ^ 1;")
        lines += ["      {", "        const int buf = nb;", *("        " + line for line in self.stores), "      }"]
        lines.append("    }")
        lines.append("    __syncthreads();")
        lines.append("  }")
        self.epilogue(rows, columns)

    def epilogue(self, rows: int, columns: int) -> None:
        """Every output at each of the thread's results (the reduce's value in ``acc``)."""
        g, it, lines = self.gemm, self.itype, self.lines
        _, m, n, _ = g.sizes
        tm, tn = self.gv.tile, self.gv.upcast
        lines.append(f"  #pragma unroll\n  for (int i = 0; i < {tm}; ++i) {{")
        lines.append(f"    const {it} pm = m0 + (i / 4) * {rows * 4} + ty * 4 + (i % 4);")
        lines.append(f"    if (pm >= {m}) continue;")
        self.declare("pm", g.m, "    ")
        lines.append(f"    #pragma unroll\n    for (int j = 0; j < {tn}; ++j) {{")
        lines.append(f"      const {it} pn = n0 + (j / 4) * {columns * 4} + tx * 4 + (j % 4);")
        lines.append(f"      if (pn >= {n}) continue;")
        self.declare("pn", g.n, "      ")
        lines.append("      const float acc = c[i][j];")
        at = self.index(flatten([var(v) for v in g.kernel.vars], g.kernel.shape))
        saved, self.names = self.names, {Acc(DType.F32): "acc"}
        self.emit(list(g.kernel.outputs), "      ")
        for o, e in enumerate(g.kernel.outputs):
            lines.append(f"      {self.put(o, e.dtype, at)}")
        self.names = saved
        lines.append("    }")
        lines.append("  }")

    def put(self, o: int, dtype: DType, at: str) -> str:
        """The statement storing output ``o`` (already emitted) at element ``at``."""
        name = self.names[self.gemm.kernel.outputs[o]]
        return f"out{o}[{at}] = (uchar){name};" if dtype == DType.BOOL else f"out{o}[{at}] = {name};"


def function_name(g: Gemm, variant: Variant) -> str:
    """The function's name: the kernel's, marked as its implicit GEMM in ``variant``."""
    return f"{g.kernel.name}_igemm_{variant.tag}"


def source(g: Gemm, variant: Variant) -> tuple[str, str]:
    """The CUDA C source of ``g`` as an implicit GEMM in ``variant`` and its function's name."""
    assert variant_error(g, variant) is None, variant_error(g, variant)
    head, function = _GemmEmitter(g, variant).parts()
    name = function_name(g, variant)
    old = f"void {base_name(g.kernel, Variant(local_size=variant.local_size))}("
    assert old in function
    function = function.replace(old, f"void __launch_bounds__({variant.local_size}) {name}(", 1)
    return PRELUDE + "".join(head) + restrict(function), name

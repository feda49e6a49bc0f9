"""OpenCL C rendering: one ``Kernel`` becomes one ``__kernel`` function over a 1-D range of work items.

The kernel runs over a 1-D global range of ``numel(kernel.shape)`` work items (one
for a rank-0 shape); each work item derives its global variables from
``get_global_id(0)`` by the row-major strides, runs the reduce loop (if any) and
stores every output at its flat index.  Expressions, loops and stores are the
``CStyleEmitter``'s (``engine.kernel.render.base``, which states the semantics);
row kernels are ``engine.kernel.render.rows``'.

Variants (``engine.kernel.schedule``: which apply, launch sizes, staging; transforms in ``engine.kernel.lanes``):

* ``upcast``/``tile``: a work item computes ``upcast`` contiguous points of the
  last non-trivial axis times ``tile`` points of the axis before it (a register
  tile: loads shared by lanes are issued once);
* ``unroll``: the innermost reduce loop runs ``unroll`` iterations per step, then
  a remainder loop; accumulation order is unchanged;
* ``group``: one work-group per output point; its work items stride over the
  flattened reduce and combine their partials by a tree in local memory (no
  blocked summation: a tree already);
* ``smem`` (with a blocked work-group, see ``block``): the innermost reduce loop
  runs in tiles of ``smem`` steps; per tile the group's items copy, cooperatively
  and coalesced, every load that follows one tiled axis and the reduce (a
  matmul's two operands, ``staged_loads``) into local memory, synchronise, and
  compute their register tiles from it (aligned vector reads); steps past the
  last whole tile read global memory.
"""

from __future__ import annotations

import functools

from engine.kernel.index import Var, add, lit, scale, var
from engine.kernel.ir import Expr, Kernel, Load, schedule
from engine.kernel.lanes import Lanes, Staged, dependent, flat_reduce, lanes, rewrite, substitute, unroll, upcast_axes
from engine.kernel.render.base import COMPUTE, CStyleEmitter, program_source
from engine.kernel.render.rows import RowEmitter
from engine.kernel.schedule import DEFAULT_VARIANT, Tile, Variant, block, blocks, staging
from engine.program.dtypes import DType


class OpenCLEmitter(CStyleEmitter):
    """Builds one ``__kernel`` function: work item -> lanes (or work-group -> point), the reduce, the stores."""

    late_guard = ""
    """The return of items past an end, when it must wait for the reduce's barriers (set by ``blocked``)."""

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


    def blocked(self, plan: Lanes, shape: tuple[int, int]) -> None:
        """Declare the tiled axes' variables from the work-group's block and the local id (see ``block``).

        The other axes come from the group id (``decompose`` of ``gid``); items past an end return.
        """
        k, it = self.kernel, self.itype
        rows, columns = shape
        groups, bp, bq = blocks(k, self.variant, shape)
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


def emitter(kernel: Kernel, variant: Variant) -> CStyleEmitter:
    """The OpenCL emitter of ``kernel``: the row emitter for a row kernel."""
    return (RowEmitter if kernel.stages else OpenCLEmitter)(kernel, variant)


def source(items: list[tuple[Kernel, Variant]]) -> str:
    """One OpenCL program holding the ``__kernel`` functions of ``items`` (see ``program_source``)."""
    return program_source(items, emitter)


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
    return source([(kernel, variant)])

"""OpenCL C of row kernels (``Kernel.stages``): the reduces of a row in order, then the row's outputs.

``engine.kernel.render.opencl`` dispatches here for row kernels; expressions, loads,
reduce initial values and combines are the ``CStyleEmitter``'s.  Variants (which apply, launch sizes:
``engine.kernel.schedule``):

* default (``local_size`` may be set): one work item per row; each stage is a
  loop over its reduce (its loop-invariant part hoisted), then a loop over the
  row stores the outputs; a siblings kernel's stages of one size share one loop;
* ``group``: one work-group per row; each stage is a group reduce (strided
  partial loops, a tree in local memory whose result every item reads), then
  the items store the row's outputs, strided by the group size, so the row's
  later reads mostly hit cache and stores are coalesced.

Upcast, tile and unroll do not apply. The native device's C (``engine.kernel.render.c.CRowEmitter``) runs
the same row in a loop over rows.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from engine.kernel.index import Idx, Var, flatten, var
from engine.kernel.ir import Acc, Expr, Kernel, Reduce, dependent
from engine.kernel.lanes import Subst, flat_reduce, rewrite, substitute
from engine.kernel.render.base import COMPUTE, INT32_MAX, CStyleEmitter
from engine.kernel.schedule import Variant
from engine.program.dtypes import DType

BLOCK = 64
"""Terms of a float sum the default variant adds before adding their sum to the row's (see ``loop_stage``)."""


class RowEmitter(CStyleEmitter):
    """Builds the source of one row kernel (``parts()`` as for any kernel)."""

    def __init__(self, kernel: Kernel, variant: Variant) -> None:
        super().__init__(kernel, variant)
        self.vars |= {v: f"c{i}" for i, v in enumerate(kernel.row)}  # stages loop over their flattened reduce
        if 2 * kernel.output_types[0].numel + 64 > INT32_MAX:
            self.itype = "long"

    def body(self) -> None:
        """Work item (or work-group) -> row; then the row."""
        k, it = self.kernel, self.itype
        if self.variant.group > 1:
            self.lines.append(f"  const {it} grp = ({it})get_group_id(0);")
            self.lines.append(f"  const {it} lid = ({it})get_local_id(0);")
            self.decompose("grp", k.vars)
        else:
            self.lines.append(f"  if (get_global_id(0) >= {k.numel}) return;")
            if any(v.size > 1 for v in k.vars):
                self.lines.append(f"  const {it} gid = ({it})get_global_id(0);")
            self.decompose("gid", k.vars)
        self.row()

    def row(self) -> None:
        """Each stage's reduce, then the row's outputs (the row's global variables decomposed already)."""
        stages = self.kernel.stages
        if self.variant.group <= 1 and self.kernel.siblings and len({s.size for s in stages}) == 1:
            self.sibling_loop()
        else:
            for i, stage in enumerate(stages):  # a later stage may read an earlier one's result: named at once
                if self.variant.group > 1:
                    self.group_stage(i, stage)
                else:
                    self.loop_stage(i, stage)
                self.names[Acc(stage.dtype, i)] = f"acc{i}"
        self.row_outputs()

    def store_index(self) -> Idx:
        """The outputs' element of the current point: the row-major offset of the store variables."""
        store = self.kernel.store
        return flatten([var(v) for v in store], [v.size for v in store])

    def loop_pragma(self, red: Reduce | None, acc: str) -> str | None:
        """A line before a row loop that has no blocks (``red``'s accumulating into ``acc``; None: the outputs'
        loop), for a compiler to vectorise it; OpenCL has none."""
        return None

    def siblings_pragma(self) -> str | None:
        """``loop_pragma`` of ``sibling_loop``'s one loop, accumulating every stage; OpenCL has none."""
        return None

    def stage_stores(self, i: int, body: Expr, sub: Subst) -> list[str]:
        """Lines in stage ``i``'s loop after its accumulation (its summand ``body`` named; ``sub``: the stage's
        variables in terms of its flat loop variable); OpenCL has none."""
        return []

    def reread(self, at: Idx) -> list[Expr]:
        """Output expressions named as reads of what a stage stored, before the outputs' loop (``at``: the store
        index in the row's variables); returns them, to be forgotten after it. OpenCL has none."""
        return []

    def header(self, v: Var, start: str = "0", step: int = 1, bound: str | None = None) -> str:
        """A ``for`` over variable ``v`` from ``start`` by ``step`` while below ``bound`` (its size)."""
        name = self.vars[v]
        inc = f"++{name}" if step == 1 else f"{name} += {step}"
        return f"for ({self.itype} {name} = {start}; {name} < {bound or v.size}; {inc}) {{"

    def scoped_loop(self, roots: list[Expr], variables: set[Var], headers: list[str], before: list[str],
                    inside: Callable[[], list[str]], after: tuple[str, ...] = (), pragma: str | None = None,
                    held: Collection[Expr] = ()) -> None:
        """Emit ``roots`` (hoisting what does not depend on ``variables``) and the lines ``before``, then the
        nested loops ``headers`` (the line ``pragma`` before the innermost) around the dependent rest and the
        lines ``inside()``, then the lines ``after``. Nodes of ``held`` are named already (their values read,
        not computed), so what only they use is not emitted."""
        live = _reached(roots, set(held))
        inner = (dependent(roots, variables) | set(roots)) & live
        self.emit(roots, "  ", only=live - inner)
        self.lines += [f"  {line}" for line in before]
        indent = "  " * (1 + sum(line.endswith("{") for line in before))  # inside the loops ``before`` opens
        for n, h in enumerate(headers, 1):
            if pragma is not None and n == len(headers):
                self.lines.append(f"{indent}{pragma}")
            self.lines.append(f"{indent}{h}")
            indent += "  "
        scoped = self.emit(roots, indent, only=inner)
        self.lines += [f"{indent}{line}" for line in inside()]
        for _ in headers:
            indent = indent[:-2]
            self.lines.append(f"{indent}}}")
        self.lines += [f"  {line}" for line in after]
        for e in scoped:  # defined inside the loop: out of scope after it
            del self.names[e]

    def loop_stage(self, i: int, red: Reduce) -> None:
        """Stage ``i`` on one work item: ``acc<i>`` accumulated over the (flattened) reduce.

        A float sum adds blocks of ``BLOCK`` terms, then the blocks' sums: its rounding error grows like a
        pairwise sum's (what numpy and the group variants do), not like one long sequential sum's. A loop with a
        ``loop_pragma`` (a C compiler's vectorised reduce) has no blocks: its vector lanes' partial sums do that.
        """
        acc, t = f"acc{i}", COMPUTE[red.dtype]
        flat, sub = flat_reduce(red.vars)
        self.vars[flat] = "ri"
        (body,) = rewrite([red.body], sub)
        pragma = self.loop_pragma(red, acc)
        if pragma is not None or red.op != "sum" or not red.dtype.is_float or flat.size <= BLOCK:
            self.scoped_loop([body], {flat}, [self.header(flat)], [f"{t} {acc} = {self.init(red)};"],
                             lambda: [f"{acc} = {self.combine(red, acc, self.names[body])};",
                                      *self.stage_stores(i, body, sub)], pragma=pragma)
            return
        block = f"for ({self.itype} rb = 0; rb < {flat.size}; rb += {BLOCK}) {{"
        self.scoped_loop([body], {flat}, [self.header(flat, "rb", 1, f"min(rb + {BLOCK}, {self.ilit(flat.size)})")],
                         [f"{t} {acc} = {self.init(red)};", block, f"  {t} part = {self.init(red)};"],
                         lambda: [f"part = {self.combine(red, 'part', self.names[body])};",
                                  *self.stage_stores(i, body, sub)],
                         (f"  {acc} = {self.combine(red, acc, 'part')};", "}"))

    def sibling_loop(self) -> None:
        """A siblings kernel's stages (independent, one size) as one loop on one work item, ``acc<i>`` each, so
        that an element their bodies share is loaded once for all of them.  Float sums of more than ``BLOCK``
        terms add in blocks, as ``loop_stage``'s do, unless the loop has a pragma."""
        stages = self.kernel.stages
        flats = [flat_reduce(s.vars) for s in stages]  # one variable for all: the stages are of one size
        flat = flats[0][0]
        self.vars[flat] = "ri"
        bodies = [rewrite([s.body], sub)[0] for s, (_, sub) in zip(stages, flats)]
        pragma = self.siblings_pragma()
        blocked = [pragma is None and s.op == "sum" and s.dtype.is_float and flat.size > BLOCK for s in stages]
        before = [f"{COMPUTE[s.dtype]} acc{i} = {self.init(s)};" for i, s in enumerate(stages)]
        header, after = self.header(flat), ()
        if any(blocked):
            before += [f"for ({self.itype} rb = 0; rb < {flat.size}; rb += {BLOCK}) {{",
                       *(f"  {COMPUTE[s.dtype]} part{i} = {self.init(s)};" for i, s in enumerate(stages) if blocked[i])]
            header = self.header(flat, "rb", 1, f"min(rb + {BLOCK}, {self.ilit(flat.size)})")
            after = (*(f"  acc{i} = {self.combine(s, f'acc{i}', f'part{i}')};" for i, s in enumerate(stages)
                       if blocked[i]), "}")

        def accumulate() -> list[str]:
            into = [f"part{i}" if blocked[i] else f"acc{i}" for i in range(len(stages))]
            return [f"{a} = {self.combine(s, a, self.names[b])};" for a, s, b in zip(into, stages, bodies)]

        self.scoped_loop(bodies, {flat}, [header], before, accumulate, after, pragma=pragma)
        for i, s in enumerate(stages):
            self.names[Acc(s.dtype, i)] = f"acc{i}"

    def group_stage(self, i: int, red: Reduce) -> None:
        """Stage ``i`` across the work-group: strided partials, a tree in local memory, ``acc<i>`` in every item."""
        g, it, t, acc, part = self.variant.group, self.itype, COMPUTE[red.dtype], f"acc{i}", f"zx_part{i}"
        flat, sub = flat_reduce(red.vars)
        self.vars[flat] = "ri"
        (body,) = rewrite([red.body], sub)
        self.scoped_loop([body], {flat}, [self.header(flat, "lid", g)], [f"{t} {acc} = {self.init(red)};"],
                         lambda: [f"{acc} = {self.combine(red, acc, self.names[body])};"])
        self.lines += [
            f"  __local {'int' if red.dtype == DType.BOOL else t} {part}[{g}];",
            f"  {part}[lid] = {acc};",
            "  barrier(CLK_LOCAL_MEM_FENCE);",
            f"  for ({it} s = {g // 2}; s > 0; s >>= 1) {{",
            f"    if (lid < s) {part}[lid] = {self.combine(red, f'{part}[lid]', f'{part}[lid + s]')};",
            "    barrier(CLK_LOCAL_MEM_FENCE);",
            "  }",
            f"  {acc} = {part}[0];",
        ]

    def row_outputs(self) -> None:
        """Every output at every point of the row (strided over the work-group's items in a group variant)."""
        k = self.kernel
        at = self.store_index()
        outputs = list(k.outputs)
        if self.variant.group > 1:
            flat, sub = flat_reduce(k.row)
            self.vars[flat] = "ro"
            outputs, at = rewrite(outputs, sub), substitute(at, sub)
            variables, headers = {flat}, [self.header(flat, "lid", self.variant.group)]
        else:
            variables, headers = set(k.row), [self.header(v) for v in k.row]
        held = self.reread(at)
        self.scoped_loop(outputs, variables, headers, [], lambda: [
            self.put(o, e.dtype, self.index(at), self.names[e]) for o, e in enumerate(outputs)],
            pragma=self.loop_pragma(None, ""), held=held)
        for e in held:
            del self.names[e]

    def put(self, o: int, dtype: DType, at: str, name: str) -> str:
        """The statement storing ``name`` at element ``at`` of output ``o``."""
        if dtype == DType.F16:
            return f"vstore_half_rte({name}, {at}, out{o});"
        if dtype == DType.BOOL:
            return f"out{o}[{at}] = (uchar){name};"
        return f"out{o}[{at}] = {name};"


def _reached(roots: list[Expr], held: set[Expr]) -> set[Expr]:
    """The nodes of ``roots`` reached without going below a node of ``held``."""
    seen: set[Expr] = set()
    stack = list(roots)
    while stack:
        e = stack.pop()
        if e not in seen:
            seen.add(e)
            if e not in held:
                stack.extend(e.children())
    return seen

"""The kernelizer: cut the saturated e-graph into kernels and attach them to the classes they compute.

Every class that must exist in memory (a program output, or the input of some
kernel) gets kernel candidates, one per node form tried at its root; below the
root each class is inlined in its *default form* (the cheapest by a structural
cost) unless it must be a kernel input.  The fusion rules, as in zyx:

* elementwise ops, casts and views always fuse; views become index arithmetic;
* a kernel centres on at most one reduce, and a reduce fuses only where its
  result is not broadcast again (no expand or growing pad between it and the
  kernel's root) and not inside another reduce's body;
* a class shared by several consumers is recomputed in each when its region
  holds no reduce, and stored (a kernel input) when it does;
* program outputs are stored, and kernels read them back.

Candidates for different root forms (e.g. ``T(B@A)`` beside ``T(A)@T(B)``) and
for the classes they in turn need compete later, in extraction.

A class whose default kernel loads reduces it could compute per row (softmax's
max and sum, layernorm's mean and variance) also gets a *row kernel* candidate
(``engine.kernel.ir``): those reduces are recomputed inside it as stages, one
row per work item or work-group, instead of being stored by kernels of their own.
One whose default kernel loads a second reduce at its own output point (a gated
unit's ``silu(x @ wg) * (x @ wu)``) gets a *siblings* candidate: a row kernel of
one point per row whose stages are those reduces, so that a device can run them
together (the cuBLAS device as one batched call) and store neither.

Each candidate keeps the decisions that shaped it (``engine.kernel.decisions``): the rule that fused each
class, why each input was left out, the store-vs-recompute numbers of shared classes.  Candidates are named
for people by what they compute (``engine.kernel.names``); the hash stays the id.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

from engine.egraph.egraph import ATTACHED_OPS, ClassId, EGraph, NodeId, Scalar
from engine.kernel.cost import Work, work
from engine.kernel.decisions import Boundary, Decisions, Fused, Sharing
from engine.kernel.index import Idx, Var, add, flatten, lit, unflatten, var
from engine.kernel.ir import Acc, Bound, Buffer, Const, Expr, Kernel, Load, Op, Reduce, Where
from engine.kernel.names import kernel_names
from engine.program.primitives import BINARY_OPS, MOVEMENT_OPS, REDUCE_OPS, UNARY_OPS

MAX_ROOT_FORMS = 6
"""Root forms tried per class (cheapest default cost first)."""

MAX_STAGES = 4
"""Reduces a row kernel recomputes at most (further ones are loaded)."""

_OP_COST = {"leaf": 0.0, "const": 0.0, "reduce_sum": 4.0, "reduce_max": 4.0, **dict.fromkeys(MOVEMENT_OPS, 0.01)}


@dataclass(frozen=True)
class Candidate:
    """A kernel that computes class ``output`` from the classes ``inputs`` (its buffers, in order)."""

    kernel: Kernel
    output: ClassId
    inputs: tuple[ClassId, ...]
    root: NodeId
    """The node form the kernel was built from."""
    decisions: Decisions
    """What shaped it: the fusion rules that grew it, what was left out and why."""

    @property
    def id(self) -> str:
        """Unique per kernelization: equal kernels (one ``key``) may compute different classes."""
        return f"{self.kernel.name}@c{self.output}({','.join(f'c{i}' for i in self.inputs)})"


@dataclass
class Kernelization:
    """The kernel candidates of an e-graph, by kernel key and by the class each computes."""

    egraph: EGraph
    defaults: dict[ClassId, NodeId]
    """The form each class is inlined in."""
    candidates: dict[str, Candidate] = field(default_factory=dict)
    """By candidate id."""
    by_class: dict[ClassId, list[str]] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)
    """A readable name of each candidate, unique here (``engine.kernel.names``); the id stays the key."""

    def kernels(self, c: ClassId) -> list[Candidate]:
        return [self.candidates[k] for k in self.by_class.get(self.egraph.find(c), [])]

    def name(self, cand_id: str) -> str:
        return self.names.get(cand_id, cand_id.split("@")[0])

    def names_by_key(self) -> dict[str, str]:
        """The readable names by kernel key: how the tuner's progress reports name a kernel."""
        return {cand.kernel.key: self.name(k) for k, cand in self.candidates.items()}

    def rivals(self, cand_id: str) -> list[str]:
        """The other candidates of the class ``cand_id`` computes (what it competes with in extraction)."""
        return [k for k in self.by_class.get(self.candidates[cand_id].output, []) if k != cand_id]


def default_forms(egraph: EGraph) -> dict[ClassId, NodeId]:
    """The cheapest structural form of each class by tree cost (egg's greedy extraction).

    Every op costs more than nothing except leaves and constants, so the chosen
    forms never form a cycle.
    """
    best: dict[ClassId, tuple[float, NodeId]] = {}
    nodes = [(egraph.find(n), n, egraph.node(n)) for c in egraph.classes() for n in c.nodes]
    nodes = [t for t in nodes if t[2].op not in ATTACHED_OPS]
    changed = True
    while changed:
        changed = False
        for c, n, node in nodes:
            if any(child not in best for child in node.children):
                continue
            cost = _OP_COST.get(node.op, 1.0) + sum(best[child][0] for child in node.children)
            if c not in best or cost < best[c][0]:
                best[c] = (cost, n)
                changed = True
    return {c: n for c, (_, n) in best.items()}


def kernelize(egraph: EGraph, max_root_forms: int = MAX_ROOT_FORMS) -> Kernelization:
    """Kernel candidates for every class the program's outputs need (the e-graph must be clean)."""
    assert egraph.clean
    defaults = default_forms(egraph)
    plan = _Regions(egraph, defaults)
    result = Kernelization(egraph, defaults)
    todo = list(dict.fromkeys(egraph.output_classes().values()))
    seen = set(todo)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 100_000))  # inlining recurses once per fused op
    try:
        while todo:
            c = todo.pop()
            roots = _root_forms(egraph, c, defaults, max_root_forms)
            cands = [_Builder(plan, c, root, "form" if i else "default").build() for i, root in enumerate(roots)]
            if cands and cands[0] is not None and any(plan.holds_reduce(i) for i in cands[0].inputs):
                cands.append(_RowBuilder(plan, c, roots[0], "row").build())  # it loads reduces: try recomputing them
                cands.append(_SiblingBuilder(plan, c, roots[0], "siblings").build())
            for cand in cands:
                if cand is None or c in cand.inputs or cand.id in result.candidates:
                    continue
                result.candidates[cand.id] = cand
                result.by_class.setdefault(c, []).append(cand.id)
                for i in cand.inputs:
                    if i not in seen and not plan.is_leaf(i):
                        seen.add(i)
                        todo.append(i)
    finally:
        sys.setrecursionlimit(limit)
    result.names = kernel_names(egraph, result.candidates)
    return result


def _root_forms(egraph: EGraph, c: ClassId, defaults: dict[ClassId, NodeId], limit: int) -> list[NodeId]:
    forms = [n for n in egraph.eclass(c).nodes if egraph.node(n).op not in ATTACHED_OPS]
    if any(egraph.node(n).op == "leaf" for n in forms):
        return []  # an input: already in memory
    first = defaults[c]
    return [first, *[n for n in forms if n != first and all(ch in defaults for ch in egraph.node(n).children)]][:limit]


class _Regions:
    """What the fusion rules need to know about each class, computed once over the default forms."""

    def __init__(self, egraph: EGraph, defaults: dict[ClassId, NodeId]) -> None:
        self.egraph = egraph
        self.defaults = defaults
        self.outputs = set(egraph.output_classes().values())
        self.users = self._count_users()
        self._reduces: dict[ClassId, bool] = {}
        self._work: dict[ClassId, Work] = {}

    def store_reason(self, c: ClassId) -> str:
        """Why ``must_store(c)``: a key of ``decisions.REASONS``."""
        return "input" if self.is_leaf(c) else "output" if c in self.outputs else "shared"

    def sharing(self, c: ClassId, stored: bool) -> Sharing | None:
        """The store-vs-recompute decision on ``c`` with its numbers, when several consumers read it."""
        users = self.users.get(c, 0)
        if users < 2 or self.is_leaf(c) or c in self.outputs:
            return None
        if c not in self._work:  # the work of computing it once: its own default kernel's
            self._work[c] = work(_Builder(self, c, self.defaults[c], "default").build().kernel)
        nbytes = self.egraph.eclass(c).numel * self.egraph.eclass(c).dtype.itemsize
        return Sharing(c, users, stored, self.holds_reduce(c), nbytes * (1 + users), self._work[c].ops * (users - 1))

    def is_leaf(self, c: ClassId) -> bool:
        return self.egraph.node(self.defaults[c]).op == "leaf"

    def must_store(self, c: ClassId) -> bool:
        """A class no consumer may inline: an input, an output, or a shared region holding a reduce."""
        return self.is_leaf(c) or c in self.outputs or (self.users.get(c, 0) > 1 and self.holds_reduce(c))

    def holds_reduce(self, c: ClassId) -> bool:
        """Whether inlining ``c`` would bring a reduce into the consumer's kernel."""
        if c not in self._reduces:
            stack, order = [c], []
            while stack:  # post-order without recursion: regions can be thousands of ops deep
                x = stack.pop()
                if x in self._reduces:
                    continue
                order.append(x)
                stack.extend(ch for ch in self._fused_children(x) if ch not in self._reduces)
            for x in reversed(order):
                node = self.egraph.node(self.defaults[x])
                self._reduces[x] = node.op in REDUCE_OPS or any(self._reduces.get(ch, False) for ch in self._fused_children(x))
        return self._reduces[c]

    def _fused_children(self, c: ClassId) -> list[ClassId]:
        node = self.egraph.node(self.defaults[c])
        if node.op in ("expand", "pad") or node.op in REDUCE_OPS:
            return []  # a reduce below a broadcast, or a second reduce, is stored, never fused
        return [ch for ch in node.children if not (self.is_leaf(ch) or ch in self.outputs)]

    def _count_users(self) -> dict[ClassId, int]:
        """Distinct consumer classes of each class, in the default-form DAG of the outputs."""
        users: dict[ClassId, int] = {}
        seen: set[ClassId] = set()
        stack = list(self.outputs)
        while stack:
            c = stack.pop()
            if c in seen:
                continue
            seen.add(c)
            for ch in dict.fromkeys(self.egraph.node(self.defaults[c]).children):
                users[ch] = users.get(ch, 0) + 1
                stack.append(ch)
        return users


@dataclass(frozen=True)
class _Where:
    """Where in the kernel an expression is being built."""

    in_reduce: bool = False
    broadcast: bool = False
    """An expand or growing pad lies between the kernel root and here (outside the reduce)."""


class _Builder:
    """Builds one kernel: the root class in ``root`` form, everything below it inlined or loaded."""

    def __init__(self, regions: _Regions, output: ClassId, root: NodeId, grown: str) -> None:
        self.regions = regions
        self.egraph = regions.egraph
        self.output = output
        self.root = root
        self.grown = grown
        self.fused: dict[ClassId, str] = {}
        """Each class computed in the kernel, by the rule that brought it in (``decisions.RULES``)."""
        self.left_out: dict[ClassId, str] = {}
        """Each class loaded instead, with why (``decisions.REASONS``)."""
        self.shared: dict[ClassId, Sharing] = {}
        self.inputs: dict[ClassId, int] = {}
        self.reduce: tuple[ClassId, tuple[Idx, ...], Reduce] | None = None
        self.memo: dict[tuple[ClassId, tuple[Idx, ...], _Where], Expr] = {}

    def build(self) -> Candidate | None:
        cls = self.egraph.eclass(self.output)
        gvars = tuple(Var(f"g{i}", d) for i, d in enumerate(cls.shape))
        value = self.form(self.root, tuple(var(v) for v in gvars), _Where())
        reduce = self.reduce[2] if self.reduce else None
        kernel = Kernel(self.buffers(), cls.shape, gvars, reduce, (value,))
        return self.candidate(kernel)

    def buffers(self) -> tuple[Buffer, ...]:
        """The types of the kernel's inputs so far, in order."""
        return tuple(Buffer(self.egraph.eclass(c).shape, self.egraph.eclass(c).dtype) for c in self.inputs)

    def candidate(self, kernel: Kernel) -> Candidate:
        decisions = Decisions(self.grown, self.root, tuple(Fused(c, r) for c, r in self.fused.items()),
                              tuple(Boundary(c, r) for c, r in self.left_out.items()), tuple(self.shared.values()))
        return Candidate(kernel, self.output, tuple(self.inputs), self.root, decisions)

    def note_sharing(self, c: ClassId, stored: bool) -> None:
        if c not in self.shared and (s := self.regions.sharing(c, stored)) is not None:
            self.shared[c] = s

    def value(self, c: ClassId, idx: tuple[Idx, ...], where: _Where) -> Expr:
        """Class ``c`` at index ``idx``: a load if it must be in memory here, else its default form inlined."""
        c = self.egraph.find(c)
        key = (c, idx, where)
        if key not in self.memo:
            self.memo[key] = self._value(c, idx, where)
        return self.memo[key]

    def _value(self, c: ClassId, idx: tuple[Idx, ...], where: _Where) -> Expr:
        regions = self.regions
        if regions.must_store(c):
            self.note_sharing(c, True)
            return self.load(c, idx, regions.store_reason(c))
        if regions.holds_reduce(c) and not self._may_fuse_reduce(where):
            return self.load(c, idx, self._unfusable(where))
        self.note_sharing(c, False)
        return self.form(regions.defaults[c], idx, where)

    def _may_fuse_reduce(self, where: _Where) -> bool:
        return not where.in_reduce and not where.broadcast and self.reduce is None

    def _unfusable(self, where: _Where) -> str:
        """Why a reduce may not fuse here (``_may_fuse_reduce`` is false)."""
        return "nested" if where.in_reduce else "broadcast" if where.broadcast else "second-reduce"

    def load(self, c: ClassId, idx: tuple[Idx, ...], reason: str) -> Load:
        """``c`` read from memory: an input of the kernel, left out for ``reason``."""
        self.left_out.setdefault(c, reason)
        cls = self.egraph.eclass(c)
        slot = self.inputs.setdefault(c, len(self.inputs))
        return Load(slot, flatten(idx, cls.shape), cls.numel, cls.dtype)

    def form(self, n: NodeId, idx: tuple[Idx, ...], where: _Where) -> Expr:
        """Node form ``n`` at index ``idx``."""
        op, param, children = self.egraph.node(n)
        cls = self.egraph.eclass(n)
        if op == "leaf":
            return self.load(cls.id, idx, "input")
        if cls.id == self.output:
            self.fused.setdefault(cls.id, "root")
        elif op not in REDUCE_OPS:
            self.fused.setdefault(cls.id, "view" if op in MOVEMENT_OPS else "elementwise")
        if op == "const":
            return Const(param, cls.dtype)  # type: ignore[arg-type]
        if op in UNARY_OPS or op in BINARY_OPS:
            return Op(op, tuple(self.value(ch, idx, where) for ch in children), cls.dtype)
        if op == "cast":
            return Op("cast", (self.value(children[0], idx, where),), cls.dtype)
        (child,) = children
        shape = self.egraph.eclass(child).shape
        if op == "permute":
            inner = [lit(0)] * len(shape)
            for i, axis in enumerate(param):  # type: ignore[arg-type]
                inner[axis] = idx[i]
            return self.value(child, tuple(inner), where)
        if op == "reshape":
            return self.value(child, tuple(unflatten(flatten(idx, cls.shape), shape)), where)
        if op == "expand":
            grows = any(a == 1 and b != 1 for a, b in zip(shape, cls.shape))
            inner_idx = tuple(lit(0) if d == 1 else i for i, d in zip(idx, shape))
            return self.value(child, inner_idx, _Where(where.in_reduce, where.broadcast or (grows and not where.in_reduce)))
        if op == "pad":
            return self._pad(child, shape, param, idx, where)  # type: ignore[arg-type]
        if op in REDUCE_OPS:
            return self._reduce(n, child, shape, param, idx, where)  # type: ignore[arg-type]
        raise AssertionError(f"cannot kernelize {op!r}")

    def _pad(self, child: ClassId, shape: tuple[int, ...], param: tuple, idx: tuple[Idx, ...], where: _Where) -> Expr:
        pads, fill = param
        inner = tuple(add(i, lit(-lo)) for i, (lo, _) in zip(idx, pads))
        bounds = tuple(
            Bound(i, 0, d) for i, d in zip(inner, shape) if i.bounds[0] < 0 or i.bounds[1] >= d
        )
        grows = bool(bounds) and not where.in_reduce
        value = self.value(child, inner, _Where(where.in_reduce, where.broadcast or grows))
        if not bounds:
            return value
        dtype = self.egraph.eclass(child).dtype
        return Where(bounds, value, Const(Scalar(fill, dtype), dtype), dtype)

    def _reduce(self, n: NodeId, child: ClassId, shape: tuple[int, ...], axes: tuple[int, ...], idx, where) -> Expr:
        c = self.egraph.find(n)
        if self.reduce is not None and self.reduce[:2] == (c, idx):
            return Acc(self.reduce[2].dtype)
        if not self._may_fuse_reduce(where):
            return self.load(c, idx, self._unfusable(where))
        self.fused.setdefault(c, "reduce")
        rvars, inner = _reduce_index(shape, axes, idx)
        op = self.egraph.node(n).op.removeprefix("reduce_")
        body = self.value(child, inner, _Where(in_reduce=True))  # reduces in the body are loaded
        self.reduce = (c, idx, Reduce(op, rvars, body))
        return Acc(body.dtype)


def _reduce_index(shape: tuple[int, ...], axes: tuple[int, ...], idx: tuple[Idx, ...]) -> tuple[tuple[Var, ...], tuple[Idx, ...]]:
    """The reduce variables of a reduce over ``axes`` of ``shape`` at output ``idx``, and the index its body reads."""
    rvars = tuple(Var(f"r{j}", shape[a]) for j, a in enumerate(axes))
    inner, outer, r = [], iter(idx), iter(rvars)
    for a in range(len(shape)):
        inner.append(var(next(r)) if a in axes else next(outer))
    return rvars, tuple(inner)


class _StageBuilder(_Builder):
    """A builder whose kernel computes its reduces as ``stages`` (each reduce at one index once)."""

    def __init__(self, regions: _Regions, output: ClassId, root: NodeId, grown: str) -> None:
        super().__init__(regions, output, root, grown)
        self.stages: list[Reduce] = []
        self.stage_of: dict[tuple[ClassId, tuple[Idx, ...]], int] = {}

    def staged(self, c: ClassId, idx: tuple[Idx, ...]) -> Acc | None:
        """The result of the stage computing reduce class ``c`` at ``idx``, if there is one already."""
        stage = self.stage_of.get((c, idx))
        return None if stage is None else Acc(self.stages[stage].dtype, stage)

    def add_stage(self, n: NodeId, child: ClassId, shape: tuple[int, ...], axes: tuple[int, ...],
                  idx: tuple[Idx, ...], rule: str) -> Acc:
        """Reduce node ``n`` (over ``axes`` of ``child``, of ``shape``) at ``idx`` as a new stage, fused by ``rule``;
        reduces in its body are loaded."""
        c = self.egraph.find(n)
        self.fused.setdefault(c, rule)
        rvars, inner = _reduce_index(shape, axes, idx)
        body = self.value(child, inner, _Where(in_reduce=True))
        self.stage_of[(c, idx)] = len(self.stages)
        self.stages.append(Reduce(self.egraph.node(n).op.removeprefix("reduce_"), rvars, body))
        return Acc(body.dtype, len(self.stages) - 1)


class _RowBuilder(_StageBuilder):
    """Builds the row kernel of the root class: reduces it would load become stages where they can.

    The first reduce reached outside a reduce body whose index leaves an output axis of size > 1 unread fixes
    the global variables (those it reads; the other output axes form the row).  A reduce whose index reads only global variables (anywhere, bodies
    included) is a stage, computed once per row; the others are loaded.  Regions holding reduces are
    inlined even where they are shared (their reduces are computed once, as one stage, per index).
    """

    def __init__(self, regions: _Regions, output: ClassId, root: NodeId, grown: str) -> None:
        super().__init__(regions, output, root, grown)
        self.store: tuple[Var, ...] = ()
        self.outer: set[Var] | None = None

    def build(self) -> Candidate | None:
        cls = self.egraph.eclass(self.output)
        self.store = tuple(Var(f"g{i}", d) for i, d in enumerate(cls.shape))
        value = self.form(self.root, tuple(var(v) for v in self.store), _Where())
        if not self.stages:
            return None
        assert self.outer is not None
        gvars = tuple(v for v in self.store if v in self.outer)
        kernel = Kernel(self.buffers(), tuple(v.size for v in gvars), gvars, None, (value,), tuple(self.stages), self.store)
        return self.candidate(kernel)

    def _value(self, c: ClassId, idx: tuple[Idx, ...], where: _Where) -> Expr:
        regions = self.regions
        if regions.is_leaf(c) or c in regions.outputs:
            return self.load(c, idx, regions.store_reason(c))
        self.note_sharing(c, False)
        return self.form(regions.defaults[c], idx, where)

    def _reduce(self, n: NodeId, child: ClassId, shape: tuple[int, ...], axes: tuple[int, ...], idx, where) -> Expr:
        c = self.egraph.find(n)
        if (acc := self.staged(c, idx)) is not None:
            return acc
        reads = set().union(*(i.variables() for i in idx))
        if self.outer is None and not where.in_reduce and reads < {v for v in self.store if v.size > 1}:
            self.outer = reads  # a row of more than one point: its stages are computed once for all of them
        if self.outer is None or not reads <= self.outer or len(self.stages) >= MAX_STAGES:
            return self.load(c, idx, "stages" if len(self.stages) >= MAX_STAGES else "not-per-row")
        return self.add_stage(n, child, shape, axes, idx, "stage")


class _SiblingBuilder(_StageBuilder):
    """Builds the siblings kernel of the root class: every reduce outside a reduce body that the default kernel
    would fuse or load as a second reduce becomes a stage, up to ``MAX_STAGES``; the kernel's row is one point.

    A region holding a reduce is inlined outside the bodies even where it is shared (silu reads its argument
    twice; the reduce is one stage per index).  Inside a body the default kernel's rules hold (a reduce, or a
    shared region holding one, is loaded), so that each stage is a reduce a device can run alone.  None unless
    two or more reduces became stages: with one it is the default kernel.
    """

    def build(self) -> Candidate | None:
        cls = self.egraph.eclass(self.output)
        gvars = tuple(Var(f"g{i}", d) for i, d in enumerate(cls.shape))
        value = self.form(self.root, tuple(var(v) for v in gvars), _Where())
        if len(self.stages) < 2:
            return None
        kernel = Kernel(self.buffers(), cls.shape, gvars, None, (value,), tuple(self.stages), gvars)
        return self.candidate(kernel)

    def _value(self, c: ClassId, idx: tuple[Idx, ...], where: _Where) -> Expr:
        regions = self.regions
        if where.in_reduce or regions.is_leaf(c) or c in regions.outputs or not regions.holds_reduce(c):
            return super()._value(c, idx, where)
        self.note_sharing(c, False)
        return self.form(regions.defaults[c], idx, where)

    def _may_fuse_reduce(self, where: _Where) -> bool:
        return not where.in_reduce and not where.broadcast and len(self.stages) < MAX_STAGES

    def _unfusable(self, where: _Where) -> str:
        return "stages" if not where.in_reduce and not where.broadcast else super()._unfusable(where)

    def _reduce(self, n: NodeId, child: ClassId, shape: tuple[int, ...], axes: tuple[int, ...], idx, where) -> Expr:
        c = self.egraph.find(n)
        if (acc := self.staged(c, idx)) is not None:
            return acc
        if not self._may_fuse_reduce(where):
            return self.load(c, idx, self._unfusable(where))
        return self.add_stage(n, child, shape, axes, idx, "sibling")

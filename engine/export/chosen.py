"""What the compilation chose, read from its stages: the form of each class, the kernels of the plan."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from engine.egraph.egraph import ATTACHED_OPS, ClassId, EGraph, NodeId
from engine.kernel.kernelize import Candidate, Kernelization, default_forms
from engine.pipeline import Compilation


@dataclass(frozen=True)
class Region:
    """The classes one kernel candidate fuses: each in the form it is inlined in, and its fused children."""

    forms: dict[ClassId, NodeId]
    edges: list[tuple[ClassId, ClassId]]
    """(class, fused child class)."""
    loads: list[tuple[ClassId, ClassId]]
    """(class, kernel input class it reads)."""


def planned_kernels(c: Compilation) -> dict[str, str]:
    """Candidate id -> device of every kernel the chosen plan launches (empty before extraction)."""
    if c.extraction is None or c.egraph is None:
        return {}
    return {kn.candidate: kn.device for kn in c.extraction.kernels(c.egraph)}


def region(kz: Kernelization, cand: Candidate) -> Region:
    """Walk candidate ``cand`` from its root form down to the classes it loads."""
    eg = kz.egraph
    inputs = {eg.find(i) for i in cand.inputs}
    root = eg.find(cand.output)
    forms: dict[ClassId, NodeId] = {root: cand.root}
    edges: list[tuple[ClassId, ClassId]] = []
    loads: list[tuple[ClassId, ClassId]] = []
    todo = [root]
    while todo:
        cls = todo.pop()
        for child in dict.fromkeys(eg.node(forms[cls]).children):
            if child in inputs:
                loads.append((cls, child))
                continue
            edges.append((cls, child))
            if child not in forms and child in kz.defaults:
                forms[child] = kz.defaults[child]
                todo.append(child)
    return Region(forms, edges, loads)


def chosen_forms(c: Compilation) -> dict[ClassId, NodeId]:
    """The form of each class of the final e-graph that the compilation picked.

    A class computed by a kernel of the plan: the kernel's root form, or the default form it is
    inlined in; any other class: its default form (the kernelizer's cheapest structural form).
    """
    if c.kernelization is None:
        return {}
    kz = c.kernelization
    forms = dict(kz.defaults)
    for cand_id in planned_kernels(c):
        forms.update(region(kz, kz.candidates[cand_id]).forms)
    return forms


@dataclass
class StageForms:
    """The chosen form of each class of one stage's e-graph, and which classes the chosen plan uses."""

    forms: dict[ClassId, NodeId] = field(default_factory=dict)
    in_plan: set[ClassId] = field(default_factory=set)


def stage_forms(c: Compilation, eg: EGraph) -> StageForms:
    """``chosen_forms`` mapped onto ``eg`` (a prefix of the final e-graph): where the chosen node
    does not exist yet, the cheapest form ``eg`` has."""
    final = c.egraph
    chosen = chosen_forms(c)
    planned = plan_classes(c)
    fallback = default_forms(eg)
    out = StageForms()
    for cls in eg.classes():
        node = chosen.get(final.find(cls.id)) if final is not None else None
        form = _same_node(eg, node, cls.id) if node is not None else None
        out.forms[cls.id] = form if form is not None else fallback.get(cls.id, cls.nodes[0])
        if final is not None and final.find(cls.id) in planned:
            out.in_plan.add(cls.id)
    return out


def plan_classes(c: Compilation) -> set[ClassId]:
    """Classes of the final e-graph that the chosen plan computes or fuses."""
    if c.kernelization is None:
        return set()
    out: set[ClassId] = set()
    for cand_id in planned_kernels(c):
        r = region(c.kernelization, c.kernelization.candidates[cand_id])
        out.update(r.forms)
        out.update(child for _, child in r.loads)
    return out


def _same_node(eg: EGraph, node: NodeId, cls: ClassId) -> NodeId | None:
    """Node ``node`` of a later e-graph as a node of ``eg``'s class ``cls`` (its hashcons representative)."""
    if node >= eg.num_added or eg.find(node) != cls:
        return None
    op, param, children = eg.node(node)
    return eg.lookup(op, children, param)


def structural_children(eg: EGraph, cls: ClassId) -> list[ClassId]:
    """Child classes of a class's structural (not kernel or transfer) forms."""
    out: dict[ClassId, None] = {}
    for n in eg.eclass(cls).nodes:
        node = eg.node(n)
        if node.op not in ATTACHED_OPS:
            out.update(dict.fromkeys(ch for ch in node.children if ch != cls))
    return list(out)


def neighbourhood(eg: EGraph, centre: ClassId, depth: int) -> set[ClassId]:
    """Classes within ``depth`` edges (to children or parents) of ``centre``."""
    parents: dict[ClassId, set[ClassId]] = {}
    children = {cls.id: structural_children(eg, cls.id) for cls in eg.classes()}
    for cls, kids in children.items():
        for k in kids:
            parents.setdefault(k, set()).add(cls)
    seen = {centre: 0}
    queue = deque([centre])
    while queue:
        x = queue.popleft()
        if seen[x] == depth:
            continue
        for y in (*children[x], *parents.get(x, ())):
            if y not in seen:
                seen[y] = seen[x] + 1
                queue.append(y)
    return set(seen)


def reachable(roots: Iterable[ClassId], children: Mapping[ClassId, Iterable[ClassId]]) -> set[ClassId]:
    """Classes reachable from ``roots`` through ``children``."""
    seen: set[ClassId] = set()
    stack = list(roots)
    while stack:
        x = stack.pop()
        if x not in seen:
            seen.add(x)
            stack.extend(children.get(x, ()))
    return seen


def class_of(eg: EGraph, class_id: int) -> ClassId | None:
    """The class of id ``class_id`` in ``eg`` (None when the id is not one of its nodes or classes)."""
    return eg.find(class_id) if 0 <= class_id < eg.num_added else None

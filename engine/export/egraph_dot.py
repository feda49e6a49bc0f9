"""An e-graph in egg's style: one cluster per e-class, its e-nodes inside, edges from an e-node to
the clusters of its child classes, the chosen form of each class highlighted."""

from __future__ import annotations

from dataclasses import dataclass

import graphviz

from engine import units
from engine.egraph.egraph import ATTACHED_OPS, ClassId, EGraph, NodeId
from engine.export import view
from engine.export.chosen import StageForms, class_of, neighbourhood, reachable


@dataclass(frozen=True)
class Selection:
    """The classes and forms to draw, how, and the notes saying what was cut and why."""

    forms: dict[ClassId, list[NodeId]]
    collapse: bool
    notes: list[str]
    hidden: dict[ClassId, int]
    """Forms not drawn, per class drawn (plan-only): its label says how many, so that no cut is silent."""


def select(eg: EGraph, chosen: StageForms, options: view.ExportOptions) -> Selection:
    """Apply the neighbourhood, plan-only and collapse options, and the default size limit."""
    all_forms = {cls.id: list(cls.nodes) for cls in eg.classes()}
    forms = dict(all_forms)
    notes: list[str] = []
    if options.neighbourhood is not None:
        centre = class_of(eg, options.neighbourhood)
        if centre is None:
            notes.append(f"c{options.neighbourhood} is not in this stage's e-graph: the whole e-graph is shown")
        else:
            keep = neighbourhood(eg, centre, options.depth)
            forms = {c: f for c, f in forms.items() if c in keep}
            notes.append(f"cut: only the neighbourhood of c{centre} (depth {options.depth}): "
                         f"{len(forms)} of {len(all_forms)} classes")
    plan_only, collapse = options.plan_only, options.collapse
    drawn = sum(map(len, forms.values()))
    if drawn > options.max_nodes and not (plan_only and collapse):
        plan_only = collapse = True
        notes.append(f"cut: {drawn} e-nodes is over the limit of {options.max_nodes} (--max-nodes): "
                     "chosen forms only, one-form classes collapsed; --neighbourhood cN shows every form near cN")
    hidden: dict[ClassId, int] = {}
    if plan_only:
        roots = [c for c in eg.output_classes().values() if c in forms]
        children = {c: [ch for ch in eg.node(chosen.forms[c]).children if ch in forms] for c in forms}
        keep = reachable(roots, children)
        hidden = {c: len(f) - 1 for c, f in forms.items() if c in keep and len(f) > 1}
        forms = {c: [chosen.forms[c]] for c in forms if c in keep}
        notes.append(f"cut: chosen forms only (plan-only): {len(forms)} classes, {sum(hidden.values())} other forms "
                     "hidden (a class's label says how many: +N forms)")
    if collapse:
        notes.append("classes with one form are drawn as one node (collapsed)")
    return Selection(forms, collapse, notes, hidden)


def node_label(eg: EGraph, n: NodeId) -> str:
    """An e-node as ``op[param]`` (its children are the edges)."""
    node = eg.node(n)
    text = eg.describe(n)
    if node.children:
        text = text[: len(text) - len(", ".join(f"c{c}" for c in node.children)) - 2]
    if node.op in ATTACHED_OPS:
        text = f"{node.op}[{node.param}]"
    return text.replace("\\", "\\\\")


def draw(eg: EGraph, chosen: StageForms, options: view.ExportOptions, name: str, title: str) -> graphviz.Digraph:
    """The e-graph ``eg`` as DOT."""
    sel = select(eg, chosen, options)
    outputs: dict[ClassId, list[str]] = {}
    for out, cls in eg.output_classes().items():
        outputs.setdefault(cls, []).append(out)
    drawn = sum(map(len, sel.forms.values()))
    counts = f"{len(sel.forms)} of {eg.num_classes} e-classes, {drawn} of {eg.num_nodes} e-nodes shown"
    g = view.graph(name, f"{title}: {counts}", sel.notes, compound="true", newrank="true")
    view.limit_layout(g, drawn)
    clusters = {c for c, f in sel.forms.items() if not (sel.collapse and len(f) == 1)}
    for cls_id in sorted(sel.forms):
        _draw_class(g, eg, cls_id, sel.forms[cls_id], chosen, cls_id in clusters, outputs.get(cls_id, []),
                    sel.hidden.get(cls_id, 0))
    stubs: set[ClassId] = set()
    for cls_id in sorted(sel.forms):
        for n in sel.forms[cls_id]:
            _draw_edges(g, eg, n, cls_id, sel, chosen, clusters, stubs)
    for ch in sorted(stubs):
        g.node(f"cut_c{ch}", f"c{ch} (not shown)", shape="plaintext", fontcolor="#999999")
    return g


def _draw_class(g: graphviz.Digraph, eg: EGraph, cls_id: ClassId, forms: list[NodeId], chosen: StageForms,
                cluster: bool, outputs: list[str], hidden: int) -> None:
    cls = eg.eclass(cls_id)
    head = (f"c{cls_id} {units.shape(cls.shape)} {cls.dtype}" + (f"  ⇐ {', '.join(outputs)}" if outputs else "")
            + (f"  +{units.plural(hidden, 'form')}" if hidden else ""))
    in_plan = cls_id in chosen.in_plan
    line = view.CHOSEN_LINE if in_plan else "#999999"
    target = g.subgraph(name=f"cluster_c{cls_id}") if cluster else None
    if target is None:
        for n in forms:
            _draw_node(g, eg, n, chosen.forms.get(cls_id) == n, f"{head}\\n{node_label(eg, n)}", line)
        return
    with target as sub:
        sub.attr(label=head, style="rounded", color=line, penwidth="2" if in_plan else "1", fontsize="10")
        for n in forms:
            _draw_node(sub, eg, n, chosen.forms.get(cls_id) == n, node_label(eg, n), line)


def _draw_node(g: graphviz.Digraph, eg: EGraph, n: NodeId, is_chosen: bool, label: str, line: str) -> None:
    op = eg.node(n).op
    attrs = {"shape": "ellipse" if op in ("leaf", "const") else "box", "style": "rounded"}
    if op in ATTACHED_OPS:
        attrs = {"shape": "box3d" if op == "kernel" else "cds", "style": ""}
    if is_chosen:
        attrs.update(style=",".join(s for s in (attrs["style"], "filled", "bold") if s), fillcolor=view.CHOSEN_FILL,
                     color=view.CHOSEN_LINE, chosen="true")
    g.node(f"n{n}", label, **attrs)


def _draw_edges(g: graphviz.Digraph, eg: EGraph, n: NodeId, cls_id: ClassId, sel: Selection, chosen: StageForms,
                clusters: set[ClassId], stubs: set[ClassId]) -> None:
    node = eg.node(n)
    is_chosen = chosen.forms.get(cls_id) == n
    style = {"color": view.CHOSEN_LINE, "penwidth": "2"} if is_chosen else {"color": "#777777"}
    for i, ch in enumerate(node.children):
        attrs = dict(style)
        if len(node.children) > 1:
            attrs["taillabel"] = str(i)
        if ch not in sel.forms:
            stubs.add(ch)
            g.edge(f"n{n}", f"cut_c{ch}", style="dashed", color="#bbbbbb")
            continue
        forms = sel.forms[ch]
        head = chosen.forms[ch] if chosen.forms.get(ch) in forms else forms[0]
        if ch == cls_id:
            g.edge(f"n{n}", f"n{n}", style="dashed", **{k: v for k, v in attrs.items() if k != "style"})
            continue
        if ch in clusters:
            attrs["lhead"] = f"cluster_c{ch}"
        g.edge(f"n{n}", f"n{head}", **attrs)

"""The kernelized graph: each kernel candidate a group of the classes it fuses, with its cost per device;
stored classes (kernel inputs and outputs) between them; library kernels and the plan's kernels stand out."""

from __future__ import annotations

import graphviz

from engine import units
from engine.egraph.egraph import ClassId
from engine.export import view
from engine.export.chosen import Region, class_of, neighbourhood, planned_kernels, region
from engine.export.egraph_dot import node_label
from engine.kernel.kernelize import Candidate
from engine.kernel.schedule import DEFAULT_VARIANT
from engine.pipeline import Compilation, StageView


def device_times(shown: StageView) -> dict[str, dict[str, str]]:
    """Candidate id -> device name -> its time as text, as the stage ``shown`` counts it: the nominal estimates
    (``kernelized``), or from ``tuned`` on the times the extraction used, measured ones with their variant."""
    out: dict[str, dict[str, str]] = {}
    for param, t in shown.kernel_times.items():
        result = shown.tuning.get(param)
        text = units.seconds(t)
        if result is not None:
            text += " (no variant ran)" if not result.ok else " measured" + (
                f", {result.best}" if result.best != DEFAULT_VARIANT else "")
        elif not shown.estimated:
            text += " predicted"
        out.setdefault(param.candidate, {})[param.device] = text
    return out


def draw(shown: StageView, options: view.ExportOptions, title: str) -> graphviz.Digraph:
    """The kernel candidates of a kernelized stage as DOT."""
    c, name = shown.compilation, shown.stage
    kz, eg = c.kernelization, c.egraph
    assert kz is not None and eg is not None
    planned = planned_kernels(c)
    regions = {k: region(kz, cand) for k, cand in kz.candidates.items()}
    keep = list(kz.candidates)
    notes: list[str] = []
    if options.neighbourhood is not None:
        centre = class_of(eg, options.neighbourhood)
        if centre is None:
            notes.append(f"c{options.neighbourhood} is not a class: every kernel is shown")
        else:
            near = neighbourhood(eg, centre, options.depth)
            keep = [k for k in keep if near & _classes(regions[k])]
            notes.append(f"cut: only kernels touching the neighbourhood of c{centre} (depth {options.depth}): "
                         f"{len(keep)} of {len(kz.candidates)} kernels")
    plan_only, collapse = options.plan_only, options.collapse
    if _count(keep, regions, collapse) > options.max_nodes and not plan_only:
        plan_only = True
        notes.append(f"cut: over {options.max_nodes} nodes: only the plan's kernels")
    if plan_only:
        notes.append(f"cut: only the chosen plan's kernels (plan-only): {sum(k in planned for k in keep)} "
                     f"of {len(keep)}")
        keep = [k for k in keep if k in planned]
    if _count(keep, regions, collapse) > options.max_nodes and not collapse:
        collapse = True
        notes.append(f"cut: over {options.max_nodes} nodes: each kernel drawn as one node")
    elif collapse:
        notes.append("each kernel drawn as one node (collapsed)")
    nominal = shown.estimated
    marked, mark = (_cheapest(c), "<") if nominal else (planned, "✓")
    notes.append("< the cheapest device by nominal estimate, this stage's numbers (filled: the kernels the plan "
                 "launches, chosen later on tuned times)" if nominal else "✓ the device the plan runs the kernel on")
    drawn = _count(keep, regions, collapse)
    head = f"{title}: {len(keep)} of {len(kz.candidates)} kernel candidates, {len(planned)} in the plan"
    g = view.graph(name, head, notes, compound="true", newrank="true")
    view.limit_layout(g, drawn)
    times = device_times(shown)
    _draw_stored(g, c, keep)
    for i, k in enumerate(keep):
        cand = kz.candidates[k]
        _draw_kernel(g, c, i, cand, regions[k], times.get(k, {}), k in planned, f"{mark} ", marked.get(k), collapse)
        edge = {"color": view.CHOSEN_LINE, "penwidth": "2"} if k in planned else {"color": "#777777"}
        if not collapse:
            edge["lhead"] = f"cluster_k{i}"
        g.edge(f"v{cand.output}", f"k{i}", **edge)
    return g


def _cheapest(c: Compilation) -> dict[str, str]:
    """Candidate id -> the device of its lowest nominal estimate."""
    best: dict[str, tuple[float, str]] = {}
    for kn, t in c.estimates.items():
        if kn.candidate not in best or t < best[kn.candidate][0]:
            best[kn.candidate] = (t, kn.device)
    return {k: d for k, (_, d) in best.items()}


def _classes(r: Region) -> set[ClassId]:
    return set(r.forms) | {ch for _, ch in r.loads}


def _count(keep: list[str], regions: dict[str, Region], collapse: bool) -> int:
    stored = {ch for k in keep for _, ch in regions[k].loads} | {next(iter(regions[k].forms)) for k in keep}
    fused = 0 if collapse else sum(len(regions[k].forms) for k in keep)
    return len(stored) + len(keep) + fused


def _draw_stored(g: graphviz.Digraph, c: Compilation, keep: list[str]) -> None:
    """One ellipse per class kept in memory (a kernel's output or input)."""
    kz, eg = c.kernelization, c.egraph
    assert kz is not None and eg is not None
    outputs: dict[ClassId, list[str]] = {}
    for out, cls in eg.output_classes().items():
        outputs.setdefault(cls, []).append(out)
    leaves = {eg.find(n): eg.node(n).param for cls in eg.classes() for n in cls.nodes if eg.node(n).op == "leaf"}
    stored: set[ClassId] = set()
    for k in keep:
        cand = kz.candidates[k]
        stored.update((cand.output, *cand.inputs))
    for cls_id in sorted(stored):
        cls = eg.eclass(cls_id)
        label = f"c{cls_id} {units.shape(cls.shape)} {cls.dtype}"
        if cls_id in leaves:
            label += f"\\ninput {leaves[cls_id]}"
        if cls_id in outputs:
            label += f"\\noutput {', '.join(outputs[cls_id])}"
        g.node(f"v{cls_id}", label, shape="ellipse", style="filled", fillcolor="#f3f3f3",
               peripheries="2" if cls_id in outputs else "1")


def _draw_kernel(g: graphviz.Digraph, c: Compilation, i: int, cand: Candidate, r: Region,
                 times: dict[str, str], in_plan: bool, mark: str, marked: str | None, collapse: bool) -> None:
    """Kernel ``cand`` with a row per device, ``mark`` before ``marked``'s; ``in_plan``: the plan launches it."""
    eg = c.egraph
    assert eg is not None
    library = [d for d in times if d in view.LIBRARY_DEVICES]
    short = units.short_devices(d.name for d in c.devices)
    rows = [f"{mark if d == marked else ''}{short.get(d, d)}: {t}" for d, t in sorted(times.items())]
    assert c.kernelization is not None
    fused = [f"{units.plural(len(r.forms), 'op')} fused"] if collapse else []
    label = "\\n".join([f"{c.kernelization.name(cand.id)} → c{cand.output}", *rows, *fused])
    fill = view.CHOSEN_FILL if in_plan else (view.LIBRARY_FILL if library else "#ffffff")
    head = {"shape": "box3d", "style": "filled", "fillcolor": fill, "color": view.LIBRARY_LINE if library else "black",
            "kernel": cand.id}
    if in_plan:
        head["chosen"] = "true"
    if library:
        head["library"] = ",".join(library)
    root = next(iter(r.forms))
    if collapse:
        g.node(f"k{i}", label, **head)
        for _, ch in r.loads:
            g.edge(f"k{i}", f"v{ch}", color="#777777")
        return
    with g.subgraph(name=f"cluster_k{i}") as sub:
        lib = f"  library: {', '.join(library)}" if library else ""
        sub.attr(label=f"kernel {cand.kernel.name}{lib}", style="filled,rounded" if library else "rounded",
                 fillcolor=view.LIBRARY_FILL if library else "white",
                 color=view.CHOSEN_LINE if in_plan else (view.LIBRARY_LINE if library else "#999999"),
                 penwidth="2" if in_plan else "1", fontsize="10")
        sub.node(f"k{i}", label, **head)
        for cls_id, n in r.forms.items():
            sub.node(f"k{i}_c{cls_id}", f"c{cls_id} {node_label(eg, n)}", shape="box", style="rounded,filled",
                     fillcolor="white")
        sub.edge(f"k{i}", f"k{i}_c{root}", color="#777777")
        for a, b in r.edges:
            sub.edge(f"k{i}_c{a}", f"k{i}_c{b}", color="#777777")
    for a, b in r.loads:
        g.edge(f"k{i}_c{a}", f"v{b}", color="#777777", style="dashed")

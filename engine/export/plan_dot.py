"""The plan: its steps in order, launches coloured by device, values (a class in a memory pool) between them,
copies as distinct edges, the total predicted (and, once run, measured) cost in the label."""

from __future__ import annotations

import graphviz

from engine import units
from engine.export import view
from engine.export.chosen import class_of, neighbourhood
from engine.extract import Value
from engine.pipeline import RESIDENT_NOTE, Compilation
from engine.plan import Allocate, Copy, Free, Launch


def plan_title(c: Compilation, executed: bool) -> str:
    """The plan's totals in one line (and the measured time and verification once it ran)."""
    plan = c.plan
    assert plan is not None
    kinds = [type(s).__name__ for s in plan.steps]
    text = (f"{units.plural(len(plan.steps), 'step')} ({units.plural(kinds.count('Launch'), 'launch', 'launches')}, "
            f"{units.plural(kinds.count('Copy'), 'copy', 'copies')}), "
            f"predicted {units.seconds(plan.predicted)}, peak {units.nbytes(plan.peak_bytes)}")
    if c.resident:
        text += f", {RESIDENT_NOTE}"
    if executed and c.execution is not None:
        text += f", measured {c.execution.describe()}"
    if executed and c.verification is not None:
        v = c.verification
        text += f", verification {'ok' if v.ok else 'FAILED'} ({units.plural(len(v.outputs), 'output')})"
    return text


def draw(c: Compilation, options: view.ExportOptions, name: str, title: str, executed: bool) -> graphviz.Digraph:
    """The plan of ``c`` as DOT; with ``executed``, with the measured time of each step."""
    plan, eg = c.plan, c.egraph
    assert plan is not None and eg is not None
    steps = list(enumerate(plan.steps, 1))
    notes: list[str] = []
    if options.neighbourhood is not None:
        centre = class_of(eg, options.neighbourhood)
        if centre is not None:
            near = neighbourhood(eg, centre, options.depth)
            steps = [(i, s) for i, s in steps if any(eg.find(v[0]) in near for v in _values(s))]
            notes.append(f"cut: only steps on classes near c{centre} (depth {options.depth}): "
                         f"{len(steps)} of {len(plan.steps)} steps")
    if len(steps) > options.max_nodes:
        notes.append(f"cut: the first {options.max_nodes} of {len(steps)} steps (over the limit)")
        steps = steps[: options.max_nodes]
    devices, pools = view.palette([(d.name, d.pool) for d in c.devices])
    g = view.graph(name, f"{title}: {plan_title(c, executed)}", notes)
    view.limit_layout(g, len(steps))
    times = c.execution.step_times if executed and c.execution is not None else None
    life: dict[Value, list[str]] = {}
    for i, s in steps:
        if isinstance(s, Allocate):
            life.setdefault(s.value, []).append(f"input {s.input}, #{i}" if s.input else f"alloc #{i}")
        elif isinstance(s, Free):
            life.setdefault(s.value, []).append(f"free #{i}")
    pool_ids = {p: k for k, p in enumerate(pools)}
    drawn: set[Value] = set()

    short = units.short_devices(d.name for d in c.devices)

    def value(v: Value) -> str:
        node = f"v{v[0]}_{pool_ids[v[1]]}"
        if v not in drawn:
            drawn.add(v)
            cls = eg.eclass(v[0])
            text = f"c{v[0]} {units.shape(cls.shape)} {cls.dtype}\\nin {short.get(v[1], v[1])}"
            outs = [o for o, ov in plan.outputs.items() if ov == v]
            text += "".join(f"\\noutput {o}" for o in outs) + ("\\n" + " · ".join(life[v]) if v in life else "")
            fill, line = pools.get(v[1], (view.HOST_FILL, view.HOST_LINE))
            g.node(node, text, shape="ellipse", style="filled", fillcolor=fill, color=line,
                   peripheries="2" if outs else "1")
        return node

    for i, s in steps:
        cost = f"{units.seconds(s.predicted)}" if isinstance(s, Copy | Launch) else ""
        if times is not None and cost:
            cost += f" (ran {units.seconds(times[i - 1])})"
        if isinstance(s, Launch):
            fill, line = devices.get(s.device, (view.HOST_FILL, view.HOST_LINE))
            library = s.device in view.LIBRARY_DEVICES
            g.node(f"s{i}", f"#{i} launch {s.name}\\non {short.get(s.device, s.device)}\\n{cost}",
                   shape="box3d", style="filled,bold" if library else "filled", fillcolor=fill, color=line,
                   id=f"step{i}", step="launch")
            for v in s.inputs:
                g.edge(value(v), f"s{i}", color=line)
            for v in s.outputs:
                g.edge(f"s{i}", value(v), color=line)
        elif isinstance(s, Copy):
            _, line = pools.get(s.target[1], (view.HOST_FILL, view.HOST_LINE))
            g.edge(value(s.source), value(s.target), f"#{i} copy {units.nbytes(s.buffer.nbytes)}\\n{cost}",
                   style="dashed,bold", color=line, fontcolor=line, arrowhead="empty", id=f"step{i}", step="copy")
        elif isinstance(s, Allocate):
            value(s.value)
    _legend(g, c, devices)
    return g


def _values(step: Allocate | Copy | Launch | Free) -> list[Value]:
    if isinstance(step, Launch):
        return [*step.inputs, *step.outputs]
    if isinstance(step, Copy):
        return [step.source, step.target]
    return [step.value]


def _legend(g: graphviz.Digraph, c: Compilation, devices: dict[str, tuple[str, str]]) -> None:
    """Each device's colour, short name (``cl0``) and full name: the labels above use the short ones."""
    short = units.short_devices(d.name for d in c.devices)
    with g.subgraph(name="cluster_legend") as sub:
        sub.attr(label="devices", style="dashed", color="#999999", fontsize="10")
        for k, d in enumerate(c.devices):
            fill, line = devices[d.name]
            name = d.name if short[d.name] == d.name else f"{short[d.name]} = {d.name}"  # the one full name
            sub.node(f"legend{k}", f"{name}\\npool {short.get(d.pool, d.pool)}", shape="box",
                     style="filled", fillcolor=fill, color=line, fontsize="9")

"""One DOT graph per stage of a Compilation (built with the ``graphviz`` package).

``stage_graph(compilation, stage, options)`` gives the graph of one stage, or the reason it
has none: a stage the compilation did not reach is skipped with a note, never an error.
"""

from __future__ import annotations

from dataclasses import dataclass

import graphviz

from engine import units
from engine.export import egraph_dot, kernel_dot, plan_dot, view
from engine.export.chosen import stage_forms
from engine.pipeline import Compilation
from engine.stages import STAGES, Stage


@dataclass(frozen=True)
class StageGraph:
    stage: str
    graph: graphviz.Digraph | None
    note: str = ""
    """Why there is no graph (when ``graph`` is None)."""


def stage_names() -> list[str]:
    """The stages ``--stage all`` exports, in pipeline order."""
    return list(STAGES)


def missing(c: Compilation, stage: str) -> str:
    """Why ``stage`` cannot be drawn for ``c`` ("" when it can)."""
    if not c.done(stage):
        return f"stage {stage!r} not reached (the compilation stopped after {c.stage.value!r}): skipped"
    shown = c.view(stage)
    needs = {Stage.EGRAPH: shown.egraph, Stage.SATURATED: shown.egraph, Stage.KERNELIZED: shown.kernelization,
             Stage.TUNED: shown.kernelization, Stage.PLAN: shown.plan, Stage.EXECUTED: shown.execution}
    if stage in needs and needs[Stage(stage)] is None:
        return f"stage {stage!r} has no data in this compilation: skipped"
    return ""


def stage_graph(c: Compilation, stage: str, options: view.ExportOptions = view.DEFAULT_OPTIONS) -> StageGraph:
    """The DOT graph of ``stage`` (one of ``stage_names()``), or a note why there is none."""
    why = missing(c, stage)
    if why:
        return StageGraph(stage, None, why)
    shown = c.view(stage)
    name = c.program.name or "program"
    if shown.stage == Stage.PROGRAM:
        return StageGraph(stage, program_graph(c))
    if shown.stage in (Stage.EGRAPH, Stage.SATURATED):
        eg = shown.egraph
        assert eg is not None
        if shown.stage == Stage.EGRAPH:
            title = "e-graph after lowering"
        else:
            sat = c.saturation
            assert sat is not None
            title = f"saturated e-graph ({units.plural(len(sat.iterations), 'iteration')}, {sat.stop.value})"
        return StageGraph(stage, egraph_dot.draw(eg, stage_forms(c, eg), options, stage, f"{name}: {title}"))
    if shown.stage in (Stage.KERNELIZED, Stage.TUNED):
        title = "kernels (estimated cost per device)" if shown.estimated else "tuned kernels (cost per device)"
        return StageGraph(stage, kernel_dot.draw(shown, options, f"{name}: {title}"))
    executed = shown.stage == Stage.EXECUTED
    title = "executed plan" if executed else "plan"
    return StageGraph(stage, plan_dot.draw(c, options, stage, f"{name}: {title}", executed))


def program_graph(c: Compilation) -> graphviz.Digraph:
    """The program: inputs, ops with their shapes and dtypes, outputs; edges follow the data."""
    p = c.program
    live = {n.id for n in p.live_nodes()}
    title = (f"{p.name or 'program'}: {units.plural(len(p.inputs), 'input')}, {units.plural(len(p.nodes), 'op')}, "
             f"{units.plural(len(p.outputs), 'output')}")
    notes = [f"{len(p.nodes) - len(live)} ops no output uses (grey)"] if len(live) < len(p.nodes) else []
    g = view.graph("program", title, notes)
    view.limit_layout(g, len(p.inputs) + len(p.nodes))
    for i in p.inputs:
        g.node(f"t_{i.name}", f"{i.name}\\n{units.shape(i.shape)} {i.dtype}\\n{i.init.kind}", shape="ellipse",
               style="filled", fillcolor="#f3f3f3", kind="input")
    for n in p.nodes:
        attrs = ", ".join(f"{k}={v}" for k, v in n.attrs.items() if v is not None)[:60]
        label = f"{n.id}: {n.op}" + (f"\\n{attrs}" if attrs else "") + f"\\n{units.shape(n.shape)} {n.dtype}"
        style = {"style": "filled,rounded", "fillcolor": "#dbe7f3"} if n.id in live else {"style": "rounded",
                                                                                            "fontcolor": "#999999"}
        g.node(f"t_{n.id}", label.replace("\\n", "\\n") , shape="box", kind="op",
               peripheries="2" if n.id in p.outputs else "1", **style)
        for a in n.args:
            g.edge(f"t_{a}", f"t_{n.id}")
    for out in p.outputs:
        g.node(f"out_{out}", f"output {out}", shape="plaintext")
        g.edge(f"t_{out}", f"out_{out}", style="dotted")
    return g

"""The rich renderables the CLI prints (tables and lines of markup): what ``check`` and ``extract`` show."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from engine import CONGRUENCE, EGraph, ForeignEGraph, ForeignResult, Program, Saturation, SemanticReport, explain, units

SHOWN_DISAGREEMENTS = 10


def summary(program: Program, source: Path) -> list[Table | str]:
    """The renderables ``check`` prints: inputs, outputs, op counts and totals."""
    title = program.name or source.name
    head = f"[bold]{escape(title)}[/bold]" + (f": {escape(program.description)}" if program.description else "")
    inputs = Table("input", "shape", "dtype", "init", title="Inputs", title_justify="left")
    for i in program.inputs:
        params = ", ".join(f"{k}={v}" for k, v in i.init.params.items() if k != "values")
        inputs.add_row(escape(i.name), units.shape(i.shape), str(i.dtype), escape(f"{i.init.kind}({params})"))
    types = program.types()
    outputs = Table("output", "shape", "dtype", title="Outputs", title_justify="left")
    for name in program.outputs:
        shape, dtype = types[name]
        outputs.add_row(escape(name), units.shape(shape), str(dtype))
    ops = Table("op", "count", title="Ops", title_justify="left")
    for op, count in sorted(Counter(n.op for n in program.nodes).items(), key=lambda kv: (-kv[1], kv[0])):
        ops.add_row(op, str(count))
    prims = program.lower()
    live = len(program.live_nodes())
    dead = len(program.nodes) - live
    totals = (
        f"{units.plural(len(program.inputs), 'input')} ({units.nbytes(program.parameter_bytes())}), "
        f"{units.plural(len(program.nodes), 'node')}"
        + (f" ({dead} not used by any output)" if dead else "")
        + f", {units.plural(len(prims.nodes), 'primitive op')} after lowering"
    )
    return [head, inputs, outputs, ops, totals]


def foreign_summary(fg: ForeignEGraph) -> list[Table | str]:
    """The renderables ``check`` prints for an egraph-serialize file: sizes, roots, ops, costs."""
    title = f"[bold]{fg.source}[/bold]: an egraph-serialize e-graph"
    roots = ", ".join(fg.root_name(r) for r in fg.roots)
    ops = Table("op", "nodes", title="Ops", title_justify="left")
    for op, count in Counter(n.op for n in fg.nodes.values()).most_common(12):
        ops.add_row(op, str(count))
    costs = [n.cost for n in fg.nodes.values()]
    subsumed = sum(n.subsumed for n in fg.nodes.values())
    totals = (f"{units.plural(len(fg.nodes), 'node')} in {units.plural(len(fg.classes), 'class', 'classes')}, "
              f"roots ({fg.roots_from}): {roots or 'none'}; node costs {min(costs, default=0):g} to "
              f"{max(costs, default=0):g}" + (f"; {subsumed} subsumed" if subsumed else ""))
    return [title, ops, totals]


def saturation_summary(result: Saturation, rules: int, fast_math: bool) -> list[Table | str]:
    """The renderables ``check --semantic`` prints about saturation: stop reason, sizes, time, merges per rule."""
    limits = result.limits
    (nodes0, classes0), eg = result.start_counts, result.egraph
    stop = result.stop.value
    stats = Table.grid(padding=(0, 2))
    stats.add_column(style="bold")
    stats.add_column()
    stats.add_row("stop reason", f"[green]{stop}[/green]" if stop == "saturated" else f"[yellow]{stop}[/yellow]")
    stats.add_row("iterations", f"{len(result.iterations)} (limit {limits.iterations})")
    stats.add_row("e-nodes", f"{nodes0} -> {eg.num_nodes} (limit {limits.nodes})")
    stats.add_row("e-classes", f"{classes0} -> {eg.num_classes}")
    stats.add_row("time", f"{units.seconds(result.seconds)} (limit {units.seconds(limits.seconds)})")
    stats.add_row("rules", f"{rules} ({'exact + fast-math' if fast_math else 'exact only'})")
    merges = result.merges_by_rule()
    congruences = sum(it.congruences for it in result.iterations)
    stats.add_row("merges", f"{merges.total()} by rules, {congruences} by {CONGRUENCE}")
    matches: Counter[str] = Counter()
    applied: Counter[str] = Counter()
    for it in result.iterations:
        matches.update(it.matches)
        applied.update(a.rule for a in it.applications)
    fired = [rule for rule in result.rules if matches[rule]]
    if not fired:
        return ["", "[bold]Saturation[/bold]", stats, "no rule matched"]
    table = Table("rule", "merges", "applied", "matches", title="Merges per rule", title_justify="left")
    for rule in sorted(fired, key=lambda r: (-merges[r], -applied[r], r)):
        table.add_row(rule, str(merges[rule]), str(applied[rule]), str(matches[rule]))
    return ["", "[bold]Saturation[/bold]", stats, table]


def reasons(egraph: EGraph, a: int, b: int, depth: int = 4) -> list[str]:
    """The rules on the proof that nodes ``a`` and ``b`` are equal, looking ``depth`` congruences deep."""
    found: dict[str, None] = {}
    for step in explain(egraph, a, b):
        if not step.is_congruence:
            found[step.reason] = None
        elif depth > 0:
            left, right = egraph.raw_node(step.left), egraph.raw_node(step.right)
            for x, y in zip(left.children, right.children):
                if x != y:
                    found.update(dict.fromkeys(reasons(egraph, x, y, depth - 1)))
    return list(found)


def semantic_summary(egraph: EGraph, report: SemanticReport, seed: int, fast_math: bool,
                     seconds: float) -> list[Table | str]:
    """The renderables ``check --semantic`` prints about the semantic check, ending with its verdict."""
    how = f"random and special-value inputs, seed {seed}" + (", finite values only" if fast_math else "")
    items: list[Table | str] = [
        "",
        f"[bold]Semantic check[/bold] ({how}): {report.forms} forms of {report.classes} classes compared, "
        f"{len(report.skipped)} skipped"
        + (" (too large to materialise, or children without a value)" if report.skipped else "")
        + f", {units.seconds(seconds)}",
    ]
    if report.ok:
        items.append(f"[green]ok[/green]: every form agrees with its class ({report.forms} forms)")
        return items
    bad = report.disagreements
    table = Table("class", "form", "reference form", "max error", "proved by",
                  title=f"Disagreements (first {min(len(bad), SHOWN_DISAGREEMENTS)} of {len(bad)})",
                  title_justify="left")
    for d in bad[:SHOWN_DISAGREEMENTS]:
        cls = egraph.eclass(d.class_id)
        table.add_row(f"c{d.class_id} {units.shape(cls.shape)} {cls.dtype}", escape(f"n{d.node} {egraph.describe(d.node)}"),
                      escape(f"n{d.reference} {egraph.describe(d.reference)}"), f"{d.max_error:.3g}",
                      ", ".join(reasons(egraph, d.reference, d.node)))
    items += [table, f"[bold red]disagreement[/bold red]: {len(bad)} of {report.forms} forms disagree with their "
                     f"class: a rule is unsound"]
    return items


def extract_table(results: list[ForeignResult]) -> Table:
    """``extract``'s table: each extractor's DAG and tree cost, time, status and note."""
    table = Table("extractor", "DAG cost", "tree cost", "seconds", "status", "note", title_justify="left",
                  caption="DAG cost counts each chosen class once; tree cost once per use (a root listed twice: once)",
                  caption_justify="left")
    for r in results:
        table.add_row(r.method, f"{r.dag_cost:.6g}", f"{r.tree_cost:.6g}", f"{r.seconds:.4f}", r.status,
                      escape(r.error or r.note))
    return table

"""The headless report of a compilation: ``report.md`` and a self-contained ``report.html``.

Both hold the same tables: stages exported, rewrite statistics, kernel cost per device,
the plan step by step, and the verification result; the HTML embeds the rendered SVGs.
"""

from __future__ import annotations

import html
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from engine import units
from engine.export.chosen import planned_kernels
from engine.export.kernel_dot import device_times
from engine.export.plan_dot import plan_title
from engine.fileio import write_atomic
from engine.pipeline import Compilation
from engine.plan import Allocate, Copy, Free, Launch


@dataclass(frozen=True)
class Table:
    title: str
    headers: tuple[str, ...]
    rows: list[tuple[str, ...]]
    intro: str = ""


def tables(c: Compilation, files: Mapping[str, Sequence[str]], notes: Sequence[str]) -> list[Table]:
    """Every table of the report (a table with no rows says why in its intro)."""
    stages = Table("Stages", ("stage", "files"), [(s, ", ".join(f)) for s, f in files.items()],
                   "\n".join(notes))
    return [stages, rewrites(c), kernel_costs(c), plan_table(c), verification(c)]


def rewrites(c: Compilation) -> Table:
    sat = c.saturation
    if sat is None:
        return Table("Rewrites", (), [], "not saturated")
    (n0, k0), eg = sat.start_counts, sat.egraph
    intro = (f"stop: {sat.stop.value} after {units.plural(len(sat.iterations), 'iteration')} in {units.seconds(sat.seconds)}; "
             f"e-nodes {n0} → {eg.num_nodes}, e-classes {k0} → {eg.num_classes} (final e-graph, kernel nodes "
             f"included)")
    merges = sat.merges_by_rule()
    matches: Counter[str] = Counter()
    applied: Counter[str] = Counter()
    for it in sat.iterations:
        matches.update(it.matches)
        applied.update(a.rule for a in it.applications)
    rows = [(r, str(merges[r]), str(applied[r]), str(matches[r]))
            for r in sorted((r for r in sat.rules if matches[r]), key=lambda r: (-merges[r], -applied[r], r))]
    return Table("Rewrites", ("rule", "merges", "applied", "matches"), rows, intro)


def kernel_costs(c: Compilation) -> Table:
    if c.kernelization is None:
        return Table("Kernel cost per device", (), [], "not kernelized")
    devices = [d.name for d in c.devices]
    short = units.short_devices(devices)
    times = device_times(c.view(c.stage))
    planned = planned_kernels(c)
    rows = []
    for cand_id, cand in c.kernelization.candidates.items():
        t = times.get(cand_id, {})
        rows.append((c.kernelization.name(cand_id), cand.kernel.name, f"c{cand.output}",
                     *(t.get(d, "—") for d in devices), short[planned[cand_id]] if cand_id in planned else ""))
    legend = units.device_legend(short)
    return Table("Kernel cost per device", ("kernel", "id", "computes", *(short[d] for d in devices), "plan runs it on"),
                 rows, f"{units.plural(len(rows), 'candidate')}; costs are the times extraction used: measured (with the tuned variant) "
                 "for the kernels tuned, the cost model's prediction for the rest" + (f"; devices: {legend}" if legend else ""))


def plan_table(c: Compilation) -> Table:
    if c.plan is None:
        return Table("Plan", (), [], "no plan")
    times = c.execution.step_times if c.execution is not None else None
    short = units.short_devices(d.name for d in c.devices)
    rows = []
    for i, s in enumerate(c.plan.steps, 1):
        if isinstance(s, Launch):
            what, where, size = s.name, s.device, s.kernel.input_bytes
        elif isinstance(s, Copy):
            what, size = f"c{s.source[0]}", s.buffer.nbytes
            where = f"{short.get(s.source[1], s.source[1])} → {short.get(s.target[1], s.target[1])}"
        elif isinstance(s, Allocate):
            what = f"c{s.value[0]}" + (f" (input {s.input})" if s.input else "")
            where, size = s.value[1], s.buffer.nbytes
        else:
            assert isinstance(s, Free)
            what, where, size = f"c{s.value[0]}", s.value[1], s.buffer.nbytes
        predicted = units.seconds(s.predicted) if isinstance(s, Copy | Launch) else ""
        ran = units.seconds(times[i - 1]) if times is not None and predicted else ""
        rows.append((str(i), type(s).__name__.lower(), what, short.get(where, where), units.nbytes(size), predicted,
                     ran))
    return Table("Plan", ("#", "step", "what", "device / pool", "bytes", "predicted", "measured"), rows,
                 plan_title(c, executed=True))


def verification(c: Compilation) -> Table:
    v = c.verification
    if v is None:
        return Table("Verification", (), [], "verification: not run")
    rows = [(o.name, f"{o.max_error:.3g}", f"{o.rtol:g}", f"{o.atol:g}", "ok" if o.ok else "FAILED") for o in v.outputs]
    verdict = "verification: ok, every output matches the reference interpreter" if v.ok else \
        "verification: FAILED, some output differs from the reference interpreter"
    return Table("Verification", ("output", "max error", "rtol", "atol", "result"), rows, verdict)


def _heading(c: Compilation, source: str) -> tuple[str, str]:
    p = c.program
    title = f"zyx-explore report: {p.name or source or 'program'}"
    devices = ", ".join(d.name for d in c.devices)
    about = ". ".join(x for x in (source, p.description) if x)
    return title, (f"{about}. " if about else "") + f"Devices: {devices}. Last stage: {c.stage}."


_MD_SPECIAL = re.compile(r"([\\`*\[\]<>|~&])")


def _md(text: str) -> str:
    """``text`` as literal Markdown on one line: no tag, link, entity, code or emphasis can come from a name,
    nor a heading or list from its start (``_`` is left: CommonMark reads it inside words, as in kernel names)."""
    line = _MD_SPECIAL.sub(r"\\\1", " ".join(text.split()))
    return "\\" + line if line[:1] in ("#", "+", "-", "=") else line


def markdown(c: Compilation, files: Mapping[str, Sequence[str]], notes: Sequence[str], source: str = "") -> str:
    title, sub = _heading(c, source)
    out = [f"# {_md(title)}", "", _md(sub), ""]
    for t in tables(c, files, notes):
        out += [f"## {t.title}", ""]
        if t.intro:
            out += [_md(line) + "  " for line in t.intro.splitlines()] + [""]
        if t.headers:
            out += ["| " + " | ".join(t.headers) + " |", "|" + "---|" * len(t.headers)]
            out += ["| " + " | ".join(_md(cell) for cell in row) + " |" for row in t.rows]
            out.append("")
    images = [f for fs in files.values() for f in fs if f.endswith((".svg", ".png"))]
    if images:
        out += ["## Graphs", ""] + [f"![{Path(f).stem}]({f})" for f in images] + [""]
    return "\n".join(out)


_STYLE = ("body{font-family:sans-serif;margin:2em;max-width:110em}table{border-collapse:collapse;margin:.5em 0 1.5em}"
          "td,th{border:1px solid #ccc;padding:2px 8px;text-align:left;font-size:90%}th{background:#eee}"
          "p.intro{white-space:pre-line}figure{overflow:auto;border:1px solid #ddd;margin:1em 0}")


def html_report(c: Compilation, files: Mapping[str, Sequence[str]], notes: Sequence[str], svgs: Mapping[str, str],
                source: str = "") -> str:
    """The report as one HTML file, the ``svgs`` (stage -> SVG text) inlined."""
    esc = html.escape
    title, sub = _heading(c, source)
    out = [f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{esc(title)}</title><style>{_STYLE}</style>"
           f"</head><body><h1>{esc(title)}</h1><p>{esc(sub)}</p>"]
    for t in tables(c, files, notes):
        out.append(f"<h2>{esc(t.title)}</h2>" + (f"<p class='intro'>{esc(t.intro)}</p>" if t.intro else ""))
        if t.headers:
            out.append("<table><tr>" + "".join(f"<th>{esc(h)}</th>" for h in t.headers) + "</tr>")
            out += ["<tr>" + "".join(f"<td>{esc(cell)}</td>" for cell in row) + "</tr>" for row in t.rows]
            out.append("</table>")
    if svgs:
        out.append("<h2>Graphs</h2>")
        for stage, svg in svgs.items():
            out.append(f"<figure id='{esc(stage)}'><figcaption>{esc(stage)}</figcaption>{_bare_svg(svg)}</figure>")
    out.append("</body></html>")
    return "\n".join(out)


def _bare_svg(svg: str) -> str:
    """SVG text without its XML prolog and doctype, for inlining in HTML."""
    return re.sub(r"^\s*(<\?xml[^>]*\?>\s*)?(<!DOCTYPE[^>]*>\s*)?(<!--.*?-->\s*)*", "", svg, flags=re.S)


def write_report(c: Compilation, out_dir: Path, files: Mapping[str, Sequence[str]], notes: Sequence[str],
                 source: str = "") -> list[Path]:
    """Write ``report.md`` and ``report.html`` into ``out_dir`` (``files``: stage -> file names written there)."""
    svgs = {s: (out_dir / f).read_text() for s, fs in files.items() for f in fs if f.endswith(".svg")}
    return [write_atomic(out_dir / "report.md", markdown(c, files, notes, source)),
            write_atomic(out_dir / "report.html", html_report(c, files, notes, svgs, source))]

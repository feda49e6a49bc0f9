"""Export stages of a Compilation to files: DOT always, and SVG, PNG or PDF when Graphviz's ``dot`` is there."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from engine import units
from engine.export.dot import stage_graph, stage_names
from engine.export.render import FORMATS, RenderError, dot_binary, render
from engine.export.report import write_report
from engine.export.timeline_svg import timeline_svg
from engine.export.view import DEFAULT_OPTIONS, ExportOptions
from engine.fileio import write_atomic
from engine.pipeline import Compilation
from engine.stages import Stage
from engine.timeline import timeline


@dataclass
class ExportResult:
    """The files written, the notes for the user (cuts, skipped stages, a missing ``dot``), render times."""

    paths: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    render_seconds: dict[str, float] = field(default_factory=dict)


def export_stage(compilation: Compilation, stage: str, out_dir: Path, fmt: str = "svg",
                 options: ExportOptions = DEFAULT_OPTIONS, *, result: ExportResult | None = None,
                 stem: str | None = None) -> list[Path]:
    """Write ``<stage>.dot`` (and ``<stage>.<fmt>``) into ``out_dir``; returns the paths written.
    ``stem``: the file names' stem instead of the stage's (the explorer's ``plan-2`` beside an earlier ``plan``).

    A stage the compilation lacks writes nothing; why, and any rendering problem (e.g. no
    ``dot`` on PATH), goes to ``result.notes`` when a ``result`` is given.
    """
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    result = result if result is not None else ExportResult()
    sg = stage_graph(compilation, stage, options)
    if sg.graph is None:
        result.notes.append(sg.note)
        return []
    source, stem = sg.graph.source, stem or stage
    paths = [write_atomic(Path(out_dir) / f"{stem}.dot", source)]
    if fmt != "dot":
        began = time.perf_counter()
        try:
            data = render(source, fmt)
        except RenderError as e:
            result.notes.append(f"{stage}: {e}")
        else:
            result.render_seconds[stage] = time.perf_counter() - began
            paths.append(write_atomic(Path(out_dir) / f"{stem}.{fmt}", data))
    result.paths += paths
    return paths


def export_all(compilation: Compilation, stages: Sequence[str] | None, out_dir: Path, fmt: str = "svg",
               options: ExportOptions = DEFAULT_OPTIONS, source: str = "") -> ExportResult:
    """Export ``stages`` (default: every stage) and write ``report.md`` and ``report.html`` beside them."""
    out_dir = Path(out_dir)
    result = ExportResult()
    if fmt != "dot" and dot_binary() is None:
        result.notes.append(f"Graphviz `dot` not found on PATH: wrote DOT files only (install graphviz to get {fmt})")
        fmt = "dot"
    files: dict[str, list[str]] = {}
    for stage in stages or stage_names():
        paths = export_stage(compilation, stage, out_dir, fmt, options, result=result)
        if paths:
            files[stage] = [p.name for p in paths]
    if compilation.plan is not None and (stages is None or {Stage.PLAN, Stage.EXECUTED} & set(stages)):  # no Graphviz
        files["timeline"] = [_write_timeline(compilation, out_dir).name]
        result.paths.append(out_dir / files["timeline"][0])
    result.paths += write_report(compilation, out_dir, files, result.notes, source)
    return result


def _write_timeline(c: Compilation, out_dir: Path) -> Path:
    """``timeline.svg``: the plan's launches and copies per device (measured when it ran), memory per pool."""
    assert c.plan is not None
    t = timeline(c.plan, c.execution, c.devices)
    short = units.short_devices(d.name for d in c.devices)
    return write_atomic(out_dir / "timeline.svg", timeline_svg(t, "plan", short))

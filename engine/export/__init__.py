"""Graphviz export of every stage of a Compilation, and headless reports (Markdown and HTML).

    >>> result = export_all(compilation, None, Path("out"), "svg")   # every stage + report.html/.md
    >>> export_stage(compilation, "plan", Path("out"), "svg")        # one stage: [out/plan.dot, out/plan.svg]
"""

from engine.export.dot import StageGraph, stage_graph, stage_names
from engine.export.export import ExportResult, export_all, export_stage
from engine.export.render import FORMATS, RenderError, render
from engine.export.view import ExportOptions

__all__ = ["FORMATS", "ExportOptions", "ExportResult", "RenderError", "StageGraph", "export_all",
           "export_stage", "render", "stage_graph", "stage_names"]

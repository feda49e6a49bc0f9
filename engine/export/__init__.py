"""Graphviz export of every stage of a Compilation, and headless reports (Markdown and HTML).

>>> import tempfile
>>> from pathlib import Path
>>> from engine import Init, Options, Tensor, compile_program, discover, from_tensors
>>> x = Tensor.input("x", (4, 8), "f32", init=Init.uniform(seed=0))
>>> compilation = compile_program(from_tensors({"y": (x * 2.0).sum(1)}), discover(opencl=False, native=False,
...                               cuda=False), Options(tune=False, tune_cache=False))
>>> out = Path(tempfile.mkdtemp())
>>> [p.name for p in export_stage(compilation, "plan", out, "dot")]  # one stage (svg, png, pdf through `dot`)
['plan.dot']
>>> result = export_all(compilation, None, out, "dot")               # every stage + report.html/.md
>>> sorted(p.name for p in result.paths if p.suffix != ".dot")
['report.html', 'report.md', 'timeline.svg']
"""

from engine.export.dot import StageGraph, stage_graph, stage_names
from engine.export.export import ExportResult, export_all, export_stage
from engine.export.render import FORMATS, RenderError, render
from engine.export.view import ExportOptions

__all__ = ["FORMATS", "ExportOptions", "ExportResult", "RenderError", "StageGraph", "export_all",
           "export_stage", "render", "stage_graph", "stage_names"]

"""zyx-explore's tensor compiler engine: its one public API (the explorer imports only this and ``engine.errors``).

A program, compiled stage by stage for the host's devices, then what one stage shows:

>>> from engine import Init, Options, Pins, Stage, Tensor, compile_program, discover, from_tensors, what_if
>>> x = Tensor.input("x", (4, 8), "f32", init=Init.uniform(seed=0))
>>> program = from_tensors({"y": (x * 2.0).sum(1)}, name="double-sum")
>>> c = compile_program(program, discover(opencl=False, native=False, cuda=False),
...                     Options(tune=False, tune_cache=False))
>>> c.stage, c.verification.ok
(<Stage.EXECUTED: 'executed'>, True)
>>> view = c.view(Stage.KERNELIZED)          # the e-graph, kernels and times as of a stage
>>> view.estimated, view.plan is None         # nominal estimates, no plan yet at that stage
(True, True)
>>> c.view("plan").plan.predicted > 0
True

A what-if: the plan re-extracted with a class pinned to a device, and its delta (``extract.compare``):

>>> out = c.egraph.output_classes()["y"]
>>> w = what_if(c, Pins().device(c.egraph, out, "numpy"))
>>> w.delta.dag >= 0, c.plan is not w.compilation.plan
(True, True)
"""

from engine import blas_threads, units  # noqa: F401  (blas_threads first: OpenBLAS's thread timeout, before numpy)
from engine.devices import discover
from engine.devices.base import Device
from engine.devices.source import device_source
from engine.egraph import (
    CONGRUENCE,
    Limits,
    Runner,
    Saturation,
    SemanticReport,
    check_semantics,
    default_rules,
    explain,
    format_explanation,
    from_program,
    random_inputs,
    special_inputs,
)
from engine.egraph.egraph import ClassId, EGraph, NodeId
from engine.errors import GraphError
from engine.export import FORMATS, ExportOptions, ExportResult, export_all, export_stage, stage_graph, stage_names
from engine.extract import EXTRACTORS, Choice, Delta, Explainer, Extraction, ExtractionError, Pins, Term, Why, compare
from engine.fileio import write_atomic
from engine.interop import (
    ForeignEGraph,
    ForeignResult,
    detect,
    egraph_document,
    extract_all,
    extract_each,
    load_serialized,
    problem_document,
)
from engine.kernel.attach import KernelNode
from engine.kernel.decisions import kernel_lines
from engine.kernel.kernelize import Candidate, Kernelization
from engine.kernel.schedule import DEFAULT_VARIANT, Variant
from engine.locate import Located, computed, locate, tensors_of
from engine.pipeline import (
    RESIDENT_NOTE,
    Compilation,
    Options,
    StageView,
    Verification,
    WhatIf,
    WhatIfRun,
    compile_program,
    compile_stages,
    run,
    run_what_if,
    what_if,
)
from engine.plan import Allocate, Copy, ExecPlan, Execution, Free, Launch, StepError
from engine.program.attrs import to_json_value
from engine.program.dtypes import DType
from engine.program.init import Init
from engine.program.loader import SizeLimits, load, loads
from engine.program.memory import check_memory
from engine.program.onnx_import import load_onnx
from engine.program.primitives import PrimGraph
from engine.program.program import Program
from engine.program.reference import evaluate
from engine.program.tensor import Tensor, from_tensors
from engine.stages import STAGES, Stage
from engine.summary import summary
from engine.timeline import Timeline, timeline
from engine.tuning import FAILED, OK, WRONG, Budget, Progress, TuneResult

__all__ = [
    "CONGRUENCE", "DEFAULT_VARIANT", "EXTRACTORS", "FAILED", "FORMATS", "OK", "RESIDENT_NOTE", "STAGES", "WRONG",
    "Allocate", "Budget", "Candidate", "Choice", "ClassId", "Compilation", "Copy", "DType", "Delta", "Device",
    "EGraph", "ExecPlan", "Execution", "Explainer", "ExportOptions", "ExportResult", "Extraction", "ExtractionError",
    "ForeignEGraph", "ForeignResult", "Free", "GraphError", "Init", "KernelNode", "Kernelization", "Launch", "Limits",
    "Located", "NodeId", "Options", "Pins", "PrimGraph", "Program", "Progress", "Runner", "Saturation",
    "SemanticReport", "SizeLimits", "Stage", "StageView", "StepError", "Tensor", "Term", "Timeline", "TuneResult", "Variant",
    "Verification", "WhatIf", "WhatIfRun", "Why",
    "check_memory", "check_semantics", "compare", "compile_program", "compile_stages", "computed", "default_rules",
    "detect", "device_source", "discover", "egraph_document", "evaluate", "explain", "export_all", "export_stage",
    "extract_all", "extract_each", "format_explanation", "from_program", "from_tensors", "kernel_lines", "load",
    "load_onnx", "load_serialized", "loads", "locate", "problem_document", "random_inputs", "run", "run_reference",
    "run_what_if", "special_inputs", "stage_graph", "stage_names", "summary", "tensors_of", "timeline",
    "to_json_value", "units", "what_if", "write_atomic",
]


def run_reference(program: Program) -> dict:
    """The outputs of ``program`` on its own input values, by the reference interpreter."""
    return evaluate(program.lower(), program.input_values())

"""zyx-explore's tensor compiler engine (imports nothing from the explorer)."""

from engine.errors import GraphError
from engine.program.dtypes import DType
from engine.program.init import Init
from engine.program.loader import load, loads
from engine.program.onnx_import import load_onnx
from engine.program.program import Program
from engine.program.reference import evaluate
from engine.program.tensor import Tensor, from_tensors

__all__ = ["DType", "GraphError", "Init", "Program", "Tensor", "evaluate", "from_tensors", "load", "load_onnx", "loads", "run_reference"]


def run_reference(program: Program) -> dict:
    """The outputs of ``program`` on its own input values, by the reference interpreter."""
    return evaluate(program.lower(), program.input_values())

"""The row kernel plan: a row kernel (``Kernel.stages``) runs as the chain of ordinary kernels it fuses.

One kernel per stage, reading the earlier stages' results from temporaries of
one element per row, then one for the outputs (``unfused``).  That costs the
numpy device what the unfused kernels cost (it streams each from memory
anyway), and keeps one evaluator for every kernel.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.devices.chunk_plan import CHUNK_ELEMENTS, MAX_ELEMENTS, Plan, plan
from engine.kernel.index import flatten, var
from engine.kernel.ir import Acc, Buffer, Kernel, Load, Reduce, map_exprs


@dataclass(frozen=True)
class RowPlan:
    """A row kernel prepared for evaluation: the plans of the ordinary kernels it fuses, in order."""

    kernel: Kernel
    parts: tuple[Plan, ...]
    """One per stage (its reduce, reading the earlier stages' results as inputs after the kernel's), then the
    outputs over the whole store shape (reading every stage's result)."""


def unfused(kernel: Kernel) -> list[Kernel]:
    """The ordinary kernels a row kernel fuses: stage ``i``'s reads inputs ``len(kernel.inputs) + j`` for stage
    ``j < i``'s results (``kernel.shape``-shaped), the last computes the outputs from all of them."""
    at = flatten([var(v) for v in kernel.vars], kernel.shape)
    temps = [Buffer(kernel.shape, s.dtype) for s in kernel.stages]
    loads = {Acc(s.dtype, i): Load(len(kernel.inputs) + i, at, kernel.numel, s.dtype) for i, s in enumerate(kernel.stages)}
    parts = []
    for i, s in enumerate(kernel.stages):
        (body,) = map_exprs([s.body], loads)
        parts.append(Kernel((*kernel.inputs, *temps[:i]), kernel.shape, kernel.vars, Reduce(s.op, s.vars, body),
                            (Acc(s.dtype),)))
    shape = tuple(v.size for v in kernel.store)
    parts.append(Kernel((*kernel.inputs, *temps), shape, kernel.store, None, tuple(map_exprs(kernel.outputs, loads))))
    return parts


def plan_rows(kernel: Kernel, max_elements: int = CHUNK_ELEMENTS, view_elements: int | None = MAX_ELEMENTS) -> RowPlan:
    """Prepare row kernel ``kernel``: ``plan`` of each kernel of ``unfused(kernel)``."""
    return RowPlan(kernel, tuple(plan(k, max_elements, view_elements) for k in unfused(kernel)))

"""Where a program tensor went, and back: its classes, the plan's kernels that compute it, their steps; the
program tensors a kernel computes.

A tensor's *value class* is the class of the node holding its value after lowering (``EGraph.tensors``); its
other classes are those whose nodes its lowering made (a matmul's reshapes, expands and product).  A kernel
*computes* a tensor when it fuses the tensor's value class (``Decisions.fused``): a value recomputed in several
kernels is computed by each of them.  The explorer's navigation and the ``why`` command read these answers.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.egraph.egraph import ClassId, EGraph
from engine.kernel.kernelize import Kernelization
from engine.plan import Allocate, ExecPlan, Launch


@dataclass(frozen=True)
class Located:
    """Program tensor ``tensor`` (``op`` is its program op, or ``input``) in one compilation."""

    tensor: str
    op: str
    value: ClassId
    """The class holding its value."""
    classes: tuple[ClassId, ...]
    """Every class its lowering made, the value class first."""
    steps: tuple[int, ...]
    """The plan's Launch steps whose kernels compute it (the Allocate of an input), in plan order."""


def locate(egraph: EGraph, kz: Kernelization | None, plan: ExecPlan | None, tensor: str) -> Located | None:
    """Where ``tensor`` went; None when it is no live program tensor (unknown, or nothing reads it)."""
    if tensor not in egraph.tensors:
        return None
    node, op = egraph.tensors[tensor]
    value = egraph.find(node)
    made = (egraph.find(n) for n, origin in egraph.origins.items() if origin == tensor)
    classes = tuple(dict.fromkeys([value, *sorted(made)]))
    steps = tuple(i for i, step in enumerate(plan.steps if plan is not None else ())
                  if (isinstance(step, Launch) and kz is not None and value in computed(egraph, kz, step.candidate))
                  or (isinstance(step, Allocate) and step.input == tensor))
    return Located(tensor, op, value, classes, steps)


def computed(egraph: EGraph, kz: Kernelization, cand_id: str) -> set[ClassId]:
    """The classes candidate ``cand_id`` computes: its output and every class it fuses."""
    cand = kz.candidates[cand_id]
    return {egraph.find(c) for c in (cand.output, *(f.cls for f in cand.decisions.fused))}


def tensors_of(egraph: EGraph, kz: Kernelization, cand_id: str) -> list[str]:
    """The program tensors (not inputs) whose values candidate ``cand_id`` computes, in program order; for a
    kernel that computes no tensor's value (a softmax's row max), the tensors whose lowering made its classes."""
    classes = computed(egraph, kz, cand_id)
    values = [t for t, (n, op) in egraph.tensors.items() if op != "input" and egraph.find(n) in classes]
    if values:
        return values
    made = {t for n, t in egraph.origins.items() if egraph.find(n) in classes}
    return [t for t in egraph.tensors if t in made]

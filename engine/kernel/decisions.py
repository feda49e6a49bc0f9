"""Why a kernel is shaped as it is: the kernelizer's decisions as data, and their text.

The kernelizer records, per candidate, how it was grown (which root form), each class it fused and by
which rule, each class it left out (loaded as an input) and why, and every class with several consumers
with the store-vs-recompute decision and its numbers; ``attach`` adds the devices that refused it.  The
explorer, the ``why`` command and the tests read these records; nothing recomputes them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from engine import units
from engine.egraph.egraph import ClassId, NodeId
from engine.kernel.cost import Work, work

if TYPE_CHECKING:  # both import this module
    from engine.kernel.attach import KernelNode
    from engine.kernel.kernelize import Kernelization

RULES = {
    "root": "the class the kernel computes",
    "elementwise": "elementwise ops and casts always fuse",
    "view": "views fuse as index arithmetic",
    "reduce": "the kernel's one reduce (its result is not broadcast again)",
    "stage": "a row reduce recomputed as a stage of the row kernel",
    "sibling": "a reduce at the kernel's own output point, run beside the others as a stage",
}
"""The fusion rule that brought a class into a kernel, by key."""

REASONS = {
    "input": "a program input, already in memory",
    "output": "a program output: stored, and read back by its consumers",
    "shared": "shared by several consumers and holds a reduce: stored once, not recomputed",
    "second-reduce": "a second reduce: a kernel centres on one",
    "broadcast": "a reduce whose result is broadcast again (expand or growing pad): stored",
    "nested": "a reduce inside another reduce's body: stored",
    "not-per-row": "a reduce not computed once per row of this row kernel",
    "stages": "the kernel already has its most stages",
}
"""Why a class was left out of a kernel (loaded from memory instead), by key."""


@dataclass(frozen=True)
class Fused:
    """Class ``cls`` is computed inside the kernel, brought in by rule ``rule`` (a key of RULES)."""

    cls: ClassId
    rule: str


@dataclass(frozen=True)
class Boundary:
    """Class ``cls`` is an input of the kernel (loaded, not fused) for reason ``reason`` (a key of REASONS)."""

    cls: ClassId
    reason: str


@dataclass(frozen=True)
class Sharing:
    """The store-vs-recompute decision on class ``cls``, read by ``users`` consumer classes: ``stored`` costs
    ``store_bytes`` of memory traffic (written once, read by each consumer); recomputing it costs
    ``recompute_ops`` more operations (its work repeated by every consumer but one).  The rule: recompute
    unless it holds a reduce (``holds_reduce``)."""

    cls: ClassId
    users: int
    stored: bool
    holds_reduce: bool
    store_bytes: int
    recompute_ops: int


@dataclass(frozen=True)
class Decisions:
    """What shaped one kernel candidate: ``grown`` is ``default`` (the class's default form at the root),
    ``form`` (another root form of the class), ``row`` (the row kernel: reduces recomputed per row) or
    ``siblings`` (reduces at the output point side by side)."""

    grown: str
    root: NodeId
    fused: tuple[Fused, ...]
    boundaries: tuple[Boundary, ...]
    sharing: tuple[Sharing, ...]


GROWN = {"default": "the class's default form at the root", "form": "another root form of the class",
         "row": "a row kernel: the reduces it would load are recomputed per row",
         "siblings": "a siblings kernel: the reduces at its output point run side by side as stages"}


def _classes(items: Sequence[Fused] | Sequence[Boundary], key: str, attr: str) -> str:
    return " ".join(f"c{x.cls}" for x in items if getattr(x, attr) == key)


def decision_lines(d: Decisions, w: Work, refused: Mapping[str, str],
                   rivals: Sequence[tuple[str, Decisions, Work, Mapping[str, float]]],
                   device_name: Callable[[str], str] = str) -> list[str]:
    """The decisions as text, one line each: how it was grown (with the kernel's work ``w``), fused classes by
    rule, boundaries by reason, store-vs-recompute with its numbers, the devices that refuse it (``refused``:
    why, by device name), and the rivals (other
    candidates of the same class: name, decisions, work, seconds by device name as the viewed stage prices
    them)."""
    lines = [f"grown from n{d.root}: {GROWN[d.grown]}; {_work(w)}"]
    for rule in RULES:
        fused = _classes(d.fused, rule, "rule")
        if fused and rule != "root":
            lines.append(f"fused {fused}: {RULES[rule]}")
    for reason in REASONS:
        out = _classes(d.boundaries, reason, "reason")
        if out:
            lines.append(f"left out {out}: {REASONS[reason]}")
    for s in d.sharing:
        verdict = "stored" if s.stored else "recomputed"
        why = "it holds a reduce" if s.holds_reduce else "no reduce in it"
        lines.append(f"c{s.cls} has {s.users} consumers: {verdict} ({why}); store {units.nbytes(s.store_bytes)} "
                     f"traffic vs recompute {s.recompute_ops:,} more ops")
    for device, reason in refused.items():
        lines.append(f"not on {device_name(device)}: {reason}")
    for name, rival, rival_work, times in rivals:
        priced = ", ".join(f"{device_name(dev)} {units.seconds(t)}" for dev, t in sorted(times.items()))
        lines.append(f"rival {name} ({GROWN[rival.grown].split(':')[0]}, n{rival.root}): {_work(rival_work)}"
                     + (f"; {priced}" if priced else ""))
    return lines


def kernel_lines(kz: Kernelization, refused: Mapping[str, Mapping[str, str]], cand_id: str,
                 times: Mapping[KernelNode, float], device_name: Callable[[str], str] = str) -> list[str]:
    """``decision_lines`` of candidate ``cand_id``, its rivals priced by ``times`` (the viewed stage's)."""
    def priced(k: str) -> dict[str, float]:
        return {kn.device: times[kn] for kn in times if kn.candidate == k}

    rivals = [(kz.name(k), kz.candidates[k].decisions, work(kz.candidates[k].kernel), priced(k))
              for k in kz.rivals(cand_id)]
    cand = kz.candidates[cand_id]
    return decision_lines(cand.decisions, work(cand.kernel), refused.get(cand_id, {}), rivals, device_name)


def _work(w: Work) -> str:
    return f"{units.nbytes(w.bytes)} moved, {w.ops:,} ops"

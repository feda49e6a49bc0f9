"""Readable kernel names built from what a kernel computes: ``matmul_t0+add_h``.

A kernel is named by the program tensors whose values it computes (each as ``op_tensor``, in program
order, constants left out); a kernel that computes no program tensor's value (a softmax's row max) by the tensor its class
came from and its primitive (``y.max``).  Row kernels end in ``/row``, siblings kernels in ``/siblings``; a name already taken gets ``#2``,
``#3`` in candidate order, so names are deterministic and unique within a kernelization.  The hash
(``Kernel.name``) stays the id everywhere.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from engine.egraph.egraph import ClassId, EGraph

if TYPE_CHECKING:
    from engine.kernel.kernelize import Candidate

MAX_PARTS = 3
"""Tensors named in full; beyond, the first and last with ``…`` between."""

MAX_TENSOR = 20
"""Characters of a tensor's name kept (its tail: ONNX names share long prefixes)."""


def kernel_names(egraph: EGraph, candidates: Mapping[str, Candidate]) -> dict[str, str]:
    """A readable, unique name per candidate id."""
    by_class: dict[ClassId, list[str]] = {}
    for tensor, (node, op) in egraph.tensors.items():
        if op not in ("input", "const"):  # constants say nothing of what a kernel computes
            by_class.setdefault(egraph.find(node), []).append(f"{op}_{_short(tensor)}")
    order = {c: i for i, c in enumerate(by_class)}  # program order of the tensors' classes
    names: dict[str, str] = {}
    taken: set[str] = set()
    for cand_id, cand in candidates.items():
        classes = [f.cls for f in cand.decisions.fused]
        parts = [p for c in sorted((c for c in classes if c in by_class), key=order.__getitem__) for p in by_class[c]]
        if not parts:
            parts.append(_anonymous(egraph, cand))
        if len(parts) > MAX_PARTS:
            parts = [parts[0], "…", parts[-1]]
        base = "+".join(parts) + (f"/{cand.decisions.grown}" if cand.decisions.grown in ("row", "siblings") else "")
        name, k = base, 1
        while name in taken:
            k += 1
            name = f"{base}#{k}"
        taken.add(name)
        names[cand_id] = name
    return names


def _anonymous(egraph: EGraph, cand: Candidate) -> str:
    """``tensor.prim`` for a class that is no program tensor's value: where it came from and what it does (its
    reduce, if it fuses one, else its root's primitive)."""
    cls = egraph.eclass(cand.output)
    origin = next((egraph.origins[n] for n in cls.nodes if n in egraph.origins), None)
    reduces = [egraph.node(f.cls).op for f in cand.decisions.fused if f.rule in ("reduce", "stage")]
    prim = (reduces[0] if reduces else egraph.node(cand.root).op).removeprefix("reduce_")
    return f"{_short(origin)}.{prim}" if origin is not None else f"c{cand.output}.{prim}"


def _short(tensor: str) -> str:
    return tensor if len(tensor) <= MAX_TENSOR else "…" + tensor[-(MAX_TENSOR - 1):]

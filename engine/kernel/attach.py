"""Kernel and ToDevice e-nodes: how kernel candidates enter the e-graph, one per device that can run them.

A ``kernel`` node's children are the classes its kernel reads; it computes its
class in the memory pool of its device.  A ``to_device`` node's only child is
its own class: it stands for "this class, copied into ``pool`` from wherever it
already is".  Both live in classes beside the structural forms, so the
explorer shows them as just more alternatives, and extraction picks among them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from engine.egraph.egraph import ClassId, NodeId
from engine.kernel.ir import HOST, Kernel
from engine.kernel.kernelize import Kernelization
from engine.program.dtypes import DType
from engine.program.primitives import Shape

KERNELIZE = "kernelize"
TRANSFER = "transfer"


@dataclass(frozen=True)
class KernelNode:
    """The param of a ``kernel`` e-node: candidate ``candidate`` (an id of the Kernelization) run on ``device``."""

    candidate: str
    device: str
    shape: Shape
    dtype: DType

    def __str__(self) -> str:
        return f"{self.candidate.split('@')[0]} on {self.device}"


@dataclass(frozen=True)
class ToDevice:
    """The param of a ``to_device`` e-node: the class copied into memory pool ``pool``."""

    pool: str
    shape: Shape
    dtype: DType

    def __str__(self) -> str:
        return f"to {self.pool}"


@dataclass(frozen=True)
class Attached:
    """The nodes attach() added."""

    kernels: tuple[NodeId, ...]
    transfers: tuple[NodeId, ...]
    refused: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """By candidate id: why each device that cannot run it refuses it (by device name)."""


class Placement(Protocol):
    """What ``attach`` asks of a device (every ``engine.devices.base.Device`` offers it): the kernel layer
    places candidates on devices without importing the devices layer, which imports it."""

    name: str
    pool: str

    def supports(self, kernel: Kernel) -> bool: ...

    def unsupported(self, kernel: Kernel) -> str | None: ...


def attach(kz: Kernelization, devices: Sequence[Placement]) -> Attached:
    """Add a kernel node per (candidate, device that supports it) and a ToDevice node per class and pool."""
    egraph = kz.egraph
    kernels = []
    refused: dict[str, dict[str, str]] = {}
    for cand_id, cand in kz.candidates.items():
        cls = egraph.eclass(cand.output)
        for device in devices:
            if device.supports(cand.kernel):
                param = KernelNode(cand_id, device.name, cls.shape, cls.dtype)
                kernels.append(egraph.attach(cand.output, "kernel", param, cand.inputs, KERNELIZE))
            else:
                why = device.unsupported(cand.kernel) or "the device declines it"
                refused.setdefault(cand_id, {})[device.name] = why
    pools = list(dict.fromkeys([HOST, *(d.pool for d in devices)]))
    transfers = []
    for c in _stored_classes(kz):
        cls = egraph.eclass(c)
        for pool in pools:
            transfers.append(egraph.attach(c, "to_device", ToDevice(pool, cls.shape, cls.dtype), (c,), TRANSFER))
    egraph.rebuild()
    return Attached(tuple(kernels), tuple(transfers), refused)


def _stored_classes(kz: Kernelization) -> list[ClassId]:
    """Classes that may be in memory: kernel outputs and inputs, and the program's outputs."""
    out = dict.fromkeys(kz.egraph.output_classes().values())
    for cand in kz.candidates.values():
        out.update(dict.fromkeys((cand.output, *cand.inputs)))
    return list(out)

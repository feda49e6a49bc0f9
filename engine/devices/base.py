"""What every device offers the engine (``Device``): a memory pool, compiled kernels, launches that report their
time, predictions, tuning capabilities and the source of what it runs.

A device owns one memory pool (``pool``); buffers are opaque handles of that
pool.  The host pool (``HOST``) holds numpy arrays: program inputs start there
and outputs end there.  ``upload``/``download`` move data between a device's
pool and the host; a copy between two device pools goes through the host.

The engine and the explorer use a device only through ``Device``: a capability
a device lacks has a default here (no variants, no joint builds, not a GPU,
never lost), never a probe of its attributes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from engine.kernel.ir import Buffer, Kernel

HOST = "host"


@dataclass(frozen=True)
class Variant:
    """Tuning parameters of one kernel on one device (the defaults: one output per work item, runtime's local size).

    Every variant computes the same function; ``engine.kernel.opencl`` explains each parameter.
    """

    local_size: int | None = None
    """Work-group size (None: the runtime chooses)."""
    upcast: int = 1
    """Outputs per work item along the last non-trivial global axis (contiguous: vector loads and stores)."""
    tile: int = 1
    """Outputs per work item along the axis before it (with ``upcast``: a 2-D register tile)."""
    unroll: int = 1
    """Unroll factor of the innermost reduce loop (a remainder loop handles the rest)."""
    group: int = 0
    """When > 1: one work-group of this many work items (a power of two) per output, the reduce split across it
    and combined by a tree reduction in local memory."""
    smem: int = 0
    """When > 0 (with a 2-D blocked work-group): the reduce runs in tiles of this many steps, each work-group
    first staging the tiles of the operands that follow one tiled axis into local memory."""

    def __str__(self) -> str:
        parts = [f"local={self.local_size or 'auto'}"]
        for name in ("upcast", "tile", "unroll"):
            if getattr(self, name) != 1:
                parts.append(f"{name}={getattr(self, name)}")
        if self.group > 1:
            parts.append(f"group={self.group}")
        if self.smem:
            parts.append(f"smem={self.smem}")
        return " ".join(parts)

    @property
    def tag(self) -> str:
        """A short C-identifier-safe name, e.g. ``l64u4t1r1g0`` or ``l256u4t8r4g0s16`` (the function name's suffix)."""
        smem = f"s{self.smem}" if self.smem else ""
        return f"l{self.local_size or 0}u{self.upcast}t{self.tile}r{self.unroll}g{self.group}{smem}"

    def to_json(self) -> dict[str, int | None]:
        return {"local_size": self.local_size, "upcast": self.upcast, "tile": self.tile, "unroll": self.unroll,
                "group": self.group, "smem": self.smem}

    @staticmethod
    def from_json(data: dict[str, Any]) -> Variant:
        """The variant of ``to_json``'s dict; a field left out (an older cache entry) takes its default."""
        fields = ("local_size", "upcast", "tile", "unroll", "group", "smem")
        unknown = set(data) - set(fields)
        if unknown:
            raise ValueError(f"unknown variant fields {sorted(unknown)}")
        values = {k: data[k] for k in fields if k in data}
        if not all(v is None or (isinstance(v, int) and not isinstance(v, bool)) for v in values.values()):
            raise ValueError(f"variant fields must be integers: {data}")
        low = {"local_size": 1, "upcast": 1, "tile": 1, "unroll": 1, "group": 0, "smem": 0}
        bad = [k for k, v in values.items() if v is not None and not low[k] <= v <= MAX_VARIANT_FIELD]
        if bad:
            raise ValueError(f"variant fields out of range ({', '.join(bad)}): {data}")
        return Variant(**values)


MAX_VARIANT_FIELD = 4096
"""No tuning parameter is larger (a cache entry beyond it is corrupt, not a variant to build)."""


DEFAULT_VARIANT = Variant()


class Compiled(Protocol):
    """A kernel ready to launch on its device (what ``Device.compile`` returns)."""

    kernel: Kernel
    variant: Variant


@dataclass(frozen=True)
class Source:
    """``text`` in ``language`` (a Pygments lexer name), under a ``title`` that says what it is."""

    title: str
    language: str
    text: str


@dataclass(frozen=True)
class Nominal:
    """Nominal speeds and size of a device whose variants the tuner's work-item roofline prices
    (``engine.tuning.model.predict``), until autotuning measures the real thing."""

    bandwidth: float
    """Device memory bytes/s."""
    throughput: float
    """Scalar ops/s."""
    overhead: float
    """Seconds per launch."""
    transfer_bandwidth: float
    """Host <-> device bytes/s."""
    transfer_overhead: float
    """Seconds per transfer."""
    units: int
    """Compute units (work-groups that run at once)."""
    lanes: int
    """Preferred float vector width (a CPU runtime vectorises across work items by it)."""


class Device(ABC):
    """A device as the engine uses it; subclasses implement the abstract methods and override the defaults of
    the capabilities they have."""

    name: str
    """Unique and stable across runs (it keys the tuning cache), e.g. ``numpy`` or ``opencl:pthread-...``."""
    pool: str
    """The memory pool its buffers live in."""
    driver_version: str
    """What besides ``name`` keys its tuning cache entries: the driver, compiler or library that builds its kernels."""
    lost: str | None = None
    """Why the device stopped working, once it has: every operation then fails, and the tuner and planner stop
    using it."""
    is_gpu: bool = False
    """Whether its variants are seeded and priced for a GPU (wide work-groups, staged operands)."""
    tunable: bool = False
    """Whether the tuner searches its variants (``variant_error`` says which run); else it times the default."""
    launch_overhead: float = 0.0
    """Nominal seconds per launch, part of its roofline (calibration subtracts it before scaling the rest)."""
    nominal: Nominal | None = None
    """Its speeds when the tuner's work-item roofline prices its variants; None: ``predict`` does."""

    @abstractmethod
    def unsupported(self, kernel: Kernel) -> str | None:
        """Why this device cannot run ``kernel`` (None when it can): what the explorer shows of a refusal."""

    def supports(self, kernel: Kernel) -> bool:
        """Whether this device can run ``kernel`` at all (dtypes, patterns)."""
        return self.unsupported(kernel) is None

    def variant_error(self, kernel: Kernel, variant: Variant) -> str | None:
        """Why ``variant`` cannot run ``kernel`` here (None when it can); a device without variants runs the
        default alone."""
        return None if variant == DEFAULT_VARIANT else f"{self.name} has only the default variant"

    @abstractmethod
    def compile(self, kernel: Kernel, variant: Variant = DEFAULT_VARIANT) -> Compiled:
        """``kernel`` ready to launch."""

    def compile_many(self, items: list[tuple[Kernel, Variant]]) -> None:  # noqa: B027 (a default that does nothing)
        """Build many ``(kernel, variant)`` pairs at once, so that later ``compile`` calls find them built (what a
        device whose builds are slow does); by default nothing is built ahead."""

    @abstractmethod
    def source(self, kernel: Kernel, variant: Variant = DEFAULT_VARIANT) -> Source:
        """What this device runs for ``kernel`` in ``variant``, as text (the explorer's source pane)."""

    @abstractmethod
    def alloc(self, buffer: Buffer) -> Any: ...

    @abstractmethod
    def upload(self, array: np.ndarray) -> Any:
        """A new buffer of this pool holding ``array`` (contiguous, of the buffer's dtype)."""

    @abstractmethod
    def download(self, handle: Any, buffer: Buffer) -> np.ndarray: ...

    @abstractmethod
    def free(self, handle: Any) -> None: ...

    @abstractmethod
    def launch(self, compiled: Compiled, inputs: list[Any], outputs: list[Any]) -> float:
        """Run ``compiled`` on input and output buffers and return its device time in seconds."""

    @abstractmethod
    def estimate(self, kernel: Kernel) -> float:
        """Predicted seconds for ``kernel`` (a roofline: bytes over bandwidth, ops over throughput)."""

    def predict(self, kernel: Kernel, variant: Variant = DEFAULT_VARIANT) -> float:
        """Predicted seconds for ``kernel`` in ``variant`` (by default ``estimate``, the same for every variant)."""
        return self.estimate(kernel)

    @abstractmethod
    def transfer_estimate(self, nbytes: int) -> float:
        """Predicted seconds to move ``nbytes`` between the host and this device's pool (0 for the host pool)."""

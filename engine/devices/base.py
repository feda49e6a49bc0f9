"""What every device offers the engine (``Device``): a memory pool, compiled kernels, launches that report their
time, predictions, tuning capabilities and the source of what it runs.

A device owns one memory pool (``pool``); buffers are opaque handles of that
pool.  The host pool (``engine.kernel.ir.HOST``) holds numpy arrays: program inputs start there
and outputs end there.  ``upload``/``download`` move data between a device's
pool and the host; a copy between two device pools goes through the host.

The engine and the explorer use a device only through ``Device``: a capability
a device lacks has a default here (no variants, no joint builds, not a GPU,
never lost), never a probe of its attributes.
"""

from __future__ import annotations

import functools
import itertools
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from engine import units
from engine.kernel.ir import Buffer, Kernel, Load, dependent
from engine.kernel.schedule import DEFAULT_VARIANT, Variant

SIBLINGS_ELSEWHERE = ("a siblings kernel of products (its stages read elements other output points read too) gains only "
                      "where the products launch together (the cuBLAS device's one batched call); here each point would "
                      "read its operands again, with no tile to share them")
"""Why a device other than cuBLAS declines a siblings kernel of products."""


def sibling_refusal(kernel: Kernel) -> str | None:
    """``SIBLINGS_ELSEWHERE`` for a siblings kernel one of whose stages loads, inside its reduce, an element that
    other output points load too (a load leaving a global axis unread: a product's operands); None for any other
    kernel.  A device that runs one output point per work item runs such a kernel far slower than the separate
    products; siblings that each read their own rows (a row's max beside its mean) read them once instead of
    once per reduce."""
    if not kernel.siblings:
        return None
    every = {v for v in kernel.vars if v.size > 1}
    for stage in kernel.stages:
        inner = dependent([stage.body], set(stage.vars))
        if any(isinstance(e, Load) and not every <= e.index.variables() for e in inner):
            return SIBLINGS_ELSEWHERE
    return None


@dataclass(frozen=True)
class Link:
    """One direction of the copy between the host and a device's pool: the seconds a copy took at a few sizes,
    joined by straight lines and continued past the largest at its last segment's rate.  One line through the
    smallest and largest size does not hold in between: a copy of a few MiB goes in more, smaller staging chunks
    than a large one, and pays each chunk's hand-off."""

    points: tuple[tuple[int, float], ...]
    """(bytes, seconds) by growing size, seconds never falling; at least two."""

    @classmethod
    def line(cls, overhead: float, bandwidth: float) -> Link:
        """A nominal link: ``overhead`` seconds a copy plus ``bandwidth`` bytes per second."""
        return cls(((0, overhead), (1 << 30, overhead + (1 << 30) / bandwidth)))

    def seconds(self, nbytes: int) -> float:
        points = self.points
        if nbytes <= points[0][0]:
            return points[0][1]
        for (a, ta), (b, tb) in itertools.pairwise(points):
            if nbytes <= b:
                return ta + (tb - ta) * (nbytes - a) / (b - a)
        return points[-1][1] + (nbytes - points[-1][0]) / self.bandwidth

    @property
    def overhead(self) -> float:
        """Seconds of the smallest copy measured (the least a copy costs)."""
        return self.points[0][1]

    @property
    def bandwidth(self) -> float:
        """Bytes per second of the last segment (what a larger copy adds per byte)."""
        (a, ta), (b, tb) = self.points[-2:]
        return (b - a) / max(tb - ta, 1e-30)

    def describe(self) -> str:
        """``4 KiB 31 µs · 1 MiB 0.43 ms · 16 MiB 1.40 ms`` (the sizes measured)."""
        return " · ".join(f"{units.nbytes(n)} {units.seconds(s)}" for n, s in self.points)


@dataclass(frozen=True)
class PoolLink:
    """Both directions of the copies between the host and one device's pool, each measured on its own: an upload
    reads host memory the caller already has, while a download fills host memory the caller keeps (fresh pages, or
    freshly page-locked ones), which can cost many times more per byte."""

    up: Link
    down: Link

    def describe(self) -> str:
        """``up 4 KiB 20 µs · 16 MiB 1.40 ms; down 4 KiB 31 µs · 16 MiB 1.01 ms``."""
        return f"up {self.up.describe()}; down {self.down.describe()}"


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


GPU_THREADS = 2048
"""Threads one GPU compute unit (an NVIDIA multiprocessor) holds at once."""
GPU_GROUPS = 32
"""Work-groups one GPU compute unit holds at once, at most."""


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
    group_multiple: int = 1
    """The work-group size the runtime prefers a multiple of (a kernel's, from the runtime)."""
    max_group: int = 1
    """The largest work-group the runtime makes."""


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
    barrier_loops: bool = False
    """Whether a work-group barrier is a loop over the group's work items (a CPU's OpenCL runtime: each costs per
    item, which calibration measures); a GPU waits at one in hardware."""
    launch_overhead: float = 0.0
    """Nominal seconds per launch, part of its roofline (calibration subtracts it before scaling the rest)."""
    nominal: Nominal | None = None
    """Its speeds when the tuner's work-item roofline prices its variants; None: ``predict`` does."""
    copies: str = "pageable"
    """How ``upload`` and ``download`` move data (``pinned``: through page-locked host memory; ``pageable``: from
    and to plain numpy arrays); part of the key its measured link is kept under, so a change of path is measured
    again."""

    @abstractmethod
    def unsupported(self, kernel: Kernel) -> str | None:
        """Why this device cannot run ``kernel`` (None when it can): what the explorer shows of a refusal."""

    @property
    def compute_units(self) -> int:
        """Work-groups of a GPU's largest size that run at once (its multiprocessors); 1 where unknown."""
        return self.nominal.units if self.nominal is not None else 1

    def supports(self, kernel: Kernel) -> bool:
        """Whether this device can run ``kernel`` at all (dtypes, patterns)."""
        return self.unsupported(kernel) is None

    def variant_error(self, kernel: Kernel, variant: Variant) -> str | None:
        """Why ``variant`` cannot run ``kernel`` here (None when it can); a device without variants runs the
        default alone."""
        return None if variant == DEFAULT_VARIANT else f"{self.name} has only the default variant"

    def seeds(self, kernel: Kernel) -> list[Variant]:
        """Variants of this device's own for ``kernel`` that the shared variant space (``engine.tuning.space``)
        does not hold, timed with its seeds (the CUDA device's implicit GEMMs); none by default."""
        return []

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
    def download(self, handle: Any, buffer: Buffer) -> np.ndarray:
        """A new host array of ``handle``'s contents, the caller's to keep (never a view of the buffer, which a
        ``Session`` writes again in its next run)."""

    @abstractmethod
    def free(self, handle: Any) -> None: ...

    @abstractmethod
    def launch(self, compiled: Compiled, inputs: list[Any], outputs: list[Any]) -> float:
        """Run ``compiled`` on input and output buffers and return its device time in seconds."""

    def launch_queued(self, compiled: Compiled, inputs: list[Any], outputs: list[Any]) -> None:
        """Start ``compiled`` without timing it: a device with a queue returns before it ends (``finish`` and any
        later ``download`` wait for it), so untimed runs pay no per-launch wait; by default ``launch``."""
        self.launch(compiled, inputs, outputs)

    def prepare(self, compiled: Compiled, inputs: list[Any], outputs: list[Any]) -> Callable[[], None]:
        """A function that queues ``compiled`` on these buffers as ``launch_queued`` does, to call again and again
        while the caller keeps the buffers (what a ``Session`` replays): a device whose launch has host work it
        can do once (operand views, scratch memory, argument lists) does it here; by default none is."""
        return functools.partial(self.launch_queued, compiled, list(inputs), list(outputs))

    def finish(self) -> None:  # noqa: B027 (a default that does nothing)
        """Wait until everything started by ``launch_queued`` has ended; by default nothing is left running."""

    @abstractmethod
    def estimate(self, kernel: Kernel) -> float:
        """Predicted seconds for ``kernel`` (a roofline: bytes over bandwidth, ops over throughput)."""

    def predict(self, kernel: Kernel, variant: Variant = DEFAULT_VARIANT) -> float:
        """Predicted seconds for ``kernel`` in ``variant`` (by default ``estimate``, the same for every variant)."""
        return self.estimate(kernel)

    def workers(self, kernel: Kernel, variant: Variant = DEFAULT_VARIANT) -> int:
        """Threads a launch of ``kernel`` in ``variant`` wakes (the calibrated model charges the measured cost of
        waking them when more than one); by default one."""
        return 1

    @abstractmethod
    def transfer_estimate(self, nbytes: int) -> float:
        """Predicted seconds to move ``nbytes`` between the host and this device's pool (0 for the host pool)."""

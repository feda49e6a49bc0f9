"""What every device offers the planner: a memory pool, compiled kernels, launches that report their time.

A device owns one memory pool (``pool``); buffers are opaque handles of that
pool.  The host pool (``engine.kernel.ir.HOST``) holds numpy arrays: program inputs start there
and outputs end there.  ``upload``/``download`` move data between a device's
pool and the host; a copy between two device pools goes through the host.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from engine.kernel.ir import Buffer, Kernel
from engine.kernel.schedule import DEFAULT_VARIANT, Variant


@dataclass(frozen=True)
class Link:
    """One direction of the copy between the host and a device's pool."""

    overhead: float
    """Seconds each copy costs whatever its size."""
    bandwidth: float
    """Bytes per second beyond that."""

    def seconds(self, nbytes: int) -> float:
        return self.overhead + nbytes / self.bandwidth


class Compiled(Protocol):
    """A kernel ready to launch on its device (what ``Device.compile`` returns)."""

    kernel: Kernel
    variant: Variant


class Device(Protocol):
    name: str
    """Unique and stable across runs (it keys the tuning cache), e.g. ``numpy`` or ``opencl:pthread-...``."""
    pool: str
    """The memory pool its buffers live in."""

    def supports(self, kernel: Kernel) -> bool:
        """Whether this device can run ``kernel`` at all (dtypes, patterns)."""
        ...

    def unsupported(self, kernel: Kernel) -> str | None:
        """Why this device cannot run ``kernel`` (None when it can): what the explorer shows of a refusal."""
        ...

    def compile(self, kernel: Kernel, variant: Variant = DEFAULT_VARIANT) -> Compiled:
        """``kernel`` ready to launch.  Devices whose builds are slow may also offer
        ``compile_many(items)``, which builds many ``(kernel, variant)`` pairs at once."""
        ...

    def alloc(self, buffer: Buffer) -> Any: ...

    def upload(self, array: np.ndarray) -> Any:
        """A new buffer of this pool holding ``array`` (contiguous, of the buffer's dtype)."""
        ...

    def download(self, handle: Any, buffer: Buffer) -> np.ndarray: ...

    def free(self, handle: Any) -> None: ...

    def launch(self, compiled: Compiled, inputs: list[Any], outputs: list[Any]) -> float:
        """Run ``compiled`` on input and output buffers and return its device time in seconds."""
        ...

    def estimate(self, kernel: Kernel) -> float:
        """Predicted seconds for ``kernel`` (a roofline: bytes over bandwidth, ops over throughput)."""
        ...

    def transfer_estimate(self, nbytes: int) -> float:
        """Predicted seconds to move ``nbytes`` between the host and this device's pool (0 for the host pool)."""
        ...

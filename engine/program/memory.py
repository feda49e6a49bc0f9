"""Will a program fit in memory?  Checked before anything is allocated, so a program too big for this machine
is one located message instead of a MemoryError (or the kernel's OOM killer) after minutes of work.

The estimate is a lower bound of what running it takes: its inputs twice (the plan's copy and the
reference interpreter's), the plan's outputs (kept while the reference runs) and every value its nodes
compute (the reference keeps them all); the plan's own peak is below the latter.  What is available is
the smaller of the kernel's ``MemAvailable`` and what the address-space limit (``ulimit -v``) still
allows this process.
"""

from __future__ import annotations

import math
import resource
from pathlib import Path

from engine import units
from engine.errors import GraphError
from engine.program.program import Program


def needed_bytes(program: Program) -> int:
    """Bytes of the inputs (twice), of the outputs and of every node's value."""
    types = program.types()
    outputs = sum(math.prod(types[name][0]) * types[name][1].itemsize for name in set(program.outputs))
    return (2 * program.parameter_bytes() + outputs
            + sum(math.prod(n.shape) * n.dtype.itemsize for n in program.live_nodes()))


def available_bytes() -> int | None:
    """The memory this process may still allocate, or None when it cannot be told (not Linux)."""
    found: list[int] = []
    try:
        meminfo = Path("/proc/meminfo").read_text()
        found += [int(line.split()[1]) * 1024 for line in meminfo.splitlines() if line.startswith("MemAvailable:")]
    except (OSError, ValueError, IndexError):
        pass
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        try:
            status = Path("/proc/self/status").read_text()
            used = next(int(line.split()[1]) * 1024 for line in status.splitlines() if line.startswith("VmSize:"))
        except (OSError, ValueError, StopIteration):
            used = 0
        found.append(max(soft - used, 0))
    return min(found) if found else None


def check_memory(program: Program, source: str = "", available: int | None = None) -> None:
    """GraphError (at ``inputs``) when the program needs more memory than is available."""
    available = available_bytes() if available is None else available
    needed = needed_bytes(program)
    if available is not None and needed > available:
        raise GraphError(f"running this program needs at least {units.nbytes(needed)} ({units.nbytes(program.parameter_bytes())} of inputs, held twice, "
                         f"its outputs and the values its nodes compute), but only {units.nbytes(available)} of memory are available",
                         "inputs", source)

"""OpenBLAS's worker threads go to sleep soon after a call, so that a native kernel that follows gets the cores.

After each call OpenBLAS keeps its worker threads spinning for ``2**OPENBLAS_THREAD_TIMEOUT`` cycles, 2**28 by
default (about 0.1 s). A plan alternates BLAS calls with native kernels on the same cores. A native kernel that
started in that window shared a small CPU's cores with the spinning threads, and ran 10x slower than its trials
(benchmarks/RESULTS.md, "BLAS threads that sleep"). 2**20 cycles, under a millisecond, still keeps the workers
awake between back-to-back calls. This is the BLAS side of the native device's ``OMP_WAIT_POLICY``.

OpenBLAS reads the setting once, when numpy loads it. So ``engine`` imports this module before anything that
imports numpy, and the setting applies only where numpy was not loaded yet and the environment names no
timeout. ``IN_EFFECT`` is the timeout the process's OpenBLAS uses, part of the host devices' ``driver_version``,
so that times measured under another are not reused.
"""

from __future__ import annotations

import os
import sys

TIMEOUT = "20"
"""log2 of the cycles OpenBLAS's workers spin after a call (OpenBLAS takes 4 to 30)."""

if "numpy" not in sys.modules:
    os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", TIMEOUT)
IN_EFFECT = os.environ.get("OPENBLAS_THREAD_TIMEOUT", "default")
"""The timeout this process's OpenBLAS runs with (as the environment names it; ``default``: none named)."""

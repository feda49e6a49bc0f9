"""The variant space of a kernel: parameter values, seeds worth timing first, and beam-search actions."""

from __future__ import annotations

from dataclasses import replace

from engine.kernel.ir import Kernel
from engine.kernel.lanes import upcast_axes
from engine.kernel.schedule import DEFAULT_VARIANT, Variant, variant_error

LOCAL_SIZES: tuple[int | None, ...] = (None, 16, 32, 64, 128, 256, 512, 1024)
FACTORS = (1, 2, 4, 8)
GROUPS = (0, 16, 32, 64, 128, 256, 512, 1024)
SMEM = (0, 8, 16, 32)
"""Reduce tile depths of the local-memory variant (0: off)."""
SMALL_OUTPUT = 4096
"""Kernels with at most this many output points and a long reduce get group-reduce seeds."""
GPU_SMALL_OUTPUT = 1 << 17
"""The same on a GPU, where a reduce per work item reads rows far apart (uncoalesced)."""


def valid(kernel: Kernel, v: Variant) -> bool:
    """Whether ``v`` applies to ``kernel`` and is not wasteful (factors within their axis)."""
    if variant_error(kernel, v) is not None:
        return False
    last, before = upcast_axes(kernel)
    if (last is not None and v.upcast > last.size) or (before is not None and v.tile > before.size):
        return False
    red = kernel.reduce
    if red is not None and red.vars and max(v.unroll, v.smem) > red.vars[-1].size:
        return False
    if v.smem and v.unroll > v.smem:
        return False
    if kernel.stages and v.group > 2 * max(kernel.row_size, *(s.size for s in kernel.stages)):
        return False
    return not (red is not None and v.group > 1 and v.group > 2 * max(red.size, 1))


def _step(values: tuple, current: object) -> list:
    i = values.index(current) if current in values else 0
    return [values[j] for j in (i - 1, i + 1) if 0 <= j < len(values)]


def neighbours(kernel: Kernel, v: Variant) -> list[Variant]:
    """Variants one action away: one parameter moved to an adjacent value (the local-memory tile depth too),
    or the group reduce toggled."""
    out: list[Variant] = []
    if v.group > 1:
        out += [replace(v, group=g) for g in _step(GROUPS, v.group) if g > 1]
        out.append(DEFAULT_VARIANT)
    else:
        out += [replace(v, local_size=s) for s in _step(LOCAL_SIZES, v.local_size)]
        out += [replace(v, upcast=f) for f in _step(FACTORS, v.upcast)]
        out += [replace(v, tile=f) for f in _step(FACTORS, v.tile)]
        out += [replace(v, unroll=f) for f in _step(FACTORS, v.unroll)]
        if kernel.reduce is not None:
            out += [replace(v, smem=d) for d in _step(SMEM, v.smem)]
        if kernel.reduce is not None or kernel.stages:
            out.append(Variant(group=64))
    return [n for n in dict.fromkeys(out) if n != v and valid(kernel, n)]


def seeds(kernel: Kernel, gpu: bool) -> list[Variant]:
    """The default and a few variants likely to be good for this kernel's shape (timed first)."""
    red = kernel.reduce
    local = 256 if gpu else None
    if kernel.stages:  # row kernels: a row per work-group first on a GPU (a row per work item is far slower there)
        groups = [Variant(group=256), Variant(group=1024 if gpu else 64)]
        out = [*groups, DEFAULT_VARIANT, Variant(local_size=local)] if gpu else [DEFAULT_VARIANT, *groups]
        return [v for v in dict.fromkeys(out) if valid(kernel, v)]
    out = [DEFAULT_VARIANT, Variant(local_size=local, upcast=4)]
    if red is not None:
        out.append(Variant(local_size=local, unroll=4))
        if kernel.numel <= (GPU_SMALL_OUTPUT if gpu else SMALL_OUTPUT) and red.size >= 256:
            out += [Variant(group=256), Variant(group=1024 if gpu else 64)]
        _, before = upcast_axes(kernel)
        if before is not None and gpu:  # operands staged in local memory, 8 x 4 or 8 x 8 outputs per item (on the
            out += [Variant(local_size=512, upcast=4, tile=8, unroll=4, smem=32),  # H200: 128 x 128 per group, best)
                    Variant(local_size=256, upcast=4, tile=8, unroll=8, smem=32),
                    Variant(local_size=128, upcast=8, tile=8, unroll=4, smem=32),
                    Variant(local_size=256, upcast=4, tile=8, unroll=4, smem=16)]
        if before is not None:
            out += [Variant(local_size=local, upcast=4, tile=4), Variant(local_size=local, upcast=4, tile=2, unroll=2)]
            if gpu:  # 2-D blocked work-groups (opencl.block), 64 x 64 to 128 x 128 outputs per group
                out += [Variant(local_size=256, upcast=4, tile=4, unroll=4),
                        Variant(local_size=256, upcast=4, tile=8, unroll=2),
                        Variant(local_size=128, upcast=4, tile=8, unroll=2),
                        Variant(local_size=256, upcast=8, tile=8),
                        Variant(local_size=64, upcast=8, tile=8, unroll=2)]
    elif gpu:
        out.append(Variant(local_size=256))
    return [v for v in dict.fromkeys(out) if valid(kernel, v)]

"""The schedule of a kernel on a device: its ``Variant`` (tuning parameters), which variants apply, the launch
geometry and the local-memory staging of each.

It decides what every renderer (``engine.kernel.render``) obeys and what the tuner searches and prices
(``engine.tuning``), and knows no source text: the renderers and the tuner both depend on it, not on each other.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from engine.kernel.index import Var
from engine.kernel.ir import Kernel, Load, schedule
from engine.kernel.lanes import lanes, upcast_axes
from engine.program.dtypes import DType


@dataclass(frozen=True)
class Variant:
    """Tuning parameters of one kernel on one device (the defaults: one output per work item, runtime's local size).

    Every variant computes the same function; ``engine.kernel.render.opencl`` explains each parameter.
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


VECTOR_DTYPES = (DType.F32, DType.F64, DType.I32, DType.I64, DType.F16)
"""Dtypes read by ``vloadN`` (half through ``vload_halfN``, as float)."""


class InvalidVariantError(ValueError):
    """A variant that does not apply to the kernel (e.g. unroll without a reduce, a group that is no power of 2)."""


def variant_error(kernel: Kernel, variant: Variant) -> str | None:
    """Why ``variant`` cannot apply to ``kernel`` (device limits aside), or None."""
    if kernel.stages:
        return _row_variant_error(kernel, variant)
    v = variant
    if min(v.upcast, v.tile, v.unroll) < 1 or min(v.group, v.smem) < 0 or (v.local_size is not None and v.local_size < 1):
        return f"non-positive parameter in {v}"
    last, before = upcast_axes(kernel)
    if v.upcast > 1 and last is None:
        return "upcast needs an axis of size > 1"
    if v.tile > 1 and before is None:
        return "tile needs two axes of size > 1"
    if v.unroll > 1 and (kernel.reduce is None or not kernel.reduce.vars):
        return "unroll needs a reduce loop"
    if v.group > 1:
        if kernel.reduce is None:
            return "group needs a reduce"
        if v.group & (v.group - 1):
            return f"group {v.group} is not a power of two"
        if (v.upcast, v.tile, v.unroll) != (1, 1, 1) or v.local_size not in (None, v.group):
            return "group excludes upcast, tile, unroll and another local size"
    if v.smem:
        return _staging_error(kernel, v)
    return None


def _staging_error(kernel: Kernel, v: Variant) -> str | None:
    shape = block(v)
    if shape is None or v.group > 1:
        return "smem needs a blocked work-group (tile > 1 and a power-of-two local size)"
    if kernel.reduce is None or not kernel.reduce.vars:
        return "smem needs a reduce loop"
    tiles = staging(kernel, v)
    if not tiles:
        return "smem needs a reduce load that follows one tiled axis"
    for t in tiles:
        if (t.width * v.smem) % (t.vector * shape[0] * shape[1]):
            return f"a {t.width} x {v.smem} tile does not split evenly across {v.local_size} work items"
    return None


def staged_loads(kernel: Kernel) -> list[tuple[Load, Var]]:
    """The reduce body's loads an ``smem`` variant stages: (load, the tiled axis it follows).

    A load is staged when its index reads the innermost reduce variable and exactly one of the two tiled axes
    (``upcast_axes``): a work-group's items then share its values over the group's block of that axis.
    """
    red = kernel.reduce
    last, before = upcast_axes(kernel)
    if red is None or not red.vars or before is None:
        return []
    out = []
    for e in schedule([red.body]):
        if isinstance(e, Load) and e.dtype in VECTOR_DTYPES:
            vs = e.index.variables()
            axes = [a for a in (before, last) if a in vs]
            if red.vars[-1] in vs and len(axes) == 1:
                out.append((e, axes[0]))
    return out


@dataclass(frozen=True)
class Tile:
    """One staged load's local-memory tile: ``width`` points of ``axis`` (padded to ``stride``) by the reduce tile.

    The group's items fill it in ``vector``-element chunks along ``axis`` (``along_axis``) or along the reduce,
    whichever the load's index walks with unit stride (coalesced reads).
    """

    load: Load
    axis: Var
    width: int
    stride: int
    along_axis: bool
    vector: int


def staging(kernel: Kernel, variant: Variant) -> list[Tile]:
    """The local-memory tiles of ``kernel`` in the ``smem`` variant ``variant`` (empty if none applies)."""
    shape = block(variant)
    if shape is None or not variant.smem:
        return []
    _, before = upcast_axes(kernel)
    depth, items = variant.smem, shape[0] * shape[1]
    out = []
    for load, axis in staged_loads(kernel):
        assert kernel.reduce is not None
        width = shape[0] * variant.tile if axis == before else shape[1] * variant.upcast
        along_axis = abs(load.index.coefficient(axis)) == 1 or abs(load.index.coefficient(kernel.reduce.vars[-1])) != 1
        fast, size = (width, axis.size) if along_axis else (depth, depth)
        vector = next((n for n in (4, 2) if fast % n == 0 and size % n == 0 and (width * depth) % (n * items) == 0), 1)
        stride = width if along_axis else width + 4  # column writes at a stride off the 32 banks
        out.append(Tile(load, axis, width, stride, along_axis, vector))
    return out


def local_bytes(kernel: Kernel, variant: Variant) -> int:
    """Bytes of local memory the variant declares (group partials, staged tiles)."""
    if variant.group > 1 and kernel.reduce is not None:
        return variant.group * max(kernel.reduce.dtype.itemsize, 4)
    return sum(t.stride * variant.smem * t.load.dtype.itemsize * (2 if t.load.dtype == DType.F16 else 1)
               for t in staging(kernel, variant))


def barriers(kernel: Kernel, variant: Variant) -> int:
    """Work-group barriers each work item of ``kernel`` in ``variant`` waits at: a group reduce's tree (one before
    it, one per halving) per reduce split across the group; a staged variant's two per tile of the reduce."""
    if variant.group > 1:
        reduces = len(kernel.stages) if kernel.stages else int(kernel.reduce is not None)
        return reduces * (variant.group.bit_length())
    if variant.smem and kernel.reduce is not None and staging(kernel, variant):
        return 2 * math.ceil(kernel.reduce.size / variant.smem)
    return 0


def block(variant: Variant) -> tuple[int, int] | None:
    """(rows, columns) of the 2-D block of work items one work-group covers, or None for row-major order.

    A variant with a register tile (``tile > 1``) and a power-of-two local size lays its work-group out as a
    block of the two tiled axes, as square as the size allows (256: 16 x 16), so the items of a group share
    the rows of one operand and the columns of the other in cache.
    """
    local = variant.local_size
    if variant.tile <= 1 or local is None or local < 4 or local & (local - 1):
        return None
    columns = 1 << (local.bit_length() // 2)
    return local // columns, columns


def blocks(kernel: Kernel, variant: Variant, shape: tuple[int, int]) -> tuple[int, int, int]:
    """(work-groups, blocks along the tile axis, blocks along the upcast axis) of a blocked launch."""
    plan = lanes(kernel, variant.upcast, variant.tile)
    last, before = upcast_axes(kernel)
    i, j = kernel.vars.index(before), kernel.vars.index(last)
    rows, columns = shape
    bp, bq = -(-plan.outer[i].size // rows), -(-plan.outer[j].size // columns)
    others = math.prod(v.size for n, v in enumerate(plan.outer) if n not in (i, j))
    return others * bp * bq, bp, bq


def launch_size(kernel: Kernel, variant: Variant) -> tuple[int, int | None]:
    """(global size, local size or None) of a 1-D launch of ``kernel`` in ``variant``."""
    if kernel.stages:
        return _row_launch_size(kernel, variant)
    if variant.group > 1:
        return kernel.numel * variant.group, variant.group
    local = variant.local_size
    shape = block(variant)
    if shape is not None and kernel.numel and variant_error(kernel, variant) is None:
        return blocks(kernel, variant, shape)[0] * local, local
    n = lanes(kernel, variant.upcast, variant.tile).numel if kernel.numel else 0
    return (n if local is None else math.ceil(n / local) * local), local


def _row_variant_error(kernel: Kernel, variant: Variant) -> str | None:
    """Why ``variant`` cannot apply to row kernel ``kernel``, or None."""
    v = variant
    if min(v.upcast, v.tile, v.unroll) < 1 or v.group < 0 or (v.local_size is not None and v.local_size < 1):
        return f"non-positive parameter in {v}"
    if (v.upcast, v.tile, v.unroll) != (1, 1, 1):
        return "a row kernel has no upcast, tile or unroll"
    if v.group > 1:
        if v.group & (v.group - 1):
            return f"group {v.group} is not a power of two"
        if v.local_size not in (None, v.group):
            return "group excludes another local size"
    return None


def _row_launch_size(kernel: Kernel, variant: Variant) -> tuple[int, int | None]:
    """(global size, local size or None): one work item, or one work-group of ``group`` items, per row."""
    if variant.group > 1:
        return kernel.numel * variant.group, variant.group
    local = variant.local_size
    return (kernel.numel if local is None else math.ceil(kernel.numel / local) * local), local

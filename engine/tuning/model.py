"""A cost model of variants: predicted seconds for untimed candidates (search order) and for runs without tuning.

A roofline refined by what a variant changes: the number of work items (too
few cannot fill the device: a reduce to one point on one work item runs on one
lane; a CPU runtime runs a work-group on one thread and vectorises across its
work items, so it fills with far fewer than a GPU), the load instructions a
work item issues (lanes of an upcast or tile share loads; on a CPU those with
the same index terms share vector loads, on a GPU each lane's bytes count; one
that neighbouring work items do not read side by side costs a load per lane on
a CPU, a memory sector per item on a GPU), and a per-work-item overhead (index
arithmetic).  A local-memory (``smem``) variant
reads its staged operands from global memory once per work-group (each item
its share of the tiles, vectorised) and from local memory per lane step
(aligned vector reads, cheaper than a cached global load).  On a CPU a row
kernel's loops are charged as scalar code (see ``predict``).  It ranks
candidates; ``engine.tuning.calibrate`` fits it to each device.  Host devices (numpy, blas) use their own ``estimate``.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable

from engine.devices.base import GPU_GROUPS, GPU_THREADS, Device, Nominal
from engine.egraph.egraph import Scalar
from engine.kernel.cost import work
from engine.kernel.index import Var
from engine.kernel.ir import Const, Kernel, Load, schedule
from engine.kernel.lanes import dependent, flat_reduce, lanes, rewrite, unroll, upcast_axes
from engine.kernel.schedule import DEFAULT_VARIANT, Variant, block, launch_size, staging

_ITEM_OPS = 12
"""Scalar ops of per-work-item overhead (index decomposition, bounds)."""
GATHER = 8
"""On a GPU, elements fetched per work item for a load whose neighbouring items read in different memory
sectors: a sector of 32 bytes each."""
CPU_GATHER = 8
"""On a CPU (whose OpenCL runtime vectorises across work items), load instructions for each element of a load
that neighbouring items do not read side by side: a scalar load per lane of a 256-bit vector of 4-byte floats,
LLVM's preferred width on AVX-512 CPUs (RESULTS.md, "Each kernel's first touch timed; GPU and PoCL loads counted
as fetched")."""
BROADCAST = 0.25
"""On a GPU, elements fetched per work item for a load every item of a warp reads alike (one fetch per warp)."""
_LOCAL_READ = 0.5
"""A local-memory vector read, in global load instructions."""


def load_instructions(kernel: Kernel, variant: Variant, gpu: bool = False) -> tuple[float, int]:
    """(load instructions per work item, outputs per work item) of ``kernel`` in ``variant``; on a ``gpu``, in
    elements fetched (see ``_vector_count``)."""
    if kernel.stages:  # a row per work item, or per work-group (its loops strided over the group)
        share = max(variant.group, 1)
        count = 0.0
        for roots, variables, size in kernel.row_loops():
            inner = dependent(roots, variables)
            loads = [e for e in schedule(roots) if isinstance(e, Load)]
            count += sum(e in inner for e in loads) * math.ceil(size / share) + sum(e not in inner for e in loads)
        return count, math.ceil(kernel.row_size / share)
    if variant.group > 1 and kernel.reduce is not None:
        flat, sub = flat_reduce(kernel.reduce.vars)
        (body,) = rewrite([kernel.reduce.body], sub)
        inner = dependent([body], {flat})
        loads = [e for e in schedule([body]) if isinstance(e, Load)]
        per = sum(1 for e in loads if e in inner) * kernel.reduce.size / variant.group
        return per + sum(1 for e in loads if e not in inner) + 1, 1
    plan = lanes(kernel, variant.upcast, variant.tile)
    fastest = next((v for v in reversed(plan.outer) if v.size > 1), None)  # neighbouring work items differ in it

    def vectors(loads: list[Load]) -> float:
        return _vector_count(loads, fastest, gpu)

    outs = [e for lane in plan.lanes for e in rewrite(list(kernel.outputs), lane.subst)]
    count = float(vectors([e for e in schedule(outs) if isinstance(e, Load)]))
    red = kernel.reduce
    if red is not None:
        tiles = staging(kernel, variant)
        staged = {t.load: Const(Scalar(0, t.load.dtype), t.load.dtype) for t in tiles}  # counted below instead
        bodies = [rewrite([red.body], lane.subst, replace=staged)[0] for lane in plan.lanes]
        if tiles:
            rows, columns = block(variant) or (1, 1)
            last, _ = upcast_axes(kernel)
            for t in tiles:
                lanes_along = variant.upcast if t.axis == last else variant.tile
                per_step = t.width / (rows * columns * t.vector) + _LOCAL_READ * math.ceil(lanes_along / 4)
                count += per_step * red.size
        if not red.vars:
            return count + vectors([e for e in schedule(bodies) if isinstance(e, Load)]), len(plan.lanes)
        *outer, last = red.vars
        main, mains, rest, _ = unroll(last, variant.unroll)
        steps = [b for s in mains for b in rewrite(bodies, s)]
        inner = dependent(steps, {*outer, main})
        loads = [e for e in schedule(steps) if isinstance(e, Load)]
        outer_iters = math.prod(v.size for v in outer)
        count += vectors([e for e in loads if e in inner]) * outer_iters * main.size
        count += vectors([e for e in loads if e not in inner])
        tail = dependent(bodies, set(red.vars))
        count += vectors([e for e in schedule(bodies) if isinstance(e, Load) and e in tail]) * outer_iters * rest.size
    return count, len(plan.lanes)


def _vector_count(loads: list[Load], fastest: Var | None = None, gpu: bool = False) -> float:
    """Load instructions for ``loads``, neighbouring work items ``fastest`` apart.  On a CPU, lanes of a buffer
    with the same index terms share vector loads (up to 4 lanes each), and each lane of a load that neighbouring
    items do not read side by side counts ``CPU_GATHER``.  On a GPU, what counts is the bytes a warp fetches, so
    each lane counts; a run of consecutive lanes that neighbouring items read in different memory sectors counts
    a sector's worth (``GATHER``), and one they all read alike (a broadcast) ``BROADCAST``."""
    groups: dict[tuple, set[int]] = {}
    for e in loads:
        groups.setdefault((e.input, e.index.terms, e.clamped), set()).add(e.index.const)
    count = 0.0
    for (_, terms, _), consts in groups.items():
        stride = abs(dict(terms).get(fastest, 0)) if fastest is not None else 1
        if not gpu:
            count += len(consts) * CPU_GATHER if stride > 1 else math.ceil(len(consts) / 4)
            continue
        for n in _runs(sorted(consts)):
            count += n * BROADCAST if stride == 0 else max(n, GATHER) if stride > n else n
    return count


def _runs(values: list[int]) -> list[int]:
    """Lengths of the runs of consecutive integers in sorted ``values``."""
    runs = [1]
    for a, b in itertools.pairwise(values):
        if b == a + 1:
            runs[-1] += 1
        else:
            runs.append(1)
    return runs


def predict(kernel: Kernel, device: Device, variant: Variant = DEFAULT_VARIANT) -> float:
    """Predicted seconds of one launch of ``kernel`` in ``variant`` on ``device``: a work-item roofline on its
    ``nominal`` speeds, or its own ``predict`` when it has none."""
    nominal = device.nominal
    if nominal is None or kernel.numel == 0:
        return device.predict(kernel, variant)
    gpu = device.is_gpu
    units = nominal.units
    items, local = launch_size(kernel, variant)
    items = max(items, 1)
    w = work(kernel)
    loads, _ = load_instructions(kernel, variant, gpu)
    itemsize = max((b.dtype.itemsize for b in kernel.inputs), default=4)
    cache_bandwidth = nominal.bandwidth * (8 if gpu else 4)
    ops = w.ops + items * _ITEM_OPS + (items * loads if variant.group > 1 else 0)
    if kernel.stages and not gpu:
        # a CPU runtime (PoCL) vectorises across work items, not a loop inside one: a row kernel's ops (all in
        # its loops) run one lane wide (slower than the unfused chain, whose output kernel vectorises: RESULTS.md)
        ops *= nominal.lanes
    memory = max(w.bytes / nominal.bandwidth, items * loads * itemsize / cache_bandwidth)
    if gpu:
        seconds = max(memory, ops / nominal.throughput) / min(1.0, items / (units * GPU_THREADS))
        if variant.local_size is not None and variant.local_size < 64:
            seconds *= 64 / variant.local_size  # small work-groups leave SIMD lanes idle
    else:  # a thread runs a work-group, vectorised across its work items: too few leave threads and lanes idle
        # (with no local size, the runtime picks the groups: a few hundred items may make one group, one thread)
        groups = math.ceil(items / local) if local else runtime_groups(items, nominal)
        threads = groups / (units * math.ceil(groups / units))  # the last round of groups may leave threads idle
        vectors = threads if kernel.stages else min(threads, items / (units * nominal.lanes))  # rows: scalar above
        seconds = max(memory / threads, ops / nominal.throughput / vectors)
    return nominal.overhead + seconds


def group_rounds(kernel: Kernel, variant: Variant, device: Device) -> int:
    """Rounds of work-groups a GPU runs ``kernel`` in (``variant``'s groups, as many at once as its compute units
    hold: at most ``GPU_THREADS`` items and ``GPU_GROUPS`` groups each); each round waits at every barrier."""
    items, local = launch_size(kernel, variant)
    local = local or 1
    held = device.compute_units * max(1, min(GPU_THREADS // local, GPU_GROUPS))
    return math.ceil(math.ceil(items / local) / held)


@functools.lru_cache(maxsize=4096)
def runtime_groups(items: int, nominal: Nominal) -> int:
    """Work-groups a CPU runtime (PoCL) makes of ``items`` when the launch gives no local size: the largest
    multiple of the grain (the preferred multiple's common divisor with ``items``) that divides ``items``, up to
    ``max_group``; then split to give every compute unit one while they keep 4 preferred multiples or more."""
    grain = math.gcd(nominal.group_multiple, items)
    local = max(k * grain for k in _divisors(items // grain) if k * grain <= max(nominal.max_group, grain))
    smallest = min(4 * nominal.group_multiple, nominal.max_group)
    while (split := nominal.units // (items // local)) > 1 and local >= split * smallest:
        split = next((s for s in range(split, 1, -1) if local % s == 0 and (local // s) % grain == 0), 1)
        if split == 1:
            break
        local //= split
    return items // local


def _divisors(n: int) -> list[int]:
    """Every divisor of ``n`` (a square root's twice)."""
    small = [k for k in range(1, math.isqrt(n) + 1) if n % k == 0]
    return small + [n // k for k in small]


def suggest(kernel: Kernel, device: Device, model: Callable[[Kernel, Device, Variant], float] | None = None) -> Variant:
    """The variant ``model`` (default: this roofline) likes best among the seeds and their neighbours."""
    model = model or predict
    return min(candidates(kernel, device), key=lambda v: (model(kernel, device, v), v.tag), default=DEFAULT_VARIANT)


def candidates(kernel: Kernel, device: Device) -> list[Variant]:
    """The seeds and their neighbours that ``device`` can run (the default alone on devices without variants)."""
    from engine.tuning.space import neighbours, seeds

    if not device.tunable:
        return [DEFAULT_VARIANT]
    pool = [*device.seeds(kernel), *seeds(kernel, device.is_gpu)]
    pool += [n for v in list(pool) for n in neighbours(kernel, v)]
    return [v for v in dict.fromkeys(pool) if device.variant_error(kernel, v) is None]

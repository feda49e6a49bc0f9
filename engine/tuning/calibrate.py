"""The cost model calibrated per device: the roofline of ``model.predict`` fitted to what the device measured.

    predicted = overhead + factor x work part of the roofline + evaluations x cost, per transcendental op

``overhead`` is the device's measured launch cost.  ``factor`` starts from a level: the geometric mean of
measured/roofline ratios of the device's kernels, shrunk into that of kernels of its shape (``elementwise``,
``transcendental``, ``reduce``, ``matmul``, ``row``), shrunk into that of that shape run in the variant's family
(``family``: a split reduce, operands staged in local memory, a register tile, an unrolled loop, plain; their
speeds next to the roofline differ by several times on CPU runtimes and GPUs); each level is shrunk towards the
one above it (a prior worth ``PRIOR`` observations), so one noisy trial does not swing it.  Once variants of a kernel are timed, each one predicts the
others from its own measured time, moved by what the model says the change is worth: the levels' difference and
the roofline's ratio raised to a ``slope`` fitted per shape over pairs of timed variants (a runtime can spread
variants wider or narrower than the roofline does: one kernel-wide factor, as before, took on the first variant's
efficiency and mispredicted the next ones; see ``Calibration.factor``).  The roofline counts every op alike, but a
runtime's ``erf`` or ``tanh`` can cost tens of adds (PoCL's 20x an ``exp2`` kernel's time): ``ops`` is each
transcendental op's measured cost per evaluation beyond an add's (which the roofline covers).

Three measured terms follow what the micro-benchmarks of one size missed.  ``parallel``: a launch that wakes
several threads (``Device.workers``) costs more than the single-threaded tiny launch that measures ``overhead``
(on a loaded machine, a whole scheduler slice waiting for a descheduled thread).  ``stream``: a kernel whose
working set fits in the last-level cache (``cache``) stays there from one trial launch to the next and runs
several times faster per byte than one that streams from memory, so fits are kept as if cached and ``memory``
scales a kernel by how much of its working set misses.  ``bandwidth``: a plan's launch reads its inputs from
memory (a program input, an upload, an output of launches ago) even where its trials found them cached, so it
takes at least their bytes at the rate the device streams from memory (on a CPU, timed with its buffers pushed out
of the caches first: a last-level cache of hundreds of MiB keeps the whole micro-benchmark from launch to launch).
On a loaded machine a launch on several threads may wait a scheduler slice for a descheduled one: ``parallel``
(from median launches) charges that wait, so the micro-benchmarks' work, ``stream`` and ``bandwidth`` come from
their best launches, less what those paid.

A device is fitted by micro-benchmarks on first use (``benchmark``: a tiny launch for the overhead, a large
copy-like kernel, a transcendental one in the cache, a reduce and a matmul, each in the best predicted variants of
its two best predicted families and of the default's; a copy an eighth of the cache's size against the large one,
for ``stream``; two small copies on several threads, for ``parallel``; on a runtime whose barriers are loops and on
a GPU, a group reduce against a copy, for ``barrier``; then one small kernel per transcendental op), and every
measured trial and executed plan step refits it (``observe``).  Trials time launches on output buffers they reuse,
but a plan writes each output into a freshly allocated buffer, whose first touch (page faults) costs per byte;
``fresh`` is that cost, measured by the large copy-like micro-benchmark (launches on fresh and on reused outputs,
interleaved) and then by executed plans' launches into large host outputs (``observe_touch``), and
``output_cost`` charges it and the ``bandwidth`` floor to a plan's launch.  Fits are kept per device and driver in
``calibration.json`` beside ``links.json``.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import statistics
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engine.devices.base import Device
from engine.fileio import CacheWarning, write_atomic
from engine.kernel.cost import op_counts
from engine.kernel.index import Var, add, flatten, scale, var
from engine.kernel.ir import HOST, Acc, Buffer, Kernel, Load, Op, Reduce, schedule
from engine.kernel.lanes import upcast_axes
from engine.kernel.schedule import DEFAULT_VARIANT, Variant, barriers, launch_size
from engine.program.dtypes import DType
from engine.tuning.cache import default_dir, driver
from engine.tuning.measure import always_fresh
from engine.tuning.model import group_rounds
from engine.tuning.model import predict as roofline

PRIOR = 2.0
"""Weight, in observations, of the level above when a level's factor is fitted."""
TRANSCENDENTAL = frozenset({"exp2", "log2", "sin", "cos", "sqrt", "recip", "exp", "log", "tanh", "erf", "pow"})
FORMAT = 6
"""Of ``calibration.json``: 2 added first-touch and op costs and the variant families, 3 per-variant kernel fits,
slopes, and the thread wake-up and cache terms, 4 the barrier term, 5 the barrier term on GPUs, 6 the first-touch
observations (``touches``) in place of one measured cost."""
TOUCHES = 9
"""First-touch observations kept per device (the oldest plan's go first; the micro-benchmark's stays)."""
NEAR = 0.5
"""Weight of a timed variant of the same kernel per parameter in which it differs from the one predicted."""
SLOPE_RANGE = 4.0
"""The fitted slope stays within 1/SLOPE_RANGE..SLOPE_RANGE (a few noisy pairs must not invert the roofline)."""
KERNEL_LIMIT = 2000
"""Per-kernel fits kept per device (the oldest are dropped first)."""


def nominal_overhead(device: Device) -> float:
    """The launch overhead the device's nominal roofline includes (subtracted before scaling)."""
    return float(device.launch_overhead)


def distance(a: Variant, b: Variant) -> int:
    """How many of the variant parameters differ between ``a`` and ``b`` (one search action moves one)."""
    return sum(getattr(a, f) != getattr(b, f) for f in ("local_size", "upcast", "tile", "unroll", "group", "smem"))


def family(variant: Variant) -> str:
    """The code-generation family of ``variant`` whose efficiency is fitted together (per kernel shape)."""
    if variant.group > 1:
        return "group"
    if variant.smem:  # on a GPU, operands staged in local memory run several times faster than register tiles
        return "staged"
    if variant.upcast * variant.tile > 1:
        return "tiled"
    return "unrolled" if variant.unroll > 1 else "plain"


def shape(kernel: Kernel) -> str:
    """The shape class of ``kernel`` whose efficiency is fitted together."""
    if kernel.stages:
        return "siblings" if kernel.siblings else "row"
    if kernel.reduce is not None:
        return "matmul" if upcast_axes(kernel)[1] is not None and kernel.reduce.size > 1 else "reduce"
    if any(isinstance(e, Op) and e.op in TRANSCENDENTAL for e in schedule(kernel.exprs())):
        return "transcendental"
    return "elementwise"


@dataclass
class Fit:
    """A running geometric mean: the sum of log ratios and their count."""

    log_sum: float = 0.0
    count: float = 0.0

    def factor(self, prior: float) -> float:
        """The fitted factor, shrunk towards ``prior`` (a factor) by PRIOR observations' weight."""
        return math.exp((self.log_sum + PRIOR * math.log(prior)) / (self.count + PRIOR))

    def add(self, ratio: float) -> None:
        self.log_sum += math.log(ratio)
        self.count += 1


@dataclass
class Timed(Fit):
    """One variant's fit for one kernel, with the log of its roofline work part (where slopes measure from)."""

    log_work: float = 0.0


@dataclass
class Calibration:
    """One device's fitted parameters (see the module docstring)."""

    overhead: float
    fresh: float = 0.0
    """Seconds per byte a launch spends more writing a freshly allocated output than a reused one: the median of
    ``touches`` when this calibration was loaded or fitted (a compilation keeps the value it planned with)."""
    device: Fit = field(default_factory=Fit)
    shapes: dict[str, Fit] = field(default_factory=dict)
    kernels: dict[str, dict[Variant, Timed]] = field(default_factory=dict)
    """By ``kernel.key``, then variant: the measured log ratios of each variant timed."""
    observations: int = 0
    families: dict[str, Fit] = field(default_factory=dict)
    """By ``shape/family``."""
    ops: dict[str, float] = field(default_factory=dict)
    """Seconds per evaluation of each transcendental op beyond an add's (measured)."""
    parallel: float = 0.0
    """Seconds a launch that wakes several threads (``Device.workers``) spends more than ``overhead`` (measured:
    waking them, and on a loaded machine waiting for one that was descheduled)."""
    cache: float = 0.0
    """Bytes of the last-level cache in front of the device's memory (0: unknown, no ``stream`` term)."""
    stream: float = 1.0
    """How many times slower per byte a kernel whose working set exceeds ``cache`` runs than one that fits in it
    (measured: the copy-like micro-benchmark out of the cache against one that fits)."""
    bandwidth: float = 0.0
    """Bytes per second the large copy-like micro-benchmark streams from memory, out of every cache (0: not
    measured): the rate a plan's launch reads its inputs at, at best (see ``output_cost``)."""
    barrier: float = 0.0
    """Seconds per work-group barrier waited at (``schedule.barriers``): by each work item, on a runtime that runs
    a barrier as a loop over the group's items (``Device.barrier_loops``: a CPU's OpenCL); by each round of the
    work-groups a GPU holds at once (``model.group_rounds``) in a group reduce's tree, whose steps wait on each
    other (a staged GEMM's barriers overlap other groups' work: not charged); 0 elsewhere."""
    slopes: dict[str, list[float]] = field(default_factory=dict)
    """By shape: sums over pairs of timed variants of one kernel of (modelled log ratio x measured log ratio,
    modelled log ratio squared), whose quotient is ``slope``."""
    touches: list[float] = field(default_factory=list)
    """Seconds per byte of fresh outputs' first touches observed: the micro-benchmark's first, then those of
    executed plans' launches (at most ``TOUCHES``).  The micro-benchmark drops each output it makes; a plan's caller
    keeps them, and on some hosts that costs several times more per byte (benchmarks/RESULTS.md, "The GPU host
    after the change")."""

    def observe_touch(self, seconds_per_byte: float) -> None:
        """Keep a plan launch's observed first-touch cost for the calibrations loaded after this one."""
        self.touches = self.touches[:1] + self.touches[1:][-(TOUCHES - 2):] + [seconds_per_byte]

    def memory(self, kernel: Kernel) -> float:
        """``stream`` raised to the fraction of ``kernel``'s working set that misses the cache: 0 up to the cached
        copy's working set that ``stream`` was measured on (about an eighth of the cache), 1 at twice the cache or
        more, log-linear between, between the two sizes measured (trials launch on the same buffers, so a working
        set that fits stays cached from one launch to the next; the fits are kept as if in the cache)."""
        return self.stream ** self.missed(kernel)

    def missed(self, kernel: Kernel) -> float:
        """The fraction of ``kernel``'s working set taken to miss the cache from one launch to the next (see
        ``memory``)."""
        if self.cache <= 0:
            return 1.0
        low, high = _cached_copy(self.cache) * 12, 2 * self.cache  # 12: the copy's bytes per element
        return min(max(math.log2(max(kernel.moved_bytes, 1) / low) / math.log2(max(high / low, 2)), 0.0), 1.0)

    def op_seconds(self, kernel: Kernel) -> float:
        """Seconds ``kernel``'s transcendental ops cost beyond the fitted roofline."""
        return sum(n * self.ops.get(op, 0.0) for op, n in op_counts(kernel).items())

    def level(self, kernel: Kernel, variant: Variant) -> float:
        """The factor of kernels like ``kernel`` in ``variant``'s family: the device's, its shape's, its family's."""
        f = self.device.factor(1.0)
        f = self.shapes.get(shape(kernel), Fit()).factor(f)
        return self.families.get(f"{shape(kernel)}/{family(variant)}", Fit()).factor(f)

    def slope(self, kernel: Kernel) -> float:
        """How many times the log of the roofline's ratio between two variants of one kernel of ``kernel``'s shape
        the measured log ratio is (1: as the roofline says), fitted over pairs of timed variants (prior: 1 with
        PRIOR weight), within 1/SLOPE_RANGE..SLOPE_RANGE."""
        sxy, sxx = self.slopes.get(shape(kernel), (0.0, 0.0))
        return min(max((sxy + PRIOR) / (sxx + PRIOR), 1 / SLOPE_RANGE), SLOPE_RANGE)

    def factor(self, kernel: Kernel, variant: Variant = DEFAULT_VARIANT, work: float = 1.0) -> float:
        """``level`` times what this kernel's own trials say of it.  Each timed variant ``u`` predicts ``variant``
        from its measured time, moved by ``slope`` times the modelled change (level and roofline, ``work`` being
        ``variant``'s work part).  The kernel's offset (its size and cache behaviour, common to its variants) is
        their mean, shrunk to 0 by PRIOR observations; near ``variant`` each other variant weighs NEAR to the
        power of the parameters that differ (what the roofline misses of one action), ``variant``'s own
        measurements one each (so they prevail as they accumulate), shrunk to that offset by PRIOR."""
        level = self.level(kernel, variant)
        fits = {u: f for u, f in self.kernels.get(kernel.key, {}).items() if f.count}
        if not fits:
            return level
        x = math.log(level * work)
        bend = self.slope(kernel) - 1
        guess = {}
        for u, f in fits.items():
            xu = math.log(self.level(kernel, u)) + f.log_work
            guess[u] = f.log_sum / f.count + f.log_work - xu + bend * (x - xu)  # log(variant's time / level's)
        count = sum(f.count for f in fits.values())
        offset = sum(fits[u].count * g for u, g in guess.items()) / (count + PRIOR)
        weights = {u: fits[u].count if u == variant else NEAR ** distance(u, variant) for u in fits}
        near = (sum(weights[u] * g for u, g in guess.items()) + PRIOR * offset) / (sum(weights.values()) + PRIOR)
        return level * math.exp(near)

    def to_json(self) -> dict[str, Any]:
        return {"overhead": self.overhead, "touches": self.touches, "observations": self.observations,
                "parallel": self.parallel, "cache": self.cache, "stream": self.stream,
                "bandwidth": self.bandwidth, "barrier": self.barrier,
                "device": [self.device.log_sum, self.device.count],
                "shapes": {k: [f.log_sum, f.count] for k, f in self.shapes.items()},
                "families": {k: [f.log_sum, f.count] for k, f in self.families.items()}, "ops": self.ops,
                "kernels": {k: [[v.to_json(), f.log_sum, f.count, f.log_work] for v, f in fits.items()]
                            for k, fits in self.kernels.items()}, "slopes": self.slopes}

    @staticmethod
    def from_json(data: dict[str, Any]) -> Calibration:
        def fit(pair: Any) -> Fit:
            log_sum, count = (float(x) for x in pair)
            if not (math.isfinite(log_sum) and math.isfinite(count) and count >= 0):
                raise ValueError(f"bad fit {pair}")
            return Fit(log_sum, count)

        overhead = float(data["overhead"])
        touches = [float(x) for x in data["touches"]] if "touches" in data else [float(data.get("fresh", 0.0))]
        fresh = statistics.median(touches) if touches else 0.0  # a recording of format 5 or older keeps "fresh"
        parallel, cache, stream, bandwidth, barrier = (
            float(data.get(k, d)) for k, d in
            (("parallel", 0.0), ("cache", 0.0), ("stream", 1.0), ("bandwidth", 0.0), ("barrier", 0.0)))
        ops = {str(k): float(v) for k, v in data.get("ops", {}).items()}
        terms = (overhead, *touches, parallel, cache, bandwidth, barrier, *ops.values())
        if not all(math.isfinite(x) and x >= 0 for x in terms) or not 1 <= stream < math.inf:
            raise ValueError(f"bad overhead {overhead}, first-touch cost {fresh}, thread wake-up {parallel}, cache "
                             f"{cache}, stream {stream}, bandwidth {bandwidth}, barrier {barrier} or op costs {ops}")
        def timed(entry: Any) -> tuple[Variant, Timed]:
            variant, log_sum, count, log_work = entry
            f = fit([log_sum, count])
            if not math.isfinite(float(log_work)):
                raise ValueError(f"bad work {log_work}")
            return Variant.from_json(variant), Timed(f.log_sum, f.count, float(log_work))

        kernels = {k: dict(timed(e) for e in fits) for k, fits in data["kernels"].items()}
        slopes = {str(k): [float(a), float(b)] for k, (a, b) in data.get("slopes", {}).items()}
        if not all(math.isfinite(a) and b >= 0 for a, b in slopes.values()):
            raise ValueError(f"bad slopes {slopes}")
        return Calibration(overhead, fresh, fit(data["device"]), {k: fit(v) for k, v in data["shapes"].items()},
                           kernels, int(data.get("observations", 0)),
                           {k: fit(v) for k, v in data.get("families", {}).items()}, ops, parallel, cache, stream,
                           bandwidth, barrier, slopes, touches)


class Calibrations:
    """Calibrations by device, read from and written to ``calibration.json`` (None: kept in memory only)."""

    def __init__(self, directory: Path | str | None = None, persist: bool = True, fit: bool = True) -> None:
        """``persist``: read and write ``calibration.json``; ``fit``: run the micro-benchmarks for a device
        that has no stored calibration (else it starts nominal)."""
        self.fit = fit
        self.path = Path(directory if directory is not None else default_dir()) / "calibration.json" if persist else None
        self._on_disk: dict[str, Any] | None = None
        self.by_device: dict[str, Calibration] = {}
        """Loaded or fitted calibrations by device name."""
        self._devices: dict[str, Device] = {}

    def _key(self, device: Device) -> str:
        return f"{device.name}|{driver(device)}"

    def _read(self) -> dict[str, Any]:
        if self.path is None:
            return {}
        try:
            data = json.loads(self.path.read_text())
            if isinstance(data, dict) and data.get("format") != FORMAT:
                return {}  # fits of an older model (without the terms measured now): calibrating again
            devices = data["devices"]
            if not isinstance(devices, dict):
                raise ValueError("'devices' is not an object")
            return devices
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, KeyError, TypeError) as e:
            warnings.warn(CacheWarning(f"calibration {self.path} is unreadable ({e}); calibrating again"),
                          stacklevel=3)
            return {}

    def get(self, device: Device) -> Calibration:
        """``device``'s calibration: as stored, else fitted by micro-benchmarks (``fit``) or nominal."""
        if device.name in self.by_device:
            return self.by_device[device.name]
        self._devices[device.name] = device
        if self._on_disk is None:
            self._on_disk = self._read()
        stored = self._on_disk.get(self._key(device))
        calibration = None
        if isinstance(stored, dict):
            try:
                calibration = Calibration.from_json(stored)
            except (KeyError, TypeError, ValueError) as e:
                warnings.warn(CacheWarning(f"calibration of {device.name} in {self.path} is malformed ({e})"),
                              stacklevel=2)
        if calibration is None:
            calibration = Calibration(nominal_overhead(device), cache=cache_bytes(device))
            self.by_device[device.name] = calibration
            if self.fit:
                benchmark(device, self)
                self.save(device)
        self.by_device[device.name] = calibration
        return calibration

    def predict(self, kernel: Kernel, device: Device, variant: Variant = DEFAULT_VARIANT) -> float:
        """Calibrated seconds of one launch of ``kernel`` in ``variant`` on ``device``."""
        c = self.get(device)
        part = _work_part(kernel, device, variant)
        return _fixed(c, kernel, device, variant) + c.factor(kernel, variant, part) * c.memory(kernel) * part

    def output_cost(self, kernel: Kernel, device: Device, seconds: float = 0.0, touch: float | None = None) -> float:
        """Seconds a plan's launch of ``kernel`` spends more than a trial that took ``seconds``: first touches of
        its fresh outputs (``touch`` where measured, else priced per byte); and, where the trial ran faster than
        its inputs stream from memory (launch after launch on the same buffers, it found them cached), the rest
        of that streaming time: a plan's launch reads them from memory (a program input, an upload, a kernel's
        output some launches ago)."""
        fresh = self.get(device).fresh * kernel.output_bytes if touch is None else touch
        return fresh + self._streaming(kernel, device, seconds)

    def _streaming(self, kernel: Kernel, device: Device, seconds: float) -> float:
        """Seconds ``kernel``'s inputs take to stream from memory beyond a trial's ``seconds``."""
        c = self.get(device)
        stream = kernel.input_bytes / c.bandwidth if c.bandwidth > 0 else 0.0
        return max(stream - seconds, 0.0)

    def observe_first_touch(self, kernel: Kernel, device: Device, trial: float, seconds: float) -> None:
        """A plan's launch of ``kernel`` took ``seconds`` where its trials took ``trial``: if its outputs are host
        memory of always new pages, what it paid more than the trial and its inputs' streaming, per output byte,
        is an observed first touch (``Calibration.touches``)."""
        if always_fresh(kernel, device):
            nbytes = kernel.output_bytes
            extra = seconds - trial - self._streaming(kernel, device, trial)
            self.get(device).observe_touch(max(extra, 0.0) / nbytes)

    def observe(self, kernel: Kernel, device: Device, variant: Variant, seconds: float) -> None:
        """Refit ``device`` with a measured launch (less its fixed costs, as if cached): this variant's fit always;
        the shape's (in the variant's family and in all), the device's and the shape's slope (a pair with each
        other variant of the kernel timed) when the work, not the launch overhead, dominates the time."""
        c = self.get(device)
        part = _work_part(kernel, device, variant)
        if not (math.isfinite(seconds) and seconds > 0 and part > 0):
            return
        ratio = max(seconds - _fixed(c, kernel, device, variant), 0.1 * seconds) / part / c.memory(kernel)
        if kernel.key not in c.kernels and len(c.kernels) >= KERNEL_LIMIT:
            del c.kernels[next(iter(c.kernels))]  # the oldest
        fits = c.kernels.setdefault(kernel.key, {})
        if seconds > 2 * c.overhead:
            x = math.log(c.level(kernel, variant) * part)  # modelled, before this refit
            pair = c.slopes.setdefault(shape(kernel), [0.0, 0.0])
            for u, f in fits.items():
                if u != variant and f.count:
                    xu = math.log(c.level(kernel, u)) + f.log_work
                    pair[0] += (x - xu) * (math.log(ratio * part) - f.log_sum / f.count - f.log_work)
                    pair[1] += (x - xu) ** 2
            c.shapes.setdefault(shape(kernel), Fit()).add(ratio)
            c.families.setdefault(f"{shape(kernel)}/{family(variant)}", Fit()).add(ratio)
            c.device.add(ratio)
        fits.setdefault(variant, Timed(log_work=math.log(part))).add(ratio)
        c.observations += 1

    def save(self, device: Device | None = None) -> None:
        """Write the calibrations (merged over what is on disk); a failure is reported, never raised."""
        if self.path is None:
            return
        data = self._read()
        devices = [device] if device is not None else list(self._devices.values())
        data.update({self._key(d): self.by_device[d.name].to_json() for d in devices})
        self._on_disk = data
        try:
            write_atomic(self.path, json.dumps({"format": FORMAT, "devices": data}, indent=1, sort_keys=True))
        except OSError as e:
            warnings.warn(CacheWarning(f"calibration {self.path} cannot be written ({e}); kept in memory"),
                          stacklevel=2)


def _fixed(c: Calibration, kernel: Kernel, device: Device, variant: Variant, wake: float | None = None) -> float:
    """The seconds of a launch the factor does not scale: the launch, waking threads (``wake``, default
    ``parallel``: a median launch's), transcendental ops, barriers."""
    woken = (c.parallel if wake is None else wake) if device.workers(kernel, variant) > 1 else 0.0
    return c.overhead + woken + c.op_seconds(kernel) + _barrier_seconds(c, kernel, device, variant)


def _barrier_seconds(c: Calibration, kernel: Kernel, device: Device, variant: Variant) -> float:
    """What ``kernel``'s barriers cost in ``variant`` (``Calibration.barrier``)."""
    if not c.barrier or not (device.barrier_loops or variant.group > 1):
        return 0.0
    waits = barriers(kernel, variant)  # most launches wait at none: no launch size needed
    return c.barrier * waits * _waiting(kernel, variant, device) if waits else 0.0


def _waiting(kernel: Kernel, variant: Variant, device: Device) -> int:
    """What pays at each barrier of ``kernel`` in ``variant``: every work item on a runtime whose barriers are
    loops, every round of the work-groups a GPU holds at once."""
    return launch_size(kernel, variant)[0] if device.barrier_loops else group_rounds(kernel, variant, device)


def _work_part(kernel: Kernel, device: Device, variant: Variant) -> float:
    """The roofline's seconds without its nominal launch overhead (what the factor scales)."""
    return max(roofline(kernel, device, variant) - nominal_overhead(device), 1e-9)


# -- micro-benchmarks ----------------------------------------------------------------------------------------

F32 = DType.F32


def _elementwise(n: int, op: str) -> Kernel:
    """``op`` of two inputs, or of one for a transcendental op or ``twice`` (``a + a``: an op probe's baseline, the
    same loads and stores as the probe); an unread input would count in the roofline's bytes and working set."""
    g = Var("g0", n)
    a, b = Load(0, var(g), n, F32), Load(1, var(g), n, F32)
    if op in TRANSCENDENTAL or op == "twice":
        body = Op(op, (a,), F32) if op in TRANSCENDENTAL else Op("add", (a, a), F32)
        return Kernel((Buffer((n,), F32),), (n,), (g,), None, (body,))
    return Kernel((Buffer((n,), F32), Buffer((n,), F32)), (n,), (g,), None, (Op(op, (a, b), F32),))


def row_sum(rows: int, cols: int) -> Kernel:
    """A micro-benchmark's reduce: the sum of each of ``rows`` rows of ``cols`` floats."""
    g, r = Var("g0", rows), Var("r0", cols)
    body = Load(0, add(scale(var(g), cols), var(r)), rows * cols, F32)
    return Kernel((Buffer((rows, cols), F32),), (rows,), (g,), Reduce("sum", (r,), body), (Acc(F32),))


def _matmul(n: int) -> Kernel:
    g0, g1, r = Var("g0", n), Var("g1", n), Var("r0", n)
    a = Load(0, flatten([var(g0), var(r)], (n, n)), n * n, F32)
    b = Load(1, flatten([var(r), var(g1)], (n, n)), n * n, F32)
    return Kernel((Buffer((n, n), F32), Buffer((n, n), F32)), (n, n), (g0, g1),
                  Reduce("sum", (r,), Op("mul", (a, b), F32)), (Acc(F32),))


def micro_kernels() -> list[Kernel]:
    """The micro-benchmarks: a tiny launch (overhead first), then one kernel per shape class."""
    return [_elementwise(256, "add"), _elementwise(LARGE, "add"), _elementwise(TRANSCENDENTAL_PROBE, "exp2"),
            row_sum(1024, 4096), _matmul(512)]


TRANSCENDENTAL_PROBE = 1 << 21
"""Elements of the transcendental micro-benchmark: 16 MiB in all, in a last-level cache of 32 MiB or more (a
working set near the cache's size is neither clearly cached nor streamed; the ``memory`` term guesses there)."""


LARGE = 1 << 24
"""Elements of the copy-like micro-benchmark: 64 MiB outputs, above glibc's largest mmap threshold (32 MiB), so a
fresh one is always new pages (a smaller one may reuse freed heap memory, whose first touch is already paid)."""


def benchmark(device: Device, calibrations: Calibrations) -> None:
    """Fit ``device``'s overhead, factors, first-touch and op costs by timing the micro-benchmarks it supports
    (about a second per device on an idle machine)."""
    from engine.tuning.measure import Bench

    c = calibrations.by_device[device.name]
    tiny, large = micro_kernels()[0].key, micro_kernels()[1].key
    kernels = {k: [DEFAULT_VARIANT] if k.key == tiny else family_variants(k, device)
               for k in micro_kernels() if device.supports(k)}
    probes = op_probes()
    device.compile_many([(k, v) for k, variants in kernels.items() for v in variants]  # one build of every one
                        + [(k, family_variants(probes[1], device)[0]) for k in probes])
    timed = []  # refits wait for the overhead and the cache term
    cold: tuple[Variant, float] | None = None  # the large copy's best launch from memory (CPUs only)
    for kernel, variants in kernels.items():
        try:
            bench = Bench(device, kernel, arrays=halves(kernel))
        except Exception:  # a device that cannot run a micro-benchmark keeps the nominal value for it
            continue
        try:
            for i, variant in enumerate(variants):
                try:
                    compiled = device.compile(kernel, variant)
                    outs = [device.alloc(b) for b in kernel.output_types]
                    timing = bench.time(compiled, outs, first=0.0, target=0.02, left=lambda: SLOW)
                    bench.free(outs)
                    if kernel.key == large and i == 0:
                        c.fresh = _first_touch(bench, compiled, FRESH_PAIRS)
                        c.touches = [c.fresh]
                        if not device.is_gpu:
                            cold = variant, _cold_launch(device, bench, compiled, COLD_LAUNCHES)
                except Exception:  # likewise for a variant it cannot build or run
                    continue
                if kernel.key == tiny:
                    c.overhead = min(timing.times)
                else:
                    timed.append((kernel, variant, timing.times))
        finally:
            bench.close()
    wake = 0.0  # the best launch's wake-up: what the best launches below paid
    with contextlib.suppress(Exception):  # a device that cannot run it wakes no threads at a cost
        c.parallel, wake = _wake_up(device, c)
    copies = [(v, times) for k, v, times in timed if k.key == large and len(times) >= 3]
    if copies:  # the best launch of the best variant, less what is not memory
        large_kernel = micro_kernels()[1]
        best = min(min(times) - _fixed(c, large_kernel, device, v, wake) for v, times in copies)
        if cold is not None:  # slower than any launch on buffers a large cache kept
            best = max(best, cold[1] - _fixed(c, large_kernel, device, cold[0], wake))
        c.bandwidth = large_kernel.moved_bytes / best if best > 0 else 0.0
        with contextlib.suppress(Exception):  # a device that cannot run it keeps no cache term
            _stream(device, c, micro_kernels()[1], copies, wake)
    if device.barrier_loops or device.is_gpu:
        with contextlib.suppress(Exception):  # a device that cannot run it keeps no barrier term
            c.barrier = _barrier_cost(device)
    for kernel, variant, times in timed:
        seconds = statistics.median(times)
        if device.workers(kernel, variant) > 1 and len(times) >= 3:
            # its work from the best launch (less what that launch paid to wake threads), plus a median launch's
            # wake-up: on a loaded machine the median may be mostly a wait, which ``parallel`` already charges
            seconds = min(seconds, min(times) - wake + c.parallel)
        calibrations.observe(kernel, device, variant, seconds)
    if device.supports(probes[0]):
        for op, kernel in zip(OP_PROBES, probes[1:]):
            c.ops[op] = 0.0
            with contextlib.suppress(Exception):  # an op the device cannot run costs nothing extra
                c.ops[op] = _op_cost(device, kernel, OP_PAIRS)


def _stream(device: Device, c: Calibration, large: Kernel, copies: list[tuple[Variant, tuple[float, ...]]],
            wake: float = 0.0) -> None:
    """Set ``stream`` from the copy-like kernel ``large`` (out of the cache; ``copies``: the times of
    its variants, each timed at least 3 times: a slow device's single launch pays its first touches) and one whose
    working set is about an eighth of the cache, in the best variant, each at its best launch (a launch that waited for
    a descheduled thread says nothing of the memory), less the launch and the best launch's wake-up (``wake``: a
    median launch's, ``parallel``, may be a scheduler slice that no best launch waited for).  It is not set
    when the cache is unknown or the cached copy takes less than twice those (a GPU's L2, or a loaded machine's
    stalled threads: they, not the memory, would be what was timed)."""
    from engine.tuning.measure import Bench

    if c.cache <= 0:
        return
    best = {v: min(times) for v, times in copies}
    variant = min(best, key=lambda v: (best[v] - _fixed(c, large, device, v, wake)) / _work_part(large, device, v))
    small = _elementwise(_cached_copy(c.cache), "add")
    bench = Bench(device, small, arrays=halves(small))
    outs = [device.alloc(b) for b in small.output_types]
    try:
        timing = bench.time(device.compile(small, variant), outs, first=0.0, target=0.01, repeats=(10, 30))
    finally:
        bench.free(outs)
        bench.close()
    fixed = {k: _fixed(c, k, device, variant, wake) for k in (large, small)}
    if min(timing.times) < 2 * fixed[small]:  # waking threads, not the memory, would be what was timed
        return
    seconds = {k: max(t - fixed[k], 1e-12) for k, t in ((large, best[variant]), (small, min(timing.times)))}
    per = {k: t / _work_part(k, device, variant) for k, t in seconds.items()}
    c.stream = min(max(per[large] / per[small], 1.0), STREAM_LIMIT)


def _cached_copy(cache: float) -> int:
    """Elements of the copy-like kernel that ``stream`` times in the cache: two inputs and an output of 4-byte
    floats, about an eighth of ``cache``; a power of two (a runtime picks a poor work-group size for a global size
    with small factors only)."""
    return 1 << max(int(math.log2(max(cache, 1) / 8 / 12)), 8)


def _barrier_cost(device: Device) -> float:
    """Seconds per barrier (``Calibration.barrier``): a group reduce whose every item loads one element (its time
    mostly the tree's barriers) against a copy of as many elements in work-groups of the same size, each at its
    best of ``BARRIER_LAUNCHES`` launches (interleaved so that load drifts cancel), less the roofline's difference
    between the two."""
    from engine.tuning.measure import Bench

    size, rows = (BARRIER_GROUP, BARRIER_ROWS) if device.barrier_loops else (GPU_BARRIER_GROUP, GPU_BARRIER_ROWS)
    group = Variant(group=size)
    tree, copy = row_sum(rows, size), _elementwise(rows * size, "twice")
    pairs = [(k, device.compile(k, v)) for k, v in ((tree, group), (copy, Variant(local_size=size)))]
    benches = [Bench(device, k, arrays=halves(k)) for k, _ in pairs]
    outs = [[device.alloc(b) for b in k.output_types] for k, _ in pairs]
    try:
        best = [math.inf, math.inf]
        for _ in range(BARRIER_LAUNCHES):
            for i, ((_, compiled), bench) in enumerate(zip(pairs, benches)):
                best[i] = min(best[i], device.launch(compiled, bench.inputs, outs[i]))
    finally:
        for bench, out in zip(benches, outs):
            bench.free(out)
            bench.close()
    work = _work_part(tree, device, group) - _work_part(copy, device, Variant(local_size=size))  # the copy's 2x bytes
    return max(best[0] - best[1] - work, 0.0) / (_waiting(tree, group, device) * barriers(tree, group))


BARRIER_GROUP = 64
"""Work-group size of the barrier micro-benchmark: the middle of the group sizes the tuner tries (PoCL's cost per
item and barrier differs with the group's size: RESULTS.md, "Barriers and thread fill on a CPU")."""
BARRIER_ROWS = 1024
"""Work-groups of the barrier micro-benchmark (65536 items, 7 barriers each)."""
GPU_BARRIER_GROUP = 1024
"""Work-group size of the barrier micro-benchmark on a GPU: the largest, whose tree is the longest."""
GPU_BARRIER_ROWS = 8192
"""Its work-groups: tens of rounds on a GPU of 100-odd compute units (8M items, 11 barriers each)."""
BARRIER_LAUNCHES = 7
"""Launches of each of its two kernels (the best counts)."""


def _wake_up(device: Device, c: Calibration) -> tuple[float, float]:
    """(``parallel``, the best launch's wake-up): of the smallest copy-like kernel that runs on several threads and
    one 4 times its size, the median launches ``t1`` and ``t4`` are ``overhead + parallel + work`` and
    ``... + 4 work``, so ``parallel`` is ``t1 - overhead - (t4 - t1) / 3`` (at least 0); the same of their best
    launches is what a best launch paid (on a loaded machine a median launch may wait a scheduler slice for a
    descheduled thread, the best one not); (0, 0) on a device that wakes none."""
    from engine.tuning.measure import Bench

    size = next((1 << n for n in range(8, 21, 2) if device.workers(_elementwise(1 << n, "add")) > 1), None)
    if size is None:
        return 0.0, 0.0
    timings = []
    for kernel in (_elementwise(size, "add"), _elementwise(4 * size, "add")):
        bench = Bench(device, kernel, arrays=halves(kernel))
        outs = [device.alloc(b) for b in kernel.output_types]
        try:
            # at least 10 launches: a loaded machine's waits come in bursts, and the best one must have waited none
            timings.append(bench.time(device.compile(kernel), outs, first=0.0, target=0.01, repeats=(10, 20)))
        finally:
            bench.free(outs)
            bench.close()
    (t1, t4), (b1, b4) = ((t.median for t in timings), (min(t.times) for t in timings))
    return max(t1 - c.overhead - (t4 - t1) / 3, 0.0), max(b1 - c.overhead - (b4 - b1) / 3, 0.0)


STREAM_LIMIT = 8.0
"""The most ``stream`` is taken to be: a last-level cache is a few times faster than memory, and a larger ratio is
a copy timed while other jobs took the memory bus (it would make every large kernel look slow)."""


def cache_bytes(device: Device) -> float:
    """The last-level cache in front of ``device``'s memory: the device's own ``cache_bytes`` if it says, else for
    a host device the CPUs' (``host_cache_bytes``); 0 when unknown, and for a host device without variants (its
    library, not one pass over the working set, decides what stays cached)."""
    own = getattr(device, "cache_bytes", None)
    if own is not None:
        return float(own)
    if device.pool != HOST or not device.tunable:  # numpy and BLAS run through libraries that block for the cache
        return 0.0
    return host_cache_bytes()


def host_cache_bytes() -> float:
    """The last-level caches of the CPUs this process may run on (as Linux lists them), each counted once (threads
    on several core complexes use all of theirs); 0 when unknown."""
    caches: dict[tuple[int, str], float] = {}  # by (level, the CPUs sharing it)
    for cpu in sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []:
        for index in Path(f"/sys/devices/system/cpu/cpu{cpu}/cache").glob("index*"):
            with contextlib.suppress(OSError, ValueError, KeyError):
                level, shared, size = ((index / f).read_text().strip() for f in ("level", "shared_cpu_list", "size"))
                caches[(int(level), shared)] = float(size[:-1]) * {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[size[-1]]
    if not caches:
        return 0.0
    last = max(level for level, _ in caches)
    return sum(size for (level, _), size in caches.items() if level == last)


class Evictor:
    """Writes more bytes than the CPUs' last-level caches hold (at most ``EVICT_LIMIT``), so that what the next
    timed run reads comes from memory."""

    def __init__(self) -> None:
        self.scratch = np.zeros(int(min(1.5 * host_cache_bytes(), EVICT_LIMIT)), np.uint8)

    def __call__(self) -> None:
        np.add(self.scratch, 1, out=self.scratch)


def op_probes() -> list[Kernel]:
    """The op-cost micro-benchmarks: ``a + a``, then one kernel per transcendental op, all of ``OP_PROBE`` elements
    and one input."""
    return [_elementwise(OP_PROBE, op) for op in ("twice", *OP_PROBES)]


OP_PROBE = 1 << 18
"""Elements of each transcendental op's micro-benchmark (1 MiB: its cost, not memory, dominates)."""
OP_PAIRS = 5
"""Pairs of launches (an op's probe, then an add's) behind each op's cost."""
OP_PROBES = ("exp2", "log2", "sin", "cos", "sqrt", "recip")
"""The transcendental ops kernels compute (``exp``, ``tanh``, ``erf`` are lowered to these and arithmetic)."""


def _op_cost(device: Device, kernel: Kernel, pairs: int) -> float:
    """Seconds per evaluation of ``kernel``'s one op more than an add's: the median difference of ``pairs``
    launches of each on the same buffers, interleaved so that load drifts cancel."""
    from engine.tuning.measure import Bench

    variant = family_variants(kernel, device)[0]
    op, add = (device.compile(k, variant) for k in (kernel, _elementwise(kernel.numel, "twice")))
    bench = Bench(device, kernel, arrays=halves(kernel))
    outs = [device.alloc(b) for b in kernel.output_types]
    try:
        device.launch(op, bench.inputs, outs)  # warm-ups
        device.launch(add, bench.inputs, outs)
        extra = [-device.launch(add, bench.inputs, outs) + device.launch(op, bench.inputs, outs) for _ in range(pairs)]
    finally:
        bench.free(outs)
        bench.close()
    return max(statistics.median(extra), 0.0) / kernel.numel


def family_variants(kernel: Kernel, device: Device) -> list[Variant]:
    """The nominal model's best variant of ``kernel`` on ``device`` in each family it can run, best first (at
    most FAMILIES), then that of the default's family if it is not among them: the tuner times its best first,
    and a plan launches the default where it was not tuned (a family never timed takes its shape's factor, which
    the others set; a CPU's serial reduce ran 4x slower than that: RESULTS.md, "Barriers and thread fill on a
    CPU")."""
    from engine.tuning.model import candidates, predict

    best: dict[str, tuple[float, str, Variant]] = {}
    for v in candidates(kernel, device):
        best[family(v)] = min(best.get(family(v), (math.inf, "", v)), (predict(kernel, device, v), v.tag, v))
    chosen = [v for _, _, v in sorted(best.values())][:FAMILIES]
    default = best.get(family(DEFAULT_VARIANT))
    return chosen + ([default[2]] if default and default[2] not in chosen else [])


FAMILIES = 2
"""Families timed per micro-benchmark besides the default's: the nominal model's best two."""
COLD_LAUNCHES = 3
"""Launches of the copy-like micro-benchmark timed from memory (``bandwidth`` takes the best)."""
EVICT_LIMIT = 1 << 29
"""The most bytes ``Evictor`` writes."""
SLOW = 0.1
"""Seconds of a micro-benchmark launch that is timed once, not repeated (a slow family's)."""


FRESH_PAIRS = 9
"""Pairs of launches (reused outputs, then fresh ones) behind the first-touch term.  On a VM, fresh memory costs
many times more in streaks lasting several launches; the median of 9 pairs sat in one far less often than that
of 5 (benchmarks/RESULTS.md, "Measured plan times are the steady state")."""


def halves(kernel: Kernel) -> list[np.ndarray]:
    """Inputs of a micro-benchmark: 0.5 everywhere (in every op's domain; 10x cheaper to make than random ones)."""
    return [np.full(b.shape, 0.5, b.dtype.numpy) for b in kernel.inputs]


def _cold_launch(device: Device, bench: Any, compiled: Any, launches: int) -> float:
    """The best of ``launches`` launches, each after its buffers are pushed out of the CPU's caches."""
    evict = Evictor()
    outs = [device.alloc(b) for b in bench.kernel.output_types]
    try:
        device.launch(compiled, bench.inputs, outs)  # the outputs' first touch
        times = []
        for _ in range(launches):
            evict()
            times.append(device.launch(compiled, bench.inputs, outs))
    finally:
        bench.free(outs)
    return min(times)


def _first_touch(bench: Any, compiled: Any, pairs: int) -> float:
    """Seconds per output byte a launch spends more on fresh outputs than on reused ones (``Bench.first_touch``)."""
    reused = [bench.device.alloc(b) for b in bench.kernel.output_types]
    try:
        seconds = bench.device.launch(compiled, bench.inputs, reused)  # their first touch
        touch = bench.first_touch(compiled, reused, seconds, pairs) or 0.0
    finally:
        bench.free(reused)
    return touch / bench.kernel.output_bytes

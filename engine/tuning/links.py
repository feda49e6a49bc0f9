"""Measured copy costs between the host and each device's memory pool: what a ``to_device`` node costs.

A device with a pool of its own has uploads and downloads timed apart at a few sizes, the median of a few after a
warm-up; each direction's ``Link`` joins the sizes' times by straight lines (one line through the smallest and
largest size missed the copies of a few MiB: they go in more, smaller staging chunks).  The copies go through the
device's own ``upload`` and ``download``, so they time the path its copies take (pinned staging or pageable
arrays).  They copy what a plan copies: each upload reads an array of its own, out of the CPU's caches (a plan's
inputs were written long before, and a large last-level cache would otherwise hold them all) with the copy path
awake (a tiny upload first: the first copy after the eviction pays for bringing the runtime back, PoCL's idle
threads or a GPU driver's own state evicted from the caches, which a plan's copies, run back to back with its
other steps, do not), and each download is held until the next has landed, as a caller holds one run's outputs
while the next run downloads its own (the path a plan's runs take: on a GPU, one DMA into a pinned block lent as
the result, ``engine.devices.staging.Blocks``; a caller keeping every run's outputs pays more, the staged path once
no block is free).  The links are kept per device, driver and copy path (``Device.copies``) in ``links.json``
beside the tuning cache, so a machine measures each device once, and again when its copies change path; an
unreadable file is reported (``CacheWarning``) and measured again.
"""

from __future__ import annotations

import itertools
import json
import math
import statistics
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from engine.devices.base import Device, Link, PoolLink
from engine.fileio import CacheWarning, UnsafeFileError, read_bounded, set_aside, write_atomic
from engine.kernel.ir import HOST, Buffer
from engine.program.dtypes import DType
from engine.tuning.cache import MAX_FILE_BYTES, default_dir, driver
from engine.tuning.calibrate import Evictor

SIZES = (1 << 12, 1 << 18, 1 << 20, 1 << 22, 1 << 24, 1 << 26)
"""Bytes of the sizes timed: 4 KiB (the fixed cost) to 64 MiB (beyond it, the last segment's rate)."""
REPEATS = 5
LARGE_REPEATS = 3
"""Repeats at 64 MiB and above: kept sources of that size are costly in memory, and 3 suffice at that size."""
DIRECTIONS = ("up", "down")
FORMAT = 6
"""The layout of ``links.json``: 3 keeps each direction's measured sizes, 4 its uploads timed with the path awake,
5 copies staged in larger chunks, one of them on the caller's thread, 6 downloads held one at a time, into lent
pinned blocks on a GPU (a file of an older layout is measured again, silently)."""


def measure(device: Device, sizes: Sequence[int] = SIZES, repeats: int = REPEATS) -> PoolLink:
    """Time uploads and downloads of ``sizes`` bytes through ``device``'s pool; a ``Link`` for each direction."""
    evict = Evictor()
    wake = np.zeros(16, np.float32)
    ups, downs = [], []
    for nbytes in sizes:
        count = repeats if nbytes < SIZES[-1] else min(repeats, LARGE_REPEATS)
        sources = [np.arange(nbytes // 4, dtype=np.float32) for _ in range(count)]
        array, buffer = sources[0], Buffer(sources[0].shape, DType.F32)
        device.free(device.upload(array))  # warm-up: the path's staging memory and first-use costs
        up_times = []
        for source in sources:
            evict()  # out of the caches, as a plan's input is
            device.free(device.upload(wake))  # but the path awake, as in a plan
            start = time.perf_counter()
            handle = device.upload(source)
            up_times.append(time.perf_counter() - start)
            device.free(handle)
        handle = device.upload(array)
        held = device.download(handle, buffer)  # warm-up: two, each held while the next lands, as below
        held = device.download(handle, buffer)
        down_times = []
        for _ in range(count):
            start = time.perf_counter()
            held = device.download(handle, buffer)  # the previous one is released only once this one has landed
            down_times.append(time.perf_counter() - start)
        device.free(handle)
        if not np.array_equal(held, array):
            raise RuntimeError(f"{device.name}: a round trip of {nbytes} bytes changed the data")
        del held
        ups.append(statistics.median(up_times))
        downs.append(statistics.median(down_times))
    return PoolLink(_fit(sizes, ups), _fit(sizes, downs))


def _fit(sizes: Sequence[int], seconds: Sequence[float]) -> Link:
    """The sizes' times, each at least the one before (a larger copy never priced below a smaller one) and the
    last above the one before (a rate past it)."""
    kept = list(itertools.accumulate(seconds, max))
    kept[-1] = max(kept[-1], kept[-2] + (sizes[-1] - sizes[-2]) * 1e-15)
    return Link(tuple(zip(sizes, kept)))


class LinkCache:
    """Measured links by device name and driver, read once from ``links.json`` and rewritten on each new one."""

    def __init__(self, directory: Path | str | None = None) -> None:
        self.path = Path(directory if directory is not None else default_dir()) / "links.json"
        self._links: dict[str, dict[str, dict[str, float]]] | None = None

    def _read(self) -> dict[str, dict[str, dict[str, float]]]:
        """The valid entries of ``links.json``; an invalid one (a negative overhead would make a copy profitable
        and extraction loop) is dropped with a warning and measured again."""
        try:
            data = json.loads(read_bounded(self.path, MAX_FILE_BYTES).decode("utf-8"))
            if isinstance(data, dict) and data.get("format") != FORMAT:
                return {}
            links = data["links"]
            if not isinstance(links, dict):
                raise ValueError("'links' is not an object")
        except FileNotFoundError:
            return {}
        except UnsafeFileError as e:  # a FIFO, a device, a folder: set aside for the rebuild
            set_aside(self.path)
            warnings.warn(CacheWarning(f"transfer cache {self.path} is unreadable ({e}); measuring again"), stacklevel=3)
            return {}
        except (OSError, ValueError, KeyError, TypeError, RecursionError) as e:
            warnings.warn(CacheWarning(f"transfer cache {self.path} is unreadable ({e}); measuring again"), stacklevel=3)
            return {}
        valid = {k: v for k, v in links.items() if isinstance(v, dict) and _valid(v)}
        if len(valid) < len(links):
            bad = ", ".join(k for k in links if k not in valid)[:200]
            warnings.warn(CacheWarning(f"transfer cache {self.path} has invalid entries ({bad}); measuring again"),
                          stacklevel=3)
        return valid

    def link(self, device: Device) -> PoolLink:
        """``device``'s measured link, measuring (and storing) it the first time."""
        if self._links is None:
            self._links = self._read()
        key = f"{device.name}|{driver(device)}|{device.copies}"
        entry = self._links.get(key)
        if entry is not None:
            up, down = (Link(tuple((int(n), float(t)) for n, t in entry[d])) for d in DIRECTIONS)
            return PoolLink(up, down)
        link = measure(device)
        self._links[key] = {d: [list(p) for p in one.points]
                            for d, one in zip(DIRECTIONS, (link.up, link.down), strict=True)}
        try:
            write_atomic(self.path, json.dumps({"format": FORMAT, "links": self._links}, indent=1, sort_keys=True))
        except OSError as e:
            warnings.warn(CacheWarning(f"transfer cache {self.path} cannot be written ({e}); kept in memory"),
                          stacklevel=2)
        return link


def _valid(entry: dict) -> bool:
    """Both directions valid (``_valid_direction``)."""
    return all(_valid_direction(entry.get(d)) for d in DIRECTIONS)


def _valid_direction(points: object) -> bool:
    """At least two [bytes, seconds] pairs (numbers, not booleans): sizes growing from 0 up, seconds finite, from 0
    up and never falling, the last above the one before (a stored link that a larger copy undercut, or that priced a
    copy below nothing, would make a copy look profitable and extraction loop)."""
    if not isinstance(points, list) or len(points) < 2:
        return False
    pairs = []
    for pair in points:
        if not (isinstance(pair, list) and len(pair) == 2
                and all(isinstance(v, int | float) and not isinstance(v, bool) for v in pair)):
            return False
        try:
            pairs.append((float(pair[0]), float(pair[1])))
        except OverflowError:  # an integer beyond any float
            return False
    sizes, seconds = zip(*pairs)
    return (all(0 <= x < math.inf for x in sizes + seconds) and all(a < b for a, b in itertools.pairwise(sizes))
            and all(a <= b for a, b in itertools.pairwise(seconds)) and seconds[-2] < seconds[-1])


def measured_links(devices: Sequence[Device], cache: LinkCache | None = None) -> dict[str, PoolLink]:
    """The link of every device that has a pool of its own, by pool."""
    cache = cache or LinkCache()
    return {d.pool: cache.link(d) for d in devices if d.pool != HOST}


def transfer_time(devices: Sequence[Device], links: Mapping[str, PoolLink]) -> Callable[[int, str, str], float]:
    """Seconds to copy ``nbytes`` from pool ``src`` to pool ``dst`` (through the host: a download from ``src``,
    then an upload to ``dst``): measured links where known, else the devices' nominal ``transfer_estimate``."""
    by_pool = {d.pool: d for d in devices}

    def one_way(nbytes: int, pool: str, upload: bool) -> float:
        link = links.get(pool)
        if link is None:
            return by_pool[pool].transfer_estimate(nbytes)
        return (link.up if upload else link.down).seconds(nbytes)

    def seconds(nbytes: int, src: str, dst: str) -> float:
        return (0.0 if src == HOST else one_way(nbytes, src, False)) + (0.0 if dst == HOST else one_way(nbytes, dst, True))

    return seconds

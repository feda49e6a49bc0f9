"""Measured copy costs between the host and an OpenCL pool: the fit, its cache, and their use in extraction."""

from __future__ import annotations

import json
import math
import time
import warnings
import weakref

import numpy as np
import pytest

from engine import Init, Tensor, from_tensors
from engine.devices import NumpyDevice
from engine.devices.base import Link, PoolLink
from engine.devices.opencl import discover
from engine.fileio import CacheWarning
from engine.pipeline import Options, compile_program, transfer_estimate
from engine.plan import Copy
from engine.tuning import Budget, links
from engine.tuning.links import LinkCache, measure, transfer_time

CPU_OPENCL = [d for d in discover() if not d.is_gpu][:1]
needs_opencl = pytest.mark.skipif(not CPU_OPENCL, reason="no OpenCL CPU device (install pocl-opencl-icd)")


def test_a_nominal_link_costs_its_overhead_plus_bytes_over_bandwidth():
    link = Link.line(overhead=1e-5, bandwidth=1e9)
    assert link.seconds(0) == 1e-5 and link.seconds(10**9) == pytest.approx(1 + 1e-5)
    assert link.seconds(10**10) == pytest.approx(10 + 1e-5)  # past the last point, at the last segment's rate
    assert link.overhead == 1e-5 and link.bandwidth == pytest.approx(1e9)


def test_a_measured_link_joins_its_sizes_by_straight_lines():
    link = Link(((1 << 12, 30e-6), (1 << 20, 430e-6), (1 << 24, 1.4e-3)))
    assert link.seconds(0) == link.seconds(1 << 12) == 30e-6  # never below the smallest copy measured
    assert link.seconds(1 << 20) == 430e-6
    halfway = (1 << 20) + ((1 << 24) - (1 << 20)) // 2
    assert link.seconds(halfway) == pytest.approx((430e-6 + 1.4e-3) / 2)
    rate = ((1 << 24) - (1 << 20)) / (1.4e-3 - 430e-6)
    assert link.bandwidth == pytest.approx(rate)
    assert link.seconds(1 << 25) == pytest.approx(1.4e-3 + (1 << 24) / rate)
    assert "1.00 MiB 430 µs" in link.describe()


def test_the_fit_never_prices_a_larger_copy_below_a_smaller_one():
    fitted = links._fit((1 << 12, 1 << 20, 1 << 24), (50e-6, 40e-6, 40e-6))  # noise: the middle size ran faster
    seconds = [t for _, t in fitted.points]
    assert seconds[:2] == [50e-6, 50e-6] and seconds[2] > seconds[1]
    assert 0 < fitted.bandwidth < math.inf


@needs_opencl
def test_transfer_time_uses_measured_links_through_the_host_and_nominal_ones_elsewhere():
    device = CPU_OPENCL[0]
    nominal = transfer_estimate([NumpyDevice(), device])
    measured = transfer_time([NumpyDevice(), device], {device.pool: PoolLink(Link.line(1e-3, 1e6), Link.line(2e-3, 1e5))})
    assert measured(10**6, "host", device.pool) == pytest.approx(1e-3 + 1.0)  # an upload
    assert measured(10**6, device.pool, "host") == pytest.approx(2e-3 + 10.0)  # a download, priced on its own
    assert measured(10**6, "host", "host") == 0.0 == nominal(10**6, "host", "host")
    assert nominal(10**6, "host", device.pool) == device.transfer_estimate(10**6)


class _Dozing(NumpyDevice):
    """Host memory as a pool of its own whose copy path dozes off while the CPU's caches are evicted (the
    eviction is all the host does meanwhile), and whose first upload after that takes 50 ms to wake it."""

    pool = "dozing"

    def __init__(self) -> None:
        super().__init__(threads=1)
        self.asleep = False
        self.evictions = 0
        self.woken_by = []

    def upload(self, array):
        if self.asleep:
            time.sleep(0.05)
            self.asleep = False
            self.woken_by.append(array.nbytes)
        return np.array(array)

    def free(self, handle):
        pass


def test_uploads_are_timed_from_memory_with_the_copy_path_awake(monkeypatch):
    device = _Dozing()

    class Evictor:
        def __call__(self):
            device.evictions += 1
            device.asleep = True

    monkeypatch.setattr(links, "Evictor", Evictor)
    link = measure(device, sizes=(1 << 12, 1 << 20), repeats=3)
    assert device.evictions == 6  # before each timed upload
    assert max(device.woken_by) < 1 << 12  # each time by a tiny copy, never by a timed one
    assert link.up.seconds(1 << 12) < 0.04 and link.up.seconds(1 << 20) < 0.04  # so no timed one paid the 50 ms


@needs_opencl
def test_measure_times_each_size_on_a_real_device():
    link = measure(CPU_OPENCL[0], sizes=(1 << 12, 1 << 18, 1 << 22), repeats=3)
    for one in (link.up, link.down):
        assert [n for n, _ in one.points] == [1 << 12, 1 << 18, 1 << 22]
        assert one.overhead > 0 and math.isfinite(one.bandwidth) and one.bandwidth > 1e6
        assert one.seconds(1 << 22) > one.seconds(1 << 12)


class _SlowDownloads(NumpyDevice):
    """Host memory as a pool of its own whose downloads of more than 64 KiB take 50 ms (uploads take what a copy
    takes), and which tells which downloaded arrays are still alive."""

    pool = "slow"

    def __init__(self) -> None:
        super().__init__(threads=1)
        self.downloads: list[weakref.ref] = []
        self.alive_at_last: int = 0

    def upload(self, array):
        return np.array(array)

    def download(self, handle, buffer):
        if handle.nbytes > 1 << 16:
            time.sleep(0.05)
        self.alive_at_last = sum(r() is not None for r in self.downloads)
        out = np.array(handle).reshape(buffer.shape)
        self.downloads.append(weakref.ref(out))
        return out

    def free(self, handle):
        pass


def test_measure_times_each_direction_apart_and_holds_each_download_until_the_next():
    device = _SlowDownloads()
    link = measure(device, sizes=(1 << 12, 1 << 20), repeats=3)
    assert link.down.seconds(1 << 20) > 0.04 > link.up.seconds(1 << 20)
    # as a loop consuming each run's outputs: the previous download is alive while the next lands, no older one
    assert device.alive_at_last == 1 and len(device.downloads) == 2 * (2 + 3)


@needs_opencl
def test_a_link_is_measured_once_then_read_from_the_cache(tmp_path, monkeypatch):
    device = CPU_OPENCL[0]
    first = LinkCache(tmp_path).link(device)
    stored = json.loads((tmp_path / "links.json").read_text())["links"]
    assert [k.split("|")[0] for k in stored] == [device.name]

    def must_not_measure(*args, **kwargs):
        raise AssertionError("measured again despite the cache")

    monkeypatch.setattr(links, "measure", must_not_measure)
    assert LinkCache(tmp_path).link(device) == first


@needs_opencl
def test_an_unreadable_cache_is_reported_and_measured_again(tmp_path):
    (tmp_path / "links.json").write_text("{not json")
    with pytest.warns(CacheWarning, match="unreadable"):
        link = LinkCache(tmp_path).link(CPU_OPENCL[0])
    assert link.up.bandwidth > 0 and link.down.bandwidth > 0
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)  # rewritten whole: read back without a warning
        assert LinkCache(tmp_path).link(CPU_OPENCL[0]) == link


@needs_opencl
def test_tuned_compilations_price_their_copies_with_the_measured_link():
    x = Tensor.input("x", (64, 64), init=Init.normal(seed=3))
    program = from_tensors([(x.exp() * 2).named("y")], "copy", "one kernel")
    device = CPU_OPENCL[0]
    c = compile_program(program, [device], Options(tune_budget=Budget(variants=2, seconds=2.0)))  # copies in and out
    link = c.links[device.pool]
    assert set(c.links) == {device.pool}
    copies = [s for s in c.plan.steps if isinstance(s, Copy)]
    assert {s.target[1] for s in copies} == {"host", device.pool}
    for step in copies:
        one = link.up if step.target[1] == device.pool else link.down
        assert step.predicted == pytest.approx(one.seconds(step.buffer.nbytes))
    plain = compile_program(program, [device], Options(tune=False, tune_cache=False))
    assert plain.links == {}

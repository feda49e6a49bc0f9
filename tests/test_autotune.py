"""The autotuner: verification of every variant, wrong and failing variants recorded, cache, budget, cancel, progress.

Assertions are on correctness and structure only, never on speed.
"""

from __future__ import annotations

import errno
import json
import math
import multiprocessing
import os
import warnings
from dataclasses import dataclass

import numpy as np
import pytest

import sample_graphs
from engine import load
from engine.devices import LibraryDevice, NumpyDevice
from engine.devices.opencl import discover
from engine.fileio import CacheWarning
from engine.kernel.index import Var, flatten, var
from engine.kernel.ir import Acc, Buffer, Kernel, Load, Op, Reduce
from engine.kernel.render import opencl as codegen
from engine.kernel.render.base import CStyleEmitter
from engine.kernel.schedule import DEFAULT_VARIANT, Variant
from engine.pipeline import Options, compile_program
from engine.program.dtypes import DType
from engine.tuning import FAILED, OK, WRONG, Budget, Tuner, TuneResult, calibrate, predict, suggest, tune
from engine.tuning.cache import TuneCache
from engine.tuning.measure import poison

F32 = DType.F32
OPENCL = discover()


@pytest.fixture(scope="module")
def device():
    if not OPENCL:
        pytest.skip("no OpenCL platform found")
    return OPENCL[0]


def row_sum(rows: int = 4, cols: int = 600) -> Kernel:
    """A long reduce to few outputs: group-reduce seeds apply."""
    return calibrate.row_sum(rows, cols)


def matmul(m: int = 12, n: int = 20, k: int = 9) -> Kernel:
    g0, g1, r = Var("g0", m), Var("g1", n), Var("r0", k)
    a = Load(0, flatten([var(g0), var(r)], (m, k)), m * k, F32)
    b = Load(1, flatten([var(r), var(g1)], (k, n)), k * n, F32)
    return Kernel((Buffer((m, k), F32), Buffer((k, n), F32)), (m, n), (g0, g1),
                  Reduce("sum", (r,), Op("mul", (a, b), F32)), (Acc(F32),))


def test_tune_verifies_and_picks_a_verified_variant(device):
    result = tune(matmul(), device, Budget(variants=10))
    assert result.ok and 1 < len(result.trials) <= 10 and result.default is not None
    assert all(t.status == OK and t.seconds is not None and len(t.times) >= 3 for t in result.trials)
    best = min(result.trials, key=lambda t: t.seconds)
    assert result.best == best.variant and result.seconds == best.seconds
    assert len({t.variant for t in result.trials}) == len(result.trials)


def test_wrong_and_failing_variants_are_recorded_never_chosen(device, monkeypatch):
    init = CStyleEmitter.init

    def buggy(self, red):  # group reduces start from 1 (wrong); unroll=4 does not compile
        if self.variant.unroll == 4:
            return "undefined_symbol_zx"
        return "1.0f" if self.variant.group > 1 else init(self, red)

    monkeypatch.setattr(CStyleEmitter, "init", buggy)
    codegen.generate.cache_clear()
    try:
        result = tune(row_sum(), device, Budget(variants=12))
    finally:
        codegen.generate.cache_clear()  # the buggy sources must not outlive the test
    by_status = {s: [t for t in result.trials if t.status == s] for s in (OK, WRONG, FAILED)}
    assert by_status[WRONG] and all(t.variant.group > 1 and "differ" in t.reason for t in by_status[WRONG])
    assert by_status[FAILED] and all(t.variant.unroll == 4 and t.reason for t in by_status[FAILED])
    assert result.ok and result.best.group == 0 and result.best.unroll != 4
    assert result.best in {t.variant for t in by_status[OK]}


def test_sample_kernels_tune_and_verify(device):
    """The kernels of small samples (softmax rows, layernorm, matmul): every variant tried verifies."""
    tuner = Tuner(use_cache=False, budget=Budget(variants=6, per_round=6))
    for name in ("softmax.small", "matmul.small"):
        plan = compile_program(load(sample_graphs.path(name)), [device], Options(execute=False)).plan
        for launch in plan.launches():
            result = tuner.tune(launch.kernel, device)
            assert all(t.status == OK for t in result.trials), [(t.variant, t.reason) for t in result.trials]
            assert tuner.kernel_time(launch.kernel, device) == result.seconds > 0
            assert tuner.variant(launch.kernel, device) == result.best


def test_cache_round_trip(device, tmp_path):
    k = row_sum()
    first = Tuner(cache_dir=tmp_path, budget=4).tune(k, device)
    assert first.cache == "miss"
    files = [p for p in tmp_path.iterdir() if not p.name.endswith(".lock") and p.name != "calibration.json"]
    assert len(files) == 1 and files[0].suffix == ".json"
    data = json.loads(files[0].read_text())
    assert data["format"] == 1 and any(key.startswith(k.key) for key in data["entries"])
    builds = device.builds
    again = Tuner(cache_dir=tmp_path).tune(k, device)
    assert again.cache == "hit" and device.builds == builds
    assert again.best == first.best and again.seconds == first.seconds and again.trials == first.trials
    other = Tuner(cache_dir=tmp_path, budget=2).tune(matmul(), device)  # a second entry merges into the file
    assert other.cache == "miss" and len(json.loads(files[0].read_text())["entries"]) == 2


def test_corrupt_cache_is_reported_and_rebuilt(device, tmp_path):
    path = TuneCache(tmp_path).path(device)
    path.write_text("{not json")
    with pytest.warns(CacheWarning, match="corrupt"):
        result = Tuner(cache_dir=tmp_path, budget=2).tune(row_sum(), device)
    assert result.cache == "corrupt" and result.ok, result.trials
    assert json.loads(path.read_text())["format"] == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert Tuner(cache_dir=tmp_path).tune(row_sum(), device).cache == "hit"


def test_cache_write_is_atomic(device, tmp_path, monkeypatch):
    cache = TuneCache(tmp_path)
    k = row_sum()
    cache.put(k, device, {"x": 1})
    before = cache.path(device).read_text()

    def crash(src, dst):
        raise OSError(errno.ENOSPC, "disk full")

    monkeypatch.setattr("engine.fileio.os.replace", crash)
    with pytest.warns(CacheWarning, match="cannot be written .disk full.; results stay in memory"):
        cache.put(matmul(), device, {"y": 2})
    assert cache.path(device).read_text() == before  # the old file is intact
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")) == [cache.path(device).name]
    assert cache.get(matmul(), device) == {"y": 2} and cache.status[device.name].startswith("unwritable")


@dataclass(frozen=True)
class FakeKernel:
    key: str


@dataclass(frozen=True)
class FakeDevice:
    name: str = "fake device"
    driver_version: str = "1"


def test_a_malformed_entry_is_dropped_alone(tmp_path):
    cache, dev = TuneCache(tmp_path), FakeDevice()
    for i in range(3):
        cache.put(FakeKernel(f"k{i}"), dev, {"i": i})
    data = json.loads(cache.path(dev).read_text())
    data["entries"][f"k1|{dev.name}|1"] = "garbage"
    cache.path(dev).write_text(json.dumps(data))
    fresh = TuneCache(tmp_path)
    with pytest.warns(CacheWarning, match="has 1 malformed entry"):
        assert fresh.get(FakeKernel("k0"), dev) == {"i": 0}
    assert fresh.get(FakeKernel("k1"), dev) is None and fresh.get(FakeKernel("k2"), dev) == {"i": 2}
    fresh.put(FakeKernel("k1"), dev, {"i": 10})  # rewritten: the good entries kept, the bad one replaced
    assert len(json.loads(cache.path(dev).read_text())["entries"]) == 3


def _writer(directory: str, tag: str, count: int) -> None:
    cache = TuneCache(directory)
    for i in range(count):
        cache.put(FakeKernel(f"{tag}{i}"), FakeDevice(), {"i": i, "by": tag})


def test_concurrent_writers_lose_nothing(tmp_path):
    """Two processes each writing 40 entries to one file: all 80 survive (read-merge-write under a lock)."""
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), tag, 40)) for tag in "ab"]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    entries = json.loads(TuneCache(tmp_path).path(FakeDevice()).read_text())["entries"]
    assert len(entries) == 80 and {e["by"] for e in entries.values()} == {"a", "b"}


def test_read_only_cache_dir(device, tmp_path, monkeypatch):
    """No crash: the tuner warns once per write, keeps its results in memory and still finds them."""
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    if os.access(ro, os.W_OK):  # root ignores permissions: make the file system read-only for the cache
        def refuse(*args, **kwargs):
            raise OSError(errno.EROFS, "Read-only file system")

        monkeypatch.setattr("engine.fileio.tempfile.mkstemp", refuse)
        monkeypatch.setattr("engine.tuning.cache.open", refuse, raising=False)
    tuner = Tuner(cache_dir=ro, budget=2)
    with pytest.warns(CacheWarning, match="cannot be written"):
        result = tuner.tune(row_sum(), device)
    assert result.ok and not list(ro.iterdir())
    assert tuner.tune(row_sum(), device) is result
    assert tuner.cache.get(row_sum(), device) is not None


def test_cache_under_a_file_is_unwritable_not_fatal(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    cache = TuneCache(blocker / "autotune")
    with pytest.warns(CacheWarning, match="cannot be written"):
        cache.put(FakeKernel("k"), FakeDevice(), {"i": 1})
    assert cache.get(FakeKernel("k"), FakeDevice()) == {"i": 1}


def test_budget_cancel_progress(device):
    events = []
    result = tune(matmul(), device, Budget(variants=3), progress=events.append)
    done = [e for e in events if e.trial is not None]
    assert len(result.trials) == 3 and [e.done for e in done] == [1, 2, 3]
    assert all(e.total == 3 and e.kernel == matmul().key and e.trial in result.trials and e.budget == 30.0
               for e in done)
    # each variant is announced (trial None) before it is timed, then reported with its trial
    assert [(e.variant, e.trial is None) for e in events] == [(t.variant, s) for t in result.trials for s in (True, False)]
    assert len(tune(matmul(), device, Budget(seconds=0.0)).trials) == 0

    calls = []
    result = tune(matmul(), device, Budget(variants=20), progress=calls.append,
                  cancel=lambda: sum(e.trial is not None for e in calls) >= 2)
    assert result.cancelled and len(result.trials) == 2


def test_cancelled_result_is_not_cached(device, tmp_path):
    tuner = Tuner(cache_dir=tmp_path, cancel=lambda: True)
    assert tuner.tune(row_sum(), device).cancelled and not tuner.cache.path(device).exists()


@pytest.mark.parametrize("host", [NumpyDevice(), LibraryDevice()], ids=["numpy", "blas"])
def test_host_devices_time_the_default_variant(host):
    result = tune(matmul(), host)
    assert [t.variant for t in result.trials] == [DEFAULT_VARIANT] and result.trials[0].status == OK
    assert result.best == DEFAULT_VARIANT and result.seconds > 0


def test_cost_model(device):
    k = row_sum(rows=1, cols=1 << 16)
    default = predict(k, device, DEFAULT_VARIANT)
    if device.is_gpu:
        assert 0 < predict(k, device, Variant(group=256)) < default  # one work item cannot fill a GPU
    else:  # a CPU runtime runs a work-group on one thread: one group is no faster than one item
        assert predict(k, device, Variant(group=256)) >= default > 0
    v = suggest(k, device)
    assert device.variant_error(k, v) is None and predict(k, device, v) <= default
    assert predict(matmul(), NumpyDevice()) == NumpyDevice().estimate(matmul())
    assert math.isfinite(predict(matmul(), device, Variant(upcast=4, tile=4, unroll=2)))


def test_result_json_and_poison():
    result = TuneResult("k", "d", (), Variant(upcast=2), 1.0, 0.5)
    assert TuneResult.from_json("k", "d", result.to_json(), "hit").best == Variant(upcast=2)
    for ref in (np.array([0.0, np.nan, np.inf, -3.5], np.float32), np.array([1, -2], np.int64), np.array([True])):
        assert not np.any(poison(ref) == ref)
    with pytest.raises(ValueError):
        Variant.from_json({"upcast": 2, "bogus": 1})


def test_the_model_counts_the_work_groups_a_cpu_runtime_makes_without_a_local_size(device):
    """What ``runtime_groups`` says against what the runtime did: each work item writes its group's size."""
    import pyopencl as cl

    from engine.tuning.model import runtime_groups

    if device.is_gpu:
        pytest.skip("a GPU's fill is counted in work items")
    program = cl.Program(device.context, "__kernel void size(__global int* o) { o[get_global_id(0)] = get_local_size(0); }")
    kernel = cl.Kernel(program.build(), "size")
    queue = cl.CommandQueue(device.context)
    for items in (1, 7, 24, 64, 100, 129, 1000, 1024, 4100, 65536, 1 << 20):
        out = cl.Buffer(device.context, cl.mem_flags.WRITE_ONLY, 4 * items)
        kernel(queue, (items,), None, out)
        sizes = np.empty(items, np.int32)
        cl.enqueue_copy(queue, sizes, out)
        assert runtime_groups(items, device.nominal) == items // sizes[0], items

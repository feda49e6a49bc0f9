"""The calibrated cost model: fitted by micro-benchmarks, kept per device and driver, refit by measurements."""

from __future__ import annotations

import json
import math
import weakref

import numpy as np
import pytest

from engine.devices import NumpyDevice
from engine.fileio import CacheWarning
from engine.kernel.cost import op_counts
from engine.kernel.ir import Kernel, Load, Op, Reduce, schedule
from engine.kernel.schedule import DEFAULT_VARIANT, Variant, barriers, launch_size
from engine.program.dtypes import DType
from engine.tuning.calibrate import (
    FORMAT,
    Calibration,
    Calibrations,
    _work_part,
    cache_bytes,
    family,
    family_variants,
    micro_kernels,
    op_probes,
    shape,
)
from engine.tuning.measure import always_fresh
from engine.tuning.model import group_rounds
from tests.test_autotune import matmul, row_sum


def test_micro_benchmarks_fit_a_device_once_and_it_is_read_back(tmp_path):
    device = NumpyDevice(threads=1)
    first = Calibrations(tmp_path)
    fitted = first.get(device)
    assert fitted.observations == len(micro_kernels()) - 1  # the tiny launch gives the overhead, not a factor
    assert set(fitted.shapes) == {shape(k) for k in micro_kernels()[1:]} and fitted.overhead > 0
    stored = json.loads((tmp_path / "calibration.json").read_text())["devices"]
    assert list(stored) == [f"numpy|{device.driver_version}"]  # keyed by device and driver
    assert device.driver_version.startswith(f"numpy {np.__version__} | openblas thread timeout ")
    again = Calibrations(tmp_path, fit=False).get(device)
    assert again == fitted
    k = matmul()
    assert Calibrations(tmp_path, fit=False).predict(k, device) == first.predict(k, device)


def test_a_corrupt_calibration_is_reported_and_fitted_again(tmp_path):
    (tmp_path / "calibration.json").write_text("{not json")
    with pytest.warns(CacheWarning, match="calibration"):
        c = Calibrations(tmp_path).get(NumpyDevice(threads=1))
    assert c.observations > 0 and json.loads((tmp_path / "calibration.json").read_text())["format"] == FORMAT


def test_a_calibration_of_an_older_format_is_fitted_again_without_a_warning(tmp_path, recwarn):
    device = NumpyDevice(threads=1)
    Calibrations(tmp_path).get(device)
    path = tmp_path / "calibration.json"
    data = json.loads(path.read_text())
    stored = next(iter(data["devices"].values()))
    del stored["ops"], stored["touches"], stored["families"]
    path.write_text(json.dumps({**data, "format": 1}))
    again = Calibrations(tmp_path).get(device)
    assert again.ops and not recwarn.list and json.loads(path.read_text())["format"] == FORMAT


def test_without_measurements_the_model_is_the_nominal_roofline():
    device = NumpyDevice(threads=1)
    k = matmul()
    assert math.isclose(Calibrations(persist=False, fit=False).predict(k, device, DEFAULT_VARIANT),
                        device.estimate(k))


class FreshCostDevice(NumpyDevice):
    """Launches take 1 ms, plus ``FRESH`` seconds per byte when they write an output buffer for the first time."""

    FRESH = 2e-10

    def __init__(self) -> None:
        super().__init__(threads=1)
        self.touched: dict[int, weakref.ref] = {}
        """Written buffers by id, weakly: an id alone would be taken again by a new array once its buffer is
        collected (a plan's outputs are never freed through the device)."""

    def launch(self, compiled, inputs, outputs):
        super().launch(compiled, inputs, outputs)
        fresh = sum(o.nbytes for o in outputs if self._new(o))
        self.touched.update((id(o), weakref.ref(o)) for o in outputs)
        return 1e-3 + self.FRESH * fresh

    def _new(self, handle) -> bool:
        ref = self.touched.get(id(handle))
        return ref is None or ref() is not handle

    def free(self, handle):
        self.touched.pop(id(handle), None)
        super().free(handle)


def test_calibration_recovers_the_first_touch_cost_of_fresh_outputs_and_charges_it_per_output_byte():
    device = FreshCostDevice()
    calibrations = Calibrations(persist=False)
    assert math.isclose(calibrations.get(device).fresh, FreshCostDevice.FRESH, rel_tol=1e-6)
    k = matmul()
    nbytes = sum(b.nbytes for b in k.output_types)
    assert math.isclose(calibrations.output_cost(k, device), FreshCostDevice.FRESH * nbytes, rel_tol=1e-6)


def test_a_plans_launches_are_priced_with_the_first_touch_of_their_fresh_outputs():
    import sample_graphs
    from engine import load
    from engine.pipeline import Options, compile_program, extract

    device = NumpyDevice(threads=1)
    c = compile_program(load(sample_graphs.path("mlp.small")), [device],
                        Options(tune=False, tune_cache=False, execute=False))
    c.calibrations.get(device).fresh = 1e-9
    extract(c)
    times = {c.kernelization.candidates[kn.candidate].kernel.key: t for kn, t in c.kernel_times.items()}
    for launch in c.plan.launches():
        nbytes = sum(b.nbytes for b in launch.kernel.output_types)
        assert math.isclose(launch.predicted, times[launch.kernel.key] + 1e-9 * nbytes)


class DearerPlanTouches(FreshCostDevice):
    """First touches cost 4x more per byte in launches of one input (the plan's below) than in the calibration's
    two-input add, as on a host whose plans keep their outputs and whose micro-benchmark drops them."""

    def launch(self, compiled, inputs, outputs):
        seconds = super().launch(compiled, inputs, outputs)
        return seconds if len(inputs) != 1 else 1e-3 + 4 * (seconds - 1e-3)


def test_a_tuned_kernel_with_large_host_outputs_is_priced_with_the_first_touch_its_own_launches_paid(
        tmp_path, monkeypatch):
    from engine import Init, Tensor, from_tensors
    from engine.pipeline import Options, compile_program
    from engine.tuning import Budget

    monkeypatch.setenv("ZYX_EXPLORE_CACHE", str(tmp_path))
    device, fresh = DearerPlanTouches(), FreshCostDevice.FRESH
    x = Tensor.input("x", (4096, 4096), init=Init.normal(seed=3))  # a 64 MiB output: always new pages
    small = Tensor.input("s", (64, 64), init=Init.normal(seed=4))
    program = from_tensors([(x * 2).named("y"), (small + 1).named("z")], "double", "one large host output")
    options = Options(tune_budget=Budget(variants=1, seconds=5.0))
    for cache in ("miss", "hit"):
        c = compile_program(program, [device], options)
        large, tiny = sorted(c.plan.launches(), key=lambda s: -s.kernel.output_types[0].nbytes)
        results = {kn.candidate: r for kn, r in c.tuning.items()}
        assert results[large.candidate].cache == cache and results[tiny.candidate].touch is None
        nbytes = large.kernel.output_types[0].nbytes
        assert math.isclose(results[large.candidate].touch, 4 * fresh * nbytes, rel_tol=1e-6)
        trial = results[large.candidate].seconds
        assert math.isclose(large.predicted, trial + 4 * fresh * nbytes, rel_tol=1e-6)  # not the calibrated 1x
        assert c.execution is not None
        (step,) = [t for s, t in zip(c.plan.steps, c.execution.step_times) if s is large]
        assert math.isclose(step, large.predicted, rel_tol=1e-6)


def test_host_outputs_of_32_mib_or_more_are_always_new_pages():
    """glibc maps a request of 32 MiB (its largest mmap threshold) or more afresh each time, so a 32 MiB output
    pays its first touch in every launch (RESULTS.md, "32 MiB outputs are new pages too"); one element less may
    reuse the heap."""
    assert always_fresh(row_sum(8 << 20, 2), NumpyDevice())
    assert not always_fresh(row_sum((8 << 20) - 1, 2), NumpyDevice())


class ClockedFreshCost(FreshCostDevice):
    """``FreshCostDevice`` whose launches take as long on ``clock`` as they report."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    def launch(self, compiled, inputs, outputs):
        seconds = super().launch(compiled, inputs, outputs)
        self.now += seconds
        return seconds


@pytest.mark.parametrize("limit", [0.0195, 0.5])
def test_a_first_touch_is_timed_within_what_is_left_of_the_kernels_budget(limit):
    from engine.tuning.calibrate import LARGE, _elementwise
    from engine.tuning.search import Budget, tune

    device = ClockedFreshCost()
    kernel = _elementwise(LARGE, "add")  # a 64 MiB output: always new pages
    result = tune(kernel, device, Budget(variants=1), limit=limit, clock=lambda: device.now)
    touch = FreshCostDevice.FRESH * kernel.output_types[0].nbytes  # 13 ms a fresh launch pays more
    # the trial: a verification on new outputs (14 ms), a warm-up and 3 timed launches (1 ms each)
    assert result.ok and device.now <= limit + 1e-3 + touch  # a pair that starts is let end
    if limit < 0.02:  # its trial leaves less than a pair of its launches
        assert result.touch is None and device.now < limit
    else:
        assert math.isclose(result.touch, touch, rel_tol=1e-6)


def test_plans_launches_into_large_host_outputs_refit_the_first_touch_cost_that_the_next_compilation_prices(
        tmp_path, monkeypatch):
    from engine import Init, Tensor, from_tensors
    from engine.pipeline import Options, compile_program
    from engine.tuning import Budget

    monkeypatch.setenv("ZYX_EXPLORE_CACHE", str(tmp_path))
    device, fresh = DearerPlanTouches(), FreshCostDevice.FRESH
    x = Tensor.input("x", (4096, 4096), init=Init.normal(seed=3))  # a 64 MiB output: always new pages
    program = from_tensors([(x * 2).named("y")], "double", "one large host output")
    options = Options(tune_budget=Budget(variants=1, seconds=5.0))
    planned = []
    for _ in range(2):
        c = compile_program(program, [device], options)
        planned.append(c.calibrations.get(device).fresh)  # what an untimed kernel would be priced with
    assert math.isclose(planned[0], fresh, rel_tol=1e-6)  # the micro-benchmark's alone
    assert math.isclose(planned[1], 2.5 * fresh, rel_tol=1e-3)  # the median of it and the plan's 4x
    assert math.isclose(Calibrations().get(device).fresh, 4 * fresh, rel_tol=1e-3)  # 1x, 4x, 4x


FAMILY_FACTORS = {"plain": 4.0, "unrolled": 2.0, "tiled": 1.0, "staged": 0.7, "group": 0.5}


class FamilyDevice(NumpyDevice):
    """A tunable device whose launches take the nominal model's time times its variant family's known factor."""

    tunable = True
    cache_bytes = 0  # unknown: no cache term (CacheDevice has one)

    def __init__(self) -> None:
        super().__init__(threads=1)
        self.name = "families"

    def variant_error(self, kernel, variant):
        return None

    def launch(self, compiled, inputs, outputs):
        return FAMILY_FACTORS[family(compiled.variant)] * _work_part(compiled.kernel, self, compiled.variant)


def test_trials_of_other_kernels_fit_each_variant_family_apart():
    """Out of sample: after trials of other reduces in two families, a new reduce is predicted in each family
    at that family's factor (one factor per shape would predict both alike)."""
    device = FamilyDevice()
    calibrations = Calibrations(persist=False, fit=False)
    calibrations.get(device).overhead = 0.0
    plain, group = Variant(), Variant(group=64)
    for rows in (64, 128, 256, 512, 1024, 2048):
        for v in (plain, group):
            k = row_sum(rows, 4096)
            calibrations.observe(k, device, v, FAMILY_FACTORS[family(v)] * _work_part(k, device, v))
    new = row_sum(4096, 4096)
    for v in (plain, group):
        ratio = calibrations.predict(new, device, v) / _work_part(new, device, v)
        assert abs(math.log2(ratio / FAMILY_FACTORS[family(v)])) < 0.5  # shrunk a little towards the shape


def test_micro_benchmarks_time_two_families_per_kernel_and_fit_their_factors():
    device = FamilyDevice()
    fitted = Calibrations(persist=False).get(device)
    for k in micro_kernels()[1:]:
        timed = family_variants(k, device)
        assert len(timed) == 2 and all(f"{shape(k)}/{family(v)}" in fitted.families for v in timed)
    for key, fit in fitted.families.items():
        truth = FAMILY_FACTORS[key.split("/")[1]]
        assert fit.count == 1 and math.isclose(math.exp(fit.log_sum), truth, rel_tol=1e-2)  # less the overhead


def test_executed_steps_refit_the_model_less_the_first_touches_trials_do_not_pay():
    import sample_graphs
    from engine import load
    from engine.pipeline import Options, compile_program, feed_back
    from engine.plan import Execution

    device = NumpyDevice(threads=1)
    c = compile_program(load(sample_graphs.path("mlp.small")), [device],
                        Options(tune=False, tune_cache=False, execute=False))
    c.calibrations.get(device).fresh = 1e-9
    seen = []
    c.calibrations.observe = lambda kernel, device, variant, seconds: seen.append((kernel.key, seconds))
    feed_back(c, Execution({}, tuple(1.0 for _ in c.plan.steps)))
    assert seen == [(s.kernel.key, 1.0 - 1e-9 * sum(b.nbytes for b in s.kernel.output_types))
                    for s in c.plan.launches()] != []


F32 = DType.F32
OP_COSTS = {"sin": 2e-8, "log2": 1e-8}


class SlowOpsDevice(NumpyDevice):
    """Launches take the nominal roofline plus a known cost per evaluation of ``sin`` and ``log2``."""

    def __init__(self) -> None:
        super().__init__(threads=1)
        self.name = "slowops"

    def launch(self, compiled, inputs, outputs):
        k = compiled.kernel
        return _work_part(k, self, DEFAULT_VARIANT) + sum(n * OP_COSTS.get(op, 0.0) for op, n in op_counts(k).items())


def test_calibration_measures_each_transcendental_ops_cost_and_charges_it_per_evaluation():
    device = SlowOpsDevice()
    calibrations = Calibrations(persist=False)
    fitted = calibrations.get(device)
    assert fitted.ops["exp2"] < 1e-12 and fitted.ops["cos"] < 1e-12
    for op, cost in OP_COSTS.items():
        assert math.isclose(fitted.ops[op], cost, rel_tol=0.05)
    k = row_sum(64, 4096)
    sines = Kernel(k.inputs, k.shape, k.vars, Reduce("sum", k.reduce.vars, Op("sin", (k.reduce.body,), F32)),
                   k.outputs)
    measured = device.launch(device.compile(sines), [], [])
    assert abs(math.log2(calibrations.predict(sines, device) / measured)) < 0.1
    plain = row_sum(128, 4096)
    before = calibrations.predict(plain, device)
    calibrations.observe(sines, device, DEFAULT_VARIANT, measured)  # refits the reduce shape less the sines' cost
    assert abs(math.log2(calibrations.predict(plain, device) / before)) < 0.1


class VariantDevice(FamilyDevice):
    """Launches take the work part times the family's factor, times the roofline's ratio to the default raised
    to SLOPE - 1 (variants spread wider than the roofline says: SLOPE times in log)."""

    SLOPE = 2.0

    def launch(self, compiled, inputs, outputs):
        return truth(compiled.kernel, self, compiled.variant)


def truth(kernel, device, variant):
    part = _work_part(kernel, device, variant)
    spread = (part / _work_part(kernel, device, DEFAULT_VARIANT)) ** (VariantDevice.SLOPE - 1)
    return FAMILY_FACTORS[family(variant)] * part * spread


def error(calibrations, kernel, device, variant):
    return abs(math.log2(calibrations.predict(kernel, device, variant) / truth(kernel, device, variant)))


def test_a_trial_of_one_family_does_not_pull_another_familys_prediction_away_from_it():
    """The kernel's own level is a residual against each variant's family level, so a slow plain variant timed
    first does not make the group variant (4/0.5 = 8 times faster here) look slow."""
    device = FamilyDevice()
    calibrations = Calibrations(persist=False, fit=False)
    calibrations.get(device).overhead = 0.0
    plain, group = Variant(), Variant(group=64)
    for rows in (64, 128, 256, 512):
        for v in (plain, group):
            k = row_sum(rows, 4096)
            calibrations.observe(k, device, v, device.launch(device.compile(k, v), [], []))
    new = row_sum(2048, 4096)
    before = calibrations.predict(new, device, group) / _work_part(new, device, group)
    calibrations.observe(new, device, plain, device.launch(device.compile(new, plain), [], []))
    after = calibrations.predict(new, device, group) / _work_part(new, device, group)
    truth_ = FAMILY_FACTORS["group"]
    assert abs(math.log2(after / truth_)) <= abs(math.log2(before / truth_)) + 0.05
    assert abs(math.log2(after / truth_)) < 0.5


def test_refits_learn_how_much_wider_than_the_roofline_variants_spread_and_converge():
    device = VariantDevice()
    calibrations = Calibrations(persist=False, fit=False)
    calibrations.get(device).overhead = 0.0
    k = matmul()
    variants = [v for v in family_variants(k, device)] + [Variant(unroll=2), Variant(upcast=2), Variant(upcast=4, tile=2)]
    for other in (row_sum(256, 1024), row_sum(512, 1024)):  # pairs of one shape fit its slope
        for v in (Variant(), Variant(unroll=4), Variant(upcast=4)):
            calibrations.observe(other, device, v, truth(other, device, v))
    assert calibrations.get(device).slope(row_sum(64, 64)) > 1.2  # wider than the roofline: more than 1
    errors = []
    for _ in range(30):
        for v in variants:
            calibrations.observe(k, device, v, truth(k, device, v))
        errors.append(max(error(calibrations, k, device, v) for v in variants))
    assert errors[-1] < 0.1 and errors[-1] <= errors[0]


def test_the_stored_calibration_round_trips_with_every_fitted_and_measured_term(tmp_path):
    device = VariantDevice()
    calibrations = Calibrations(tmp_path, fit=False)
    c = calibrations.get(device)
    c.overhead, c.parallel, c.cache, c.stream, c.bandwidth, c.barrier = 0.0, 2e-5, 1 << 20, 3.0, 1e10, 1e-9
    c.touches, c.fresh = [2e-11, 4e-11, 3e-11], 3e-11  # loaded as their median
    k = matmul()
    for v in (Variant(), Variant(unroll=2), Variant(upcast=2, tile=2)):
        calibrations.observe(k, device, v, truth(k, device, v))
    calibrations.save(device)
    data = json.loads((tmp_path / "calibration.json").read_text())
    assert data["format"] == FORMAT == 6
    again = Calibrations(tmp_path, fit=False).get(device)
    assert again == c and again.kernels[k.key] and again.slopes
    for v in (Variant(), Variant(unroll=4)):
        assert Calibrations(tmp_path, fit=False).predict(k, device, v) == calibrations.predict(k, device, v)
    stored = data["devices"][next(iter(data["devices"]))]
    with pytest.raises(ValueError):
        Calibration.from_json({**stored, "stream": 0.5})  # faster out of the cache than in it
    with pytest.raises(ValueError):
        Calibration.from_json({**stored, "touches": [1e-11, -1e-11]})


class CacheDevice(FamilyDevice):
    """Launches: OVERHEAD, plus WAKE when they run on several threads, plus the work part, STREAM times slower
    out of its CACHE (as ``Calibration.memory`` reads a working set)."""

    OVERHEAD, WAKE, STREAM, CACHE = 1e-6, 3e-4, 4.0, 1 << 25
    cache_bytes = CACHE

    def workers(self, kernel, variant=DEFAULT_VARIANT):
        return 2 if kernel.numel >= 1 << 16 else 1

    def estimate(self, kernel):  # its roofline: linear in the working set
        return self.launch_overhead + 1e-10 * sum(b.nbytes for b in (*kernel.inputs, *kernel.output_types))

    def launch(self, compiled, inputs, outputs):
        k, v = compiled.kernel, compiled.variant
        memory = Calibration(0.0, cache=self.CACHE, stream=self.STREAM).memory(k)
        return self.OVERHEAD + self.WAKE * (self.workers(k, v) > 1) + _work_part(k, self, v) * memory


def test_calibration_measures_the_thread_wake_up_the_cache_and_the_streaming_rate_and_charges_them():
    device = CacheDevice()
    calibrations = Calibrations(persist=False)
    c = calibrations.get(device)
    assert c.cache == CacheDevice.CACHE
    assert math.isclose(c.parallel, CacheDevice.WAKE, rel_tol=0.05)
    assert math.isclose(c.stream, CacheDevice.STREAM, rel_tol=0.1)
    large = micro_kernels()[1]  # streamed: its working set at the rate the model streams it
    streamed = CacheDevice.STREAM * _work_part(large, device, Variant())
    assert math.isclose(c.bandwidth, sum(b.nbytes for b in (*large.inputs, *large.output_types)) / streamed,
                        rel_tol=0.05)
    small, big = row_sum(64, 1024), row_sum(4096, 4096)  # 256 KiB and 64 MiB: in and out of the cache
    for k in (small, big):  # a plan's launch reads its inputs from memory: at least their bytes at that rate
        fresh = c.fresh * k.output_types[0].nbytes
        assert calibrations.output_cost(k, device, seconds=1.0) == pytest.approx(fresh)
        assert calibrations.output_cost(k, device) == pytest.approx(fresh + k.inputs[0].nbytes / c.bandwidth)
    for k in (small, large):  # each predicted from the other shapes' micro-benchmarks alone
        v = Variant()
        assert abs(math.log2(calibrations.predict(k, device, v) / device.launch(device.compile(k, v), [], []))) < 0.5


class BarrierDevice(FamilyDevice):
    """A CPU runtime's OpenCL: every work item pays BARRIER per work-group barrier it waits at, on top of the
    roofline."""

    BARRIER = 8e-10
    barrier_loops = True

    def launch(self, compiled, inputs, outputs):
        k, v = compiled.kernel, compiled.variant
        return _work_part(k, self, v) + self.BARRIER * launch_size(k, v)[0] * barriers(k, v)


def test_calibration_measures_what_a_barrier_costs_each_work_item_and_charges_group_reduces_for_it():
    device = BarrierDevice()
    calibrations = Calibrations(persist=False)
    assert math.isclose(calibrations.get(device).barrier, BarrierDevice.BARRIER, rel_tol=0.05)
    k = row_sum(4096, 256)
    for v in (Variant(), Variant(group=16), Variant(group=256)):
        measured = device.launch(device.compile(k, v), [], [])
        assert abs(math.log2(calibrations.predict(k, device, v) / measured)) < 0.5
    assert calibrations.predict(k, device, Variant(group=256)) > 4 * calibrations.predict(k, device, Variant())
    assert Calibrations(persist=False).get(FamilyDevice()).barrier == 0.0  # barriers in hardware: not measured


class GpuBarrierDevice(FamilyDevice):
    """A GPU of 4 compute units: each round of the work-groups they hold at once pays BARRIER per barrier of a
    group reduce's tree, on top of the roofline."""

    BARRIER = 2e-7
    is_gpu = True
    compute_units = 4

    def launch(self, compiled, inputs, outputs):
        k, v = compiled.kernel, compiled.variant
        tree = group_rounds(k, v, self) * barriers(k, v) if v.group > 1 else 0
        return _work_part(k, self, v) + self.BARRIER * tree


def test_calibration_measures_what_a_gpu_barrier_costs_each_round_of_groups_and_prices_long_trees_above_short():
    """On a GPU a tree's barriers cost per round of the groups the device holds at once: 1024-item groups (2 at
    once per unit) wait in 8x the rounds of 128-item ones (16 at once), and at 11 barriers against 8."""
    device = GpuBarrierDevice()
    calibrations = Calibrations(persist=False)
    assert math.isclose(calibrations.get(device).barrier, GpuBarrierDevice.BARRIER, rel_tol=0.05)
    k = row_sum(8192, 1024)
    assert group_rounds(k, Variant(group=1024), device) == 1024 and group_rounds(k, Variant(group=128), device) == 128
    for v in (Variant(), Variant(group=128), Variant(group=1024)):
        measured = device.launch(device.compile(k, v), [], [])
        assert abs(math.log2(calibrations.predict(k, device, v) / measured)) < 0.5
    long, short = (Variant(group=g) for g in (1024, 128))
    charged = calibrations.predict(k, device, long) - calibrations.predict(k, device, short)
    assert charged == pytest.approx(GpuBarrierDevice.BARRIER * (1024 * 11 - 128 * 8), rel=0.1)


def test_barriers_count_a_group_reduces_tree_per_split_reduce_and_a_staged_reduces_two_per_tile():
    k = row_sum(8, 1024)
    assert barriers(k, Variant()) == 0
    assert barriers(k, Variant(group=256)) == 9  # one before the tree, one per halving of 256
    assert barriers(matmul(64, 64, 64), Variant(local_size=64, tile=4, upcast=4, smem=16)) == 2 * 64 // 16


class WaitingDevice(CacheDevice):
    """A CacheDevice on a loaded machine: two of every three launches on several threads wait WAIT more (a
    descheduled thread), longer than the large copy's work; the best launches never wait."""

    WAKE, WAIT = 1e-5, 2e-2

    def __init__(self) -> None:
        super().__init__()
        self.launches = 0

    def estimate(self, kernel):  # ten times faster than CacheDevice: the large copy's work is under WAIT
        return self.launch_overhead + 1e-11 * sum(b.nbytes for b in (*kernel.inputs, *kernel.output_types))

    def launch(self, compiled, inputs, outputs):
        seconds = super().launch(compiled, inputs, outputs)
        if self.workers(compiled.kernel, compiled.variant) > 1:
            self.launches += 1
            seconds += self.WAIT * (self.launches % 3 != 0)
        return seconds


def test_a_wait_of_median_launches_is_the_wake_up_and_not_taken_from_the_best_launches_memory_terms():
    device = WaitingDevice()
    c = Calibrations(persist=False).get(device)
    assert math.isclose(c.parallel, WaitingDevice.WAKE + WaitingDevice.WAIT, rel_tol=0.05)  # what a trial pays
    assert math.isclose(c.stream, CacheDevice.STREAM, rel_tol=0.1)
    large = micro_kernels()[1]
    streamed = CacheDevice.STREAM * _work_part(large, device, Variant())
    assert math.isclose(c.bandwidth, sum(b.nbytes for b in (*large.inputs, *large.output_types)) / streamed,
                        rel_tol=0.05)
    calibrations = Calibrations(persist=False)
    for k in (large, row_sum(1 << 16, 64)):  # threads woken: predicted as a median launch, its wait included
        v = Variant()
        median = sorted(device.launch(device.compile(k, v), [], []) for _ in range(3))[1]
        assert device.workers(k, v) > 1 and abs(math.log2(calibrations.predict(k, device, v) / median)) < 0.5


def test_every_micro_benchmark_reads_each_input_it_declares():
    """An unread input would count in the roofline's bytes and the working set the cache term reads."""
    for k in (*micro_kernels(), *op_probes()):
        read = {e.input for e in schedule(k.exprs()) if isinstance(e, Load)}
        assert read == set(range(len(k.inputs))), k


class ElsewhereDevice(FamilyDevice):
    """A device in a pool of its own that does not say what its cache is."""

    cache_bytes = None
    pool = "elsewhere"


def test_without_a_known_cache_there_is_no_cache_term():
    device = ElsewhereDevice()
    host = FamilyDevice()
    host.cache_bytes = None  # the host's, read from Linux, for a device that compiles kernels; not numpy's
    assert cache_bytes(host) > 0 and cache_bytes(NumpyDevice(threads=1)) == 0 and cache_bytes(device) == 0
    c = Calibrations(persist=False).get(device)
    assert c.cache == 0 and c.stream == 1 and c.memory(row_sum(4096, 4096)) == 1


def test_the_cache_term_ramps_between_the_working_sets_stream_was_measured_on():
    """No miss at the cached copy's working set (where ``stream`` was timed in the cache), all of it at twice the
    cache, log-linear between: half the cache is already partly streamed."""
    from engine.tuning.calibrate import _cached_copy, _elementwise

    cache = float(1 << 25)
    c = Calibration(0.0, cache=cache, stream=4.0)
    assert c.memory(_elementwise(_cached_copy(cache), "add")) == 1.0
    assert c.memory(row_sum(4096, 4096)) == 4.0  # 64 MiB: twice the cache
    assert 1.0 < c.memory(row_sum(2048, 2048)) < c.memory(row_sum(2048, 4096)) < 4.0  # 16 and 32 MiB

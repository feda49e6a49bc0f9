"""Budgets, search order, cancellation, the calibrated model and the skip rule, on fake slow devices.

A fake device computes with numpy (so variants verify) but reports the launch times it is told to and advances
an injected clock by them: nothing here depends on how fast this machine is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest

import sample_graphs
from engine import load
from engine.devices import NumpyDevice
from engine.kernel.ir import Kernel
from engine.kernel.schedule import DEFAULT_VARIANT, Variant
from engine.pipeline import Options, compile_program, compile_stages, extract, tune_plan
from engine.tuning import OK, Budget, Tuner, tune
from engine.tuning.calibrate import Calibrations, shape
from engine.tuning.space import seeds
from tests.test_autotune import matmul, row_sum


@dataclass
class Clock:
    now: float = 0.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Slow(NumpyDevice):
    """A tunable device whose launches of ``variant`` take ``seconds(variant)`` on ``clock``."""

    clock: Clock = field(default_factory=Clock)
    seconds: object = lambda v: 1.0
    launches: list[tuple[float, Variant]] = field(default_factory=list)
    """(clock before, variant) of every launch."""
    name: str = "slow"
    tunable = True

    def __post_init__(self) -> None:
        super().__init__()

    def variant_error(self, kernel: Kernel, variant: Variant) -> str | None:
        return None

    def launch(self, compiled, inputs, outputs) -> float:
        super().launch(compiled, inputs, outputs)
        self.launches.append((self.clock.now, compiled.variant))
        took = self.seconds(compiled.variant)  # type: ignore[operator]
        self.clock.now += took
        return took


def flat(kernel: Kernel, device, variant: Variant) -> float:
    """A model that prefers the seeds in reverse order (the default last), then any other variant."""
    order = seeds(kernel, False)
    return 1.0 + (len(order) - order.index(variant) if variant in order else 100)


def test_the_search_starts_with_the_models_best_not_the_default():
    device = Slow()
    k = row_sum()
    result = tune(k, device, Budget(variants=2, seconds=100), model=flat, clock=device.clock)
    best_first = sorted(seeds(k, False), key=lambda v: flat(k, device, v))
    assert [t.variant for t in result.trials] == best_first[:2] and DEFAULT_VARIANT not in best_first[:2]


@pytest.mark.parametrize("each", [0.7, 3.0, 9.0])
def test_the_budget_holds_within_one_and_a_half_times(each):
    device = Slow(seconds=lambda v: each)
    result = tune(row_sum(), device, Budget(variants=24, seconds=10.0), model=flat, clock=device.clock)
    assert result.ok and device.clock.now <= 1.5 * 10.0
    assert result.elapsed == device.clock.now  # the elapsed time is the injected clock's


def test_a_variant_whose_first_run_exceeds_what_is_left_is_not_repeated():
    device = Slow(seconds=lambda v: 12.0)
    result = tune(row_sum(), device, Budget(seconds=10.0), model=flat, clock=device.clock)
    (trial,) = result.trials
    assert trial.status == OK and trial.times == (12.0,) and len(device.launches) == 1


def test_the_total_budget_bounds_the_next_kernels_search():
    device = Slow(seconds=lambda v: 1.0)
    tuner = Tuner(budget=Budget(variants=24, seconds=6.0, total=5.0), use_cache=False, clock=device.clock,
                  calibrations=Calibrations(persist=False, fit=False))
    first = tuner.tune(row_sum(), device)
    second = tuner.tune(matmul(), device)
    assert first.elapsed <= 6.0 * 1.5 and tuner.spent == device.clock.now <= 5.0 * 1.5
    assert second.elapsed <= max(5.0 - first.elapsed, 0.0) * 1.5 + 1.0  # one launch may overrun
    assert tuner.tune(matmul(24, 40, 18), device).trials == ()  # nothing left: not even started


def test_cancel_never_starts_another_launch():
    device = Slow(seconds=lambda v: 2.0)
    flag = {"at": math.inf}

    def cancel() -> bool:
        if len(device.launches) >= 3 and flag["at"] == math.inf:
            flag["at"] = device.clock.now  # pressed during the third launch
        return device.clock.now >= flag["at"]

    result = tune(row_sum(), device, Budget(variants=24, seconds=1000), cancel=cancel, model=flat, clock=device.clock)
    assert result.cancelled and len(device.launches) == 3
    assert all(start < flag["at"] for start, _ in device.launches)


def test_cancel_while_building_launches_nothing():
    device = Slow()
    built = []
    compile_ = device.compile
    device.compile = lambda k, v=DEFAULT_VARIANT: built.append(v) or compile_(k, v)  # type: ignore[method-assign]
    result = tune(row_sum(), device, Budget(seconds=100), cancel=lambda: bool(built), model=flat, clock=device.clock)
    assert result.cancelled and built and not device.launches and not result.trials


def test_measured_trials_refit_the_model():
    device = Slow(seconds=lambda v: 0.5)
    calibrations = Calibrations(persist=False, fit=False)
    k = matmul()
    before = calibrations.predict(k, device, DEFAULT_VARIANT)
    for _ in range(4):
        calibrations.observe(k, device, DEFAULT_VARIANT, 0.5)
    after = calibrations.predict(k, device, DEFAULT_VARIANT)
    assert abs(math.log2(after / 0.5)) < abs(math.log2(before / 0.5)) and abs(math.log2(after / 0.5)) < 1
    # the shape's factor moved too: another kernel of the same shape is predicted closer to what was measured
    other = matmul(24, 40, 18)
    assert shape(other) == shape(k) and calibrations.predict(other, device) > before


def test_a_hopeless_device_is_skipped_and_said_so():
    """A device predicted (and calibrated) 1000x slower than numpy is never tuned for the plan's kernels."""
    class Hopeless(NumpyDevice):
        name = "hopeless"

        def launch(self, compiled, inputs, outputs) -> float:
            return 1000 * super().launch(compiled, inputs, outputs)

        def predict(self, kernel, variant=DEFAULT_VARIANT) -> float:
            return 1000 * self.estimate(kernel)

    c = compile_program(load(sample_graphs.path("mlp.small")), [NumpyDevice(), Hopeless()],
                        Options(tune_cache=False, tune_budget=Budget(variants=2, seconds=5.0, total=30.0)))
    assert c.verification.ok and c.skipped and not any(kn.device == "hopeless" for kn in c.tuning)
    assert {kn.device for kn in c.skipped} == {"hopeless"}
    for skip in c.skipped.values():
        assert skip.on == "numpy" and skip.predicted > 8 * skip.measured
        assert str(skip).startswith("skipped: predicted ") and "measured on numpy" in str(skip)
    assert c.plan.unmeasured == 0 and c.plan.coverage().startswith("all ")


def test_a_plan_whose_budget_ended_says_how_many_launches_are_predicted_only():
    c = compile_program(load(sample_graphs.path("attention.small")), [NumpyDevice()],
                        Options(tune_cache=False, tune_budget=Budget(seconds=1.0, total=0.0)))
    n = len(c.plan.launches())
    assert not c.tuning and not c.problems and c.plan.unmeasured == n > 1
    assert c.plan.coverage() == f"{n} of {n} launches predicted only" and c.verification.ok


def test_executed_steps_refit_the_model():
    seen = {}
    for c in compile_stages(load(sample_graphs.path("mlp.small")), [NumpyDevice()],
                            Options(tune_cache=False, tune_budget=Budget(variants=1, seconds=5.0, total=10.0))):
        seen[c.stage] = c.calibrations.by_device["numpy"].observations if c.calibrations else 0
    assert seen["executed"] == seen["plan"] + len(c.plan.launches()) and c.plan.unmeasured == 0


def test_when_the_budget_ends_the_plan_is_not_switched_to_untimed_kernels():
    """A device predicted fast but 1 s a launch: its first kernel is timed, then the budget ends.  Numpy, still
    predicted faster than that measured second, is not put in the plan for that class without a timing."""
    class Optimist(Slow):
        def predict(self, kernel, variant=DEFAULT_VARIANT) -> float:
            return 1e-9

    device = Optimist(name="optimist", seconds=lambda v: 1.0)
    stages = compile_stages(load(sample_graphs.path("mlp.small")), [NumpyDevice(), device], Options(tune=False, tune_cache=False))
    c = next(c for c in stages if c.stage == "kernelized")
    tuner = Tuner(budget=Budget(variants=4, seconds=10.0, total=1.0), use_cache=False, clock=device.clock,
                  calibrations=Calibrations(persist=False, fit=False))
    tune_plan(c, tuner)
    extract(c)
    timed = [kn for kn in c.tuning if c.tuning[kn].ok]
    assert [kn.device for kn in timed] == ["optimist"] and c.untried
    assert all(kn.device == "numpy" and kn not in c.tuning for kn in c.untried)
    first = next(s for s in c.plan.launches() if s.kernel.key == c.kernelization.candidates[timed[0].candidate].kernel.key)
    assert first.device == "optimist" and first.measured
    assert c.plan.unmeasured == len(c.plan.launches()) - 1


def _share_test(device, total=30.0):
    stages = compile_stages(load(sample_graphs.path("mlp.small")), [device], Options(tune=False, tune_cache=False))
    c = next(c for c in stages if c.stage == "kernelized")
    tuner = Tuner(budget=Budget(variants=4, seconds=5.0, total=total), use_cache=False, clock=device.clock,
                  calibrations=Calibrations(persist=False, fit=False))
    tune_plan(c, tuner)
    extract(c)
    return c


class SlowJointBuild(Slow):
    """Builds its variants together in 10 s (PoCL's, or a GPU driver's, joint build can take seconds)."""

    def compile_many(self, jobs) -> None:
        self.clock.now += 10.0


@pytest.mark.parametrize("total", [30.0, 8.0])
def test_a_slow_joint_build_does_not_keep_the_plans_launches_from_being_timed(total):
    """Longer than a kernel's share (30 s), or than the whole budget (8 s): the H200's attention plan had 0 of 9
    launches timed.  Every launch of the plan gets a first look (its best predicted variant, built alone) before
    any search goes on to build the rest, so every launch is measured."""
    device = SlowJointBuild(name="slowbuild", seconds=lambda v: 0.1)
    c = _share_test(device, total)
    n = len(c.plan.launches())
    assert n > 1 and not c.problems and c.plan.unmeasured == 0


def test_a_first_look_is_resumed_by_the_search_not_repeated():
    device = Slow(seconds=lambda v: 0.1)
    tuner = Tuner(budget=Budget(variants=4, seconds=100.0, total=100.0), use_cache=False, clock=device.clock,
                  calibrations=Calibrations(persist=False, fit=False))
    k = row_sum()
    look = tuner.tune(k, device, first=True)
    assert len(look.trials) == 1 and not tuner.searched(k, device)
    looked = len(device.launches)
    full = tuner.tune(k, device)
    assert tuner.searched(k, device) and full.trials[0] is look.trials[0] and len(full.trials) == 4
    assert all(v != look.trials[0].variant for _, v in device.launches[looked:])  # not launched again
    assert full.elapsed == device.clock.now  # the look's seconds count in the kernel's budget


def test_kernels_whose_share_ended_before_their_first_launch_stay_predicted_not_failed():
    """The first kernel's build takes longer than the whole budget (its one launch still runs: it is measured);
    the other kernels get no launch, so they are neither timed nor failures for extraction to avoid; the plan
    launches them at their predictions and says so."""
    class SlowBuild(Slow):
        def compile(self, kernel, variant):
            self.clock.now += 40.0
            return super().compile(kernel, variant)

    device = SlowBuild(name="slowbuild", seconds=lambda v: 1.0)
    c = _share_test(device)
    assert len(device.launches) == 1 and not c.problems  # the first kernel's verification run, its one time
    assert all(math.isfinite(t) for t in c.kernel_times.values())
    n = len(c.plan.launches())
    assert n > 1 and c.plan.unmeasured == n - 1 and c.plan.coverage() == f"{n - 1} of {n} launches predicted only"


def test_a_first_look_whose_variant_fails_goes_on_to_the_other_variants():
    """The best predicted variant (here the default) does not build: the kernel is not given up as one that no
    variant runs; its search goes on at once and the plan launches a variant that ran."""
    class NoDefault(Slow):
        def compile(self, kernel, variant=DEFAULT_VARIANT):
            if variant == DEFAULT_VARIANT:
                raise RuntimeError("the default does not build here")
            return super().compile(kernel, variant)

    device = NoDefault(name="nodefault", seconds=lambda v: 0.1)
    c = _share_test(device)
    assert not c.problems and c.plan.unmeasured == 0
    assert all(s.variant != DEFAULT_VARIANT for s in c.plan.launches())

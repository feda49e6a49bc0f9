"""Fault injection on the OpenCL device: build failures, launch errors, a device that disappears.

The autotuner records each failure and moves on, extraction falls back to a device that
works, and ``Compilation.problems`` says what happened (the explorer shows it).  Faults come
through ``OpenCLDevice.fault``; a lost device is the real OpenCL error (DEVICE_NOT_AVAILABLE).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import engine
import sample_graphs
from engine.devices import NumpyDevice
from engine.devices.opencl import DeviceLostError, OpenCLKernel, discover
from engine.kernel.render.opencl import generate
from engine.kernel.schedule import DEFAULT_VARIANT
from engine.pipeline import Options, compile_program, extract, run
from engine.tuning import FAILED, OK, Budget, TuneCache, tune
from tests.test_autotune import matmul

OPENCL = discover()


class SlowNumpy(NumpyDevice):
    """The numpy device with estimates a second slower: plans prefer OpenCL until it fails."""

    def estimate(self, kernel) -> float:
        return 1.0 + super().estimate(kernel)


@pytest.fixture
def device():
    if not OPENCL:
        pytest.skip("no OpenCL platform found (CI installs PoCL)")
    found = discover()[0]  # a fresh device per test: faults and a lost state stay with it
    yield found
    found.fault = None


def lost_error(routine: str = "clEnqueueNDRangeKernel"):
    """What pyopencl raises when the device has gone away."""
    import pyopencl as cl

    return cl.Error(cl._cl._ErrorRecord(f"{routine} failed: DEVICE_NOT_AVAILABLE", -2, routine))


def options(**kw) -> Options:
    return Options(tune_budget=Budget(variants=4, seconds=10.0), tune_cache=False, **kw)


def test_variants_that_fail_to_build_are_recorded_and_skipped(device):
    kernel = matmul()
    default_source = generate(kernel, DEFAULT_VARIANT)

    def fault(what, detail):
        if what == "build" and detail != default_source:
            raise RuntimeError("injected: clBuildProgram failed: BUILD_PROGRAM_FAILURE")

    device.fault = fault
    result = tune(kernel, device, Budget(variants=6))
    assert result.ok and result.best == DEFAULT_VARIANT and math.isfinite(result.seconds)
    failed = [t for t in result.trials if t.status == FAILED]
    assert failed and all("BUILD_PROGRAM_FAILURE" in t.reason for t in failed)
    assert [t.variant for t in result.trials if t.status == OK] == [DEFAULT_VARIANT]
    assert not device.lost


def test_a_kernel_that_errors_at_launch_costs_infinity(device):
    def fault(what, detail):
        if what == "launch":
            raise RuntimeError("injected: clEnqueueNDRangeKernel failed: OUT_OF_RESOURCES")

    device.fault = fault
    result = tune(matmul(), device, Budget(variants=4))
    assert not result.ok and result.seconds == math.inf and len(result.trials) == 4
    assert all(t.status == FAILED and t.reason.startswith("launch: injected") for t in result.trials)
    assert "OUT_OF_RESOURCES" in result.failure
    assert not device.lost  # one kernel failing does not condemn the device


def test_failed_launches_in_tuning_fall_back_to_numpy(device):
    program = engine.load(sample_graphs.path("mlp.small"))
    device.fault = lambda what, detail: _raise(RuntimeError("injected launch error")) if what == "launch" else None
    c = compile_program(program, [SlowNumpy(), device], options())
    assert c.verification is not None and c.verification.ok
    assert {kn.device for kn in c.plan_kernels()} == {"numpy"}
    failed = [kn for kn, r in c.tuning.items() if not r.ok]
    assert failed and all(c.kernel_times[kn] == math.inf and kn.device == device.name for kn in failed)
    assert c.problems and all("no variant ran (launch: injected launch error); extraction avoids it" in p
                              for p in c.problems)


def test_a_device_lost_while_tuning(device):
    """After two launches the device stops answering: tuning stops on it, the plan moves to numpy."""
    calls = []

    def fault(what, detail):
        if what == "launch":
            calls.append(detail)
            if len(calls) > 2:
                raise lost_error()

    device.fault = fault
    program = engine.load(sample_graphs.path("softmax.small"))
    c = compile_program(program, [SlowNumpy(), device], options())
    assert device.lost and "DEVICE_NOT_AVAILABLE" in device.lost
    assert c.verification is not None and c.verification.ok
    assert {kn.device for kn in c.plan_kernels()} == {"numpy"}
    assert all(t == math.inf for kn, t in c.kernel_times.items() if kn.device == device.name)
    assert any(p.startswith(f"device {device.name} was lost while tuning") and p.endswith("its kernels are not used")
               for p in c.problems), c.problems
    calls.clear()
    for operation in (lambda: device.upload(np.zeros(4)), lambda: device.build("kernel void k() {}")):
        with pytest.raises(DeviceLostError, match="is lost"):  # refused at once, nothing reaches the driver
            operation()
    assert not calls


def test_a_lost_device_is_not_cached(device, tmp_path):
    device.fault = lambda what, detail: _raise(lost_error()) if what == "launch" else None
    result = tune(matmul(), device, Budget(variants=4), cache=TuneCache(tmp_path))
    assert not result.ok and len(result.trials) == 1 and "DEVICE_NOT_AVAILABLE" in result.failure
    assert not list(tmp_path.glob("*.json"))  # a transient failure is not remembered
    again = tune(matmul(), device, Budget(variants=4))
    assert not again.ok and again.trials[0].reason.startswith("upload:") and "is lost" in again.failure


def _raise(error: Exception):
    raise error


def test_a_device_lost_while_running_the_plan(device):
    """Without tuning the plan runs on OpenCL; the device vanishes at the first launch: re-planned on numpy."""
    program = engine.load(sample_graphs.path("mlp.small"))
    c = compile_program(program, [SlowNumpy(), device], Options(tune=False, tune_cache=False, execute=False))
    assert any(kn.device == device.name for kn in c.plan_kernels())

    def fault(what, detail):
        if what == "launch":
            raise lost_error()

    device.fault = fault
    verification = run(c)
    assert verification.ok and {kn.device for kn in c.plan_kernels()} == {"numpy"}
    assert len(c.problems) == 1 and "DEVICE_NOT_AVAILABLE" in c.problems[0]
    assert c.problems[0].endswith("its kernels are not used")


def test_one_kernel_failing_at_run_time_is_planned_around(device):
    program = engine.load(sample_graphs.path("residual_mlp.small"))
    c = compile_program(program, [SlowNumpy(), device], Options(tune=False, tune_cache=False, execute=False))
    opencl = [kn for kn in c.plan_kernels() if kn.device == device.name]
    assert len(opencl) >= 2
    bad = c.kernelization.candidates[opencl[0].candidate].kernel

    def fault(what, detail):
        if what == "launch" and isinstance(detail, OpenCLKernel) and detail.kernel.key == bad.key:
            raise RuntimeError("injected: CL_INVALID_KERNEL_ARGS")

    device.fault = fault
    assert run(c).ok and not device.lost
    used = c.plan_kernels()
    assert all(c.kernelization.candidates[kn.candidate].kernel.key != bad.key or kn.device == "numpy" for kn in used)
    assert any(kn.device == device.name for kn in used)  # the other kernels stay on OpenCL
    assert len(c.problems) == 1 and "CL_INVALID_KERNEL_ARGS" in c.problems[0] and "re-planned without it" in c.problems[0]


@pytest.mark.parametrize("extractor", ["greedy", "dag", "ilp"])
def test_extraction_never_picks_an_infinite_kernel(device, extractor):
    program = engine.load(sample_graphs.path("mlp.small"))
    c = compile_program(program, [SlowNumpy(), device], Options(tune=False, tune_cache=False, execute=False, extractor=extractor))
    for kn in c.kernel_times:
        if kn.device == device.name:
            c.kernel_times[kn] = math.inf  # type: ignore[index]
    extract(c)
    assert {kn.device for kn in c.plan_kernels()} == {"numpy"} and math.isfinite(c.extraction.dag_cost)

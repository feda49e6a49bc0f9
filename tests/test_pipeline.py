"""Whole compilations: every plan, on every device, equals the reference interpreter."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from test_random_graphs import programs

import sample_graphs
from engine import Tensor, from_tensors, load
from engine.devices.numpy_device import LibraryDevice, NumpyDevice
from engine.devices.opencl import discover
from engine.extract import Pins
from engine.pipeline import Options, compile_program, extract, run
from engine.program.init import Init
from engine.tuning import Budget
from engine.tuning.space import seeds

SMALL = [n for n in sample_graphs.names() if n.endswith(".small")]
OPENCL = discover()
CPU_OPENCL = [d for d in OPENCL if not d.is_gpu][:1]
needs_opencl = pytest.mark.skipif(not CPU_OPENCL, reason="no OpenCL CPU device (install pocl-opencl-icd)")
PREDICTED = Options(tune=False, tune_cache=False)  # the nominal model: no stored calibration
"""The cost model's times and suggested variants: plans that do not depend on timing noise."""
QUICK_TUNE = Options(tune_budget=Budget(variants=4, seconds=5.0))


def assert_verified(compilation) -> None:
    bad = [o for o in compilation.verification.outputs if not o.ok]
    assert not bad, f"{bad}\n" + "\n\n".join(str(s.kernel) for s in compilation.plan.launches())


@pytest.mark.parametrize("name", SMALL)
def test_sample_on_numpy(name):
    compilation = compile_program(load(sample_graphs.path(name)), [NumpyDevice()])
    assert_verified(compilation)
    assert {s.device for s in compilation.plan.launches()} <= {"numpy"}


@pytest.mark.parametrize("name", ["matmul.small", "mlp.small", "transpose_fusion.small"])
def test_library_matmul_competes_and_wins_on_matmuls(name):
    compilation = compile_program(load(sample_graphs.path(name)), [NumpyDevice(), LibraryDevice()], PREDICTED)
    assert_verified(compilation)
    assert "blas" in {s.device for s in compilation.plan.launches()}


@settings(max_examples=300, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_random_programs_on_numpy(built):
    assert_verified(compile_program(built.program, [NumpyDevice(), LibraryDevice()], PREDICTED))


def test_numpy_outputs_keep_the_buffers_the_reduce_body_shared_in_place():
    """rmsnorm(|x|) on one element: the output step recomputes |x| = relu(x) + relu(-x), whose buffer the body
    shared in place with relu(x)'s; freeing relu(x)'s buffer let x / sqrt(...) overwrite |x| (found by CI's
    random programs: 0 came out as 2)."""
    x = Tensor.input("x", (), init=Init("full", {"value": 0.0}))
    program = from_tensors([x.abs().reshape(1).rmsnorm(axis=0, eps=0.5).named("y")])
    c = compile_program(program, [NumpyDevice()], PREDICTED)
    assert_verified(c)
    assert c.execution.outputs["y"].tolist() == [0.0]


@pytest.mark.parametrize("dtype", ["f32", "i32"])
def test_a_contractions_factor_read_again_by_the_other_keeps_its_buffer(dtype):
    """``sum(x * sigmoid(x))`` over a computed x (here ``a + b``, or an int cast to float): both factors are read
    by the dot product after the body, so ``neg(x)`` must not be computed into x's buffer (found by random
    programs: ``sum(silu(int))`` came out as ``sum(sigmoid(x)**2)``)."""
    a = Tensor.input("a", (5,), dtype, init=Init("full", {"value": 1}))
    b = Tensor.input("b", (5,), dtype, init=Init("full", {"value": 0}))
    for devices in ([NumpyDevice()], [NumpyDevice(), LibraryDevice()]):
        c = compile_program(from_tensors([(a + b).silu().sum().named("y")]), devices, PREDICTED)
        assert_verified(c)
        assert float(c.execution.outputs["y"]) == pytest.approx(5 / (1 + math.exp(-1)), rel=1e-6)


@needs_opencl
@pytest.mark.parametrize("name", SMALL)
def test_sample_on_opencl(name):
    compilation = compile_program(load(sample_graphs.path(name)), CPU_OPENCL, PREDICTED)
    assert_verified(compilation)
    assert {s.device for s in compilation.plan.launches()} == {CPU_OPENCL[0].name}


@needs_opencl
@pytest.mark.parametrize("name", ["elementwise.small", "softmax.small", "matmul.small", "attention.small"])
def test_tuned_sample_on_opencl_launches_the_tuned_variants(name):
    compilation = compile_program(load(sample_graphs.path(name)), [NumpyDevice(), *CPU_OPENCL], QUICK_TUNE)
    assert_verified(compilation)
    chosen = compilation.plan_kernels()
    assert chosen and all(kn in compilation.tuning for kn in chosen)  # the plan runs only timed kernels
    launched = {(s.kernel.key, s.device): s.variant for s in compilation.plan.launches()}
    for kn in chosen:
        result = compilation.tuning[kn]
        kernel = compilation.kernelization.candidates[kn.candidate].kernel
        assert launched[kernel.key, kn.device] == result.best
        assert compilation.kernel_times[kn] == result.seconds


@needs_opencl
@settings(max_examples=300, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_random_programs_on_opencl(built):
    assert_verified(compile_program(built.program, CPU_OPENCL, PREDICTED))


@needs_opencl
def test_split_sum_plan_on_opencl_equals_the_reference():
    """A sum over 2^20 elements has the split form in its class; a plan pinned to it runs two kernels and verifies.

    Its partial kernel (1024 outputs, each a reduce over 1024) gets the group-reduce seeds on a GPU.
    """
    program = from_tensors([Tensor.input("x", (1 << 20,)).sum().named("y")])
    c = compile_program(program, CPU_OPENCL, Options(tune=False, tune_cache=False, execute=False))
    eg, kz = c.egraph, c.kernelization
    y = eg.output_classes()["y"]
    split = [n for n in eg.eclass(y).nodes if eg.node(n).op == "reduce_sum"
             and any(eg.node(f).op == "reduce_sum" for f in eg.eclass(eg.node(n).children[0]).nodes)]
    assert len(split) == 1
    extract(c, Pins().node(eg, split[0], kz))
    run(c)
    assert_verified(c)
    kernels = [s.kernel for s in c.plan.launches()]
    assert [(k.numel, k.reduce.size) for k in kernels] == [(1024, 1024), (1, 1024)]
    assert any(v.group > 1 for v in seeds(kernels[0], gpu=True))


def test_a_run_measures_the_steady_state_and_verifies_every_run(monkeypatch):
    """The plan runs ``PLAN_RUNS`` times: its measured times are the medians of the reruns (the first run's
    one-time costs shown apart), and a wrong output in any run fails the verification."""
    import engine.pipeline as pipeline
    from engine.plan import Execution, steady

    c = compile_program(load(sample_graphs.path("mlp.small")), [NumpyDevice()], PREDICTED)
    assert_verified(c)
    e = c.execution
    assert e.reruns == pipeline.PLAN_RUNS - 1 and e.first is not None and e.first > 0
    assert f"median of {e.reruns} reruns; first run " in e.describe()
    calls = []
    original = pipeline.execute

    def second_run_wrong(*args, **kwargs):
        out = original(*args, **kwargs)
        calls.append(out)
        if len(calls) == 2:
            return Execution({k: v + 1 for k, v in out.outputs.items()}, out.step_times, out.wall)
        return out

    monkeypatch.setattr(pipeline, "execute", second_run_wrong)
    assert not run(c).ok and len(calls) == pipeline.PLAN_RUNS
    runs = [Execution({}, (0.0, 9.0, 3.0), 12.0), Execution({}, (0.0, 2.0, 1.0), 3.0), Execution({}, (0.0, 4.0, 5.0), 9.0)]
    s = steady(runs)
    assert (s.step_times, s.wall, s.first, s.reruns) == ((0.0, 3.0, 3.0), 6.0, 12.0, 2)
    assert s.describe() == "6.00 s (median of 2 reruns; first run 12.0 s)" and steady(runs[:1]) is runs[0]


def test_runs_with_the_same_outputs_keep_one_copy_of_them(monkeypatch):
    """A plan's outputs can be most of the machine's memory: a rerun whose outputs hold the same bytes as an
    earlier run's keeps that run's arrays, and only those (a signed zero or a NaN payload apart is not the
    same, and is verified on its own)."""
    import numpy as np

    import engine.pipeline as pipeline
    from engine.plan import Execution

    c = compile_program(load(sample_graphs.path("mlp.small")), [NumpyDevice()], PREDICTED)
    kept = []
    original = pipeline.execute
    monkeypatch.setattr(pipeline, "execute", lambda *a, **k: kept.append(original(*a, **k)) or kept[-1])
    monkeypatch.setattr(pipeline, "steady", lambda runs: kept.extend(runs) or runs[-1])
    run(c)
    executed, shared = kept[:pipeline.PLAN_RUNS], kept[pipeline.PLAN_RUNS:]
    assert all(r.outputs is shared[0].outputs for r in shared)
    assert executed[1].outputs is not shared[0].outputs  # its own arrays were dropped

    def outputs(*values):
        return Execution({"y": np.array(values, np.float32)}, (1.0,))

    def nan(payload):
        return Execution({"y": np.array([np.float32(np.nan).view(np.uint32) ^ payload], np.uint32).view(np.float32)},
                         (1.0,))

    first, nan0 = outputs(0.0, 1.0), nan(0)
    assert pipeline._sharing_outputs(outputs(0.0, 1.0), [nan0, first]).outputs is first.outputs
    assert pipeline._sharing_outputs(nan(0), [first, nan0]).outputs is nan0.outputs
    for different in (outputs(-0.0, 1.0), nan(1), outputs(0.0), outputs(0.0, 1.0, 2.0)):
        assert pipeline._sharing_outputs(different, [first, nan0]) is different

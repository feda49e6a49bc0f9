"""Whole compilations: every plan, on every device, equals the reference interpreter."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from test_random_graphs import programs

import sample_graphs
from engine import load
from engine.devices.numpy_device import LibraryDevice, NumpyDevice
from engine.devices.opencl import discover
from engine.pipeline import compile_program

SMALL = [n for n in sample_graphs.names() if n.endswith(".small")]
OPENCL = discover()
CPU_OPENCL = [d for d in OPENCL if not d.is_gpu][:1]
needs_opencl = pytest.mark.skipif(not CPU_OPENCL, reason="no OpenCL CPU device (install pocl-opencl-icd)")


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
    compilation = compile_program(load(sample_graphs.path(name)), [NumpyDevice(), LibraryDevice()])
    assert_verified(compilation)
    assert "blas" in {s.device for s in compilation.plan.launches()}


@settings(max_examples=300, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_random_programs_on_numpy(built):
    assert_verified(compile_program(built.program, [NumpyDevice(), LibraryDevice()]))


@needs_opencl
@pytest.mark.parametrize("name", SMALL)
def test_sample_on_opencl(name):
    compilation = compile_program(load(sample_graphs.path(name)), CPU_OPENCL)
    assert_verified(compilation)
    assert {s.device for s in compilation.plan.launches()} == {CPU_OPENCL[0].name}


@needs_opencl
@settings(max_examples=300, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_random_programs_on_opencl(built):
    assert_verified(compile_program(built.program, CPU_OPENCL))

"""Extraction over memory pools and the ExecPlan built from it."""

from __future__ import annotations

import numpy as np
import pytest

import sample_graphs
from engine import Tensor, from_tensors, load
from engine.devices.numpy_device import LibraryDevice, NumpyDevice
from engine.devices.opencl import discover
from engine.extract import ExtractionError
from engine.kernel.ir import HOST
from engine.pipeline import Options, compile_program, run
from engine.plan import Allocate, Copy, Free, Launch

CPU_OPENCL = [d for d in discover() if not d.is_gpu][:1]
needs_opencl = pytest.mark.skipif(not CPU_OPENCL, reason="no OpenCL CPU device (install pocl-opencl-icd)")


def softmax_program():
    x = Tensor.input("x", (8, 16))
    return from_tensors([x.softmax().named("y"), (x * 2).named("z")])


def test_every_buffer_is_freed_after_its_last_use_and_outputs_stay():
    plan = compile_program(softmax_program(), [NumpyDevice()], Options(execute=False)).plan
    allocated, freed, last_read = {}, {}, {}
    for i, step in enumerate(plan.steps):
        if isinstance(step, Allocate):
            allocated[step.value] = i
        elif isinstance(step, Free):
            freed[step.value] = i
        elif isinstance(step, Launch):
            for v in step.inputs:
                assert v in allocated and v not in freed, "read before allocation or after free"
                last_read[v] = i
            for v in step.outputs:
                assert allocated[v] < i
    outputs = set(plan.outputs.values())
    assert outputs.isdisjoint(freed)
    assert set(freed) == set(allocated) - outputs
    for v, i in freed.items():  # freed right after its last reader
        assert i > last_read[v] and all(isinstance(s, Free) for s in plan.steps[last_read[v] + 1 : i])


def test_peak_memory_counts_live_buffers():
    plan = compile_program(softmax_program(), [NumpyDevice()], Options(execute=False)).plan
    sizes = [s.buffer.nbytes for s in plan.steps if isinstance(s, Allocate)]
    assert max(sizes) <= plan.peak_bytes <= sum(sizes)


def test_softmax_plan_is_one_row_kernel():
    compilation = compile_program(softmax_program(), [NumpyDevice()], Options(tune=False, tune_cache=False))
    assert compilation.verification.ok
    launches = compilation.plan.launches()
    assert len(launches) == 2  # the row kernel (max, sum of exp, the division), and x * 2
    assert sorted(len(s.kernel.stages) for s in launches) == [0, 2]


@needs_opencl
def test_a_device_pool_gets_copies_in_and_out():
    compilation = compile_program(softmax_program(), CPU_OPENCL, Options(tune=False, tune_cache=False))
    assert compilation.verification.ok
    copies = [s for s in compilation.plan.steps if isinstance(s, Copy)]
    pool = CPU_OPENCL[0].pool
    assert {(c.source[1], c.target[1]) for c in copies} == {(HOST, pool), (pool, HOST)}
    into = [c for c in copies if c.target[1] == pool]
    assert len(into) == 1  # x is copied once, though two kernels read it
    assert all(v[1] == pool for s in compilation.plan.launches() for v in (*s.inputs, *s.outputs))


@needs_opencl
def test_more_devices_never_make_the_extraction_worse():
    program = load(sample_graphs.path("mlp.small"))
    alone = compile_program(program, [NumpyDevice()], Options(execute=False, tune=False, tune_cache=False))
    mixed = compile_program(program, [NumpyDevice(), LibraryDevice(), *CPU_OPENCL], Options(tune=False, tune_cache=False))
    assert mixed.verification.ok
    assert mixed.extraction.dag_cost <= alone.extraction.dag_cost
    assert {s.device for s in mixed.plan.launches()} != {"numpy"}  # BLAS or OpenCL beat the generic numpy matmul


def test_no_device_for_a_kernel_is_a_clear_error():
    class Nothing(NumpyDevice):
        name = "nothing"

        def supports(self, kernel):
            return False

    with pytest.raises(ExtractionError, match="no device can compute output"):
        compile_program(softmax_program(), [Nothing()])


def test_run_on_other_inputs_verifies_them():
    compilation = compile_program(softmax_program(), [NumpyDevice()], Options(execute=False))
    x = np.linspace(-3, 3, 128, dtype=np.float32).reshape(8, 16)
    assert run(compilation, {"x": x}).ok
    np.testing.assert_allclose(compilation.execution.outputs["z"], x * 2)
    assert len(compilation.execution.step_times) == len(compilation.plan.steps)


def test_an_output_that_is_an_input_needs_no_kernel():
    x = Tensor.input("x", (3,))
    program = from_tensors({"y": (x + 1), "x_again": x.reshape((3,)) })
    compilation = compile_program(program, [NumpyDevice()])
    assert compilation.verification.ok

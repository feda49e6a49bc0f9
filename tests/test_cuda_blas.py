"""The cuBLAS device: discovery without cupy, the matmul mapping (run on numpy standing in for cupy, so CI checks
it without a GPU), extraction choosing it by its costs, and on a real CUDA GPU the math (TF32 off)."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

from engine import Tensor, from_tensors
from engine.devices import cuda_blas
from engine.devices.numpy_device import NumpyDevice
from engine.kernel.ir import Acc
from engine.pipeline import Options, compile_program


class _Event:
    def record(self) -> None:
        pass

    def synchronize(self) -> None:
        pass


class _Device:
    def __init__(self, index: int) -> None:
        pass

    def __enter__(self) -> None:
        pass

    def __exit__(self, *exc: object) -> None:
        pass


def _numpy_as_cupy() -> types.SimpleNamespace:
    """numpy behind cupy's names: the device's own logic runs on the host."""
    cuda = types.SimpleNamespace(Device=_Device, Event=_Event, get_elapsed_time=lambda a, b: 1e-3,
                                 runtime=types.SimpleNamespace(runtimeGetVersion=lambda: 0))
    return types.SimpleNamespace(__version__="numpy", cuda=cuda, empty=np.empty, asarray=np.asarray,
                                 asnumpy=np.asarray, matmul=np.matmul, lib=np.lib)


def _host_cublas(seconds_per_byte: float = 0.0) -> cuda_blas.CublasDevice:
    return cuda_blas.CublasDevice(_numpy_as_cupy(), 0, "fake", cuda_blas.Transfer(0.0, 1 / max(seconds_per_byte, 1e-30)))


def _program(kind: str):
    if kind == "batched_transposed":  # heads: (b, m, k) @ (b, n, k)^T, output permuted to (m, b, n)
        a = Tensor.input("a", (3, 5, 7))
        b = Tensor.input("b", (3, 6, 7))
        return from_tensors({"y": (a @ b.permute(0, 2, 1)).permute(1, 0, 2)})
    a = Tensor.input("a", (64, 48))
    b = Tensor.input("b", (48, 32))
    return from_tensors({"y": a @ b})


def test_without_cupy_no_device_and_one_note(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import fails
    notes: list[str] = []
    assert cuda_blas.discover(notes) == []
    assert len(notes) == 1 and notes[0].startswith("cuBLAS devices not offered: cupy cannot be imported")


def test_tf32_switched_on_is_refused(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", _numpy_as_cupy())
    monkeypatch.setenv("CUPY_TF32", "1")
    notes: list[str] = []
    assert cuda_blas.discover(notes) == [] and "CUPY_TF32" in notes[0]


@pytest.mark.parametrize("kind", ["plain", "batched_transposed"])
def test_extraction_picks_the_library_when_it_is_cheaper_and_the_plan_verifies(kind):
    device = _host_cublas()
    c = compile_program(_program(kind), [NumpyDevice(), device], Options(tune=False, tune_cache=False))
    assert c.verification.ok
    assert any(s.device == device.name for s in c.plan.launches())


def test_transfers_that_cost_more_than_the_work_keep_the_plan_on_the_host():
    device = _host_cublas(seconds_per_byte=1.0)
    c = compile_program(_program("plain"), [NumpyDevice(), device], Options(tune=False, tune_cache=False))
    assert c.verification.ok
    assert {s.device for s in c.plan.launches()} == {"numpy"}


def test_an_epilogue_is_not_a_library_kernel():
    a = Tensor.input("a", (8, 4))
    b = Tensor.input("b", (4, 8))
    device = _host_cublas()
    c = compile_program(from_tensors({"y": (a @ b).relu()}), [NumpyDevice(), device], Options(tune=False))
    assert c.verification.ok
    for step in c.plan.launches():  # a kernel with relu after the reduce is refused; a bare matmul is taken
        k = step.kernel
        assert device.supports(k) == (k.reduce is not None and k.outputs == (Acc(k.reduce.dtype),))
        assert step.device != device.name or device.supports(k)


def _cupy():
    try:
        import cupy as cp

        return cp if cp.cuda.runtime.getDeviceCount() else None
    except Exception:
        return None


@pytest.mark.skipif(_cupy() is None, reason="needs cupy and a CUDA GPU")
def test_on_the_gpu_fp32_math_is_not_tf32():
    (device,) = cuda_blas.discover()[:1]
    n = 1024
    a = Tensor.input("a", (n, n))
    b = Tensor.input("b", (n, n))
    c = compile_program(from_tensors({"y": a @ b}), [NumpyDevice(), device], Options(tune_cache=False))
    assert c.verification.ok and {s.device for s in c.plan.launches()} == {device.name}
    k = c.plan.launches()[0]
    values = c.program.input_values()
    ins = [device.upload(values[x]) for x in ("a", "b")]
    out = device.alloc(k.kernel.output_types[0])
    device.launch(device.compile(k.kernel), ins, [out])
    exact = values["a"].astype(np.float64) @ values["b"].astype(np.float64)
    err = np.abs(device.download(out, k.kernel.output_types[0]) - exact).max() / np.abs(exact).max()
    assert err < 1e-5  # TF32 (10-bit mantissa) gives ~1e-3

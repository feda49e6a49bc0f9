"""The CUDA device: discovery without cupy, the matmul mapping and its epilogues (run on numpy standing in for
cupy and for NVRTC's kernels, so CI checks them without a GPU), extraction choosing it by its costs, and on a
real CUDA GPU the math (TF32 off), NVRTC's kernels and whole plans."""

from __future__ import annotations

import itertools
import sys
import types
from typing import ClassVar

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sample_graphs
from engine import DType, Tensor, from_tensors, load
from engine.devices import cuda_blas, staging
from engine.devices.base import SIBLINGS_ELSEWHERE, Link
from engine.devices.numpy_device import LibraryDevice, NumpyDevice, is_contraction_load
from engine.kernel.ir import Buffer
from engine.kernel.schedule import DEFAULT_VARIANT, Variant
from engine.pipeline import Options, compile_program
from engine.plan import Session, execute
from engine.tuning.model import suggest
from engine.tuning.space import seeds


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
    spin = types.SimpleNamespace(get_function=lambda name: lambda grid, block, args: None)
    return types.SimpleNamespace(__version__="numpy", cuda=cuda, empty=np.empty, asarray=np.asarray,
                                 asnumpy=np.array, matmul=np.matmul, lib=np.lib, RawModule=lambda code: spin,
                                 ones=np.ones)


def sgemm_strided_on_host(call, p: np.ndarray, q: np.ndarray, x: np.ndarray) -> None:
    """cublasSgemmStridedBatched's contract on flat numpy buffers: column-major matrices ``ld`` apart by column,
    ``op`` a transpose of the stored one; every element it touches is asserted inside its buffer."""
    def matrices(buf, m, shape):
        stored = shape[::-1] if m.transposed else shape
        last = m.offset + (call.batch - 1) * m.batch_stride + (stored[0] - 1) + (stored[1] - 1) * m.ld
        assert m.offset >= 0 and last < buf.size and m.ld >= max(stored[0], 1)
        for i in range(call.batch):
            view = np.lib.stride_tricks.as_strided(buf[m.offset + i * m.batch_stride:], stored,
                                                   (buf.itemsize, buf.itemsize * m.ld))
            yield view.T if m.transposed else view

    for pm, qm, xm in zip(matrices(p, call.p, (call.rows, call.depth)), matrices(q, call.q, (call.depth, call.cols)),
                          matrices(x, call.x, (call.rows, call.cols)), strict=True):
        xm[...] = pm.astype(np.float64) @ qm


class _HostCublas(cuda_blas.CublasDevice):
    """The device's logic on the host: numpy as cupy, NVRTC's kernels run by the numpy device instead, and cuBLAS's
    strided call by its contract in numpy."""

    def _sgemm_strided(self, call, p, q, x):
        sgemm_strided_on_host(call, p, q, x)

    @staticmethod
    def _address(array):
        return array.__array_interface__["data"][0]

    def _sgemm_pair(self, calls, side, shared, varying, x):
        """The device's pairing, two operand buffers first copied into one, so that the batch stride it works out
        from their addresses stays inside what ``sgemm_strided_on_host`` may read."""
        starts = [self._start(v, getattr(c, side)) for v, c in zip(varying, calls)]
        assert starts[0] < starts[1]
        if varying[0] is not varying[1]:
            joint = np.concatenate(varying)
            varying = (joint, joint[varying[0].size:])
        super()._sgemm_pair(calls, side, shared, varying, x)

    def _build(self, kernel, variant):
        host = NumpyDevice()
        compiled = host.compile(kernel)
        n = len(kernel.inputs)
        return cuda_blas.Nvrtc(kernel, variant,
                                     lambda grid, block, args: host.launch(compiled, list(args[:n]), list(args[n:])))


def _host_cublas(seconds_per_byte: float = 0.0) -> cuda_blas.CublasDevice:
    return _HostCublas(_numpy_as_cupy(), 0, "fake", Link.line(0.0, 1 / max(seconds_per_byte, 1e-30)))


def _program(kind: str):
    if kind == "batched_transposed":  # heads: (b, m, k) @ (b, n, k)^T, output permuted to (m, b, n)
        a = Tensor.input("a", (3, 5, 7))
        b = Tensor.input("b", (3, 6, 7))
        return from_tensors({"y": (a @ b.permute(0, 2, 1)).permute(1, 0, 2)})
    a = Tensor.input("a", (64, 48))
    b = Tensor.input("b", (48, 32))
    return from_tensors({"y": a @ b})


def test_without_cupy_no_device_and_no_note(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)  # import fails: not installed
    notes: list[str] = []
    assert cuda_blas.discover(notes) == [] and notes == []


def test_cupy_without_a_gpu_is_one_note(monkeypatch):
    def no_device() -> int:
        raise RuntimeError("cudaErrorNoDevice: no CUDA-capable device is detected\nmore")

    cp = _numpy_as_cupy()
    cp.cuda.runtime.getDeviceCount = no_device
    monkeypatch.setitem(sys.modules, "cupy", cp)
    notes: list[str] = []
    assert cuda_blas.discover(notes) == []
    assert notes == ["cuBLAS devices not offered: no CUDA device (cudaErrorNoDevice: no CUDA-capable device is detected)"]


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


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_a_matmul_with_an_epilogue_runs_on_the_device_and_verifies(activation):
    x = Tensor.input("x", (16, 32))
    w = Tensor.input("w", (32, 24))
    bias = Tensor.input("bias", (24,))
    device = _host_cublas()
    y = getattr(x @ w + bias, activation)()
    c = compile_program(from_tensors({"y": y}), [NumpyDevice(), device], Options(tune=False, tune_cache=False))
    assert c.verification.ok
    launched = c.plan.launches()
    assert {s.device for s in launched} == {device.name}
    epilogues = [cuda_blas.as_matmul(s.kernel).epilogue for s in launched if s.kernel.reduce is not None]
    assert epilogues and all(e is not None and e.reduce is None for e in epilogues)


def test_size_one_axes_and_reduce_free_kernels_are_taken():
    a = Tensor.input("a", (8, 1, 4))
    b = Tensor.input("b", (4, 8))
    device = _host_cublas()
    assert device.supports(_kernels(a.exp())[0])
    (k,) = _kernels(a @ b)
    assert k.shape.count(1) and device.supports(k)


def test_variants_apply_to_elementwise_kernels_and_epilogues_not_to_a_bare_gemm():
    device = _host_cublas()
    x = Tensor.input("x", (64, 64))
    (bare,) = _kernels(x @ Tensor.input("w", (64, 64)))
    (elementwise,) = _kernels(x.exp())
    upcast, group = Variant(local_size=256, upcast=4), Variant(group=256)
    assert device.variant_error(bare, DEFAULT_VARIANT) is None and device.variant_error(bare, upcast)
    assert device.variant_error(elementwise, upcast) is None and device.variant_error(elementwise, group)


def test_a_long_reduce_over_few_rows_is_predicted_faster_split_across_a_block():
    device = _host_cublas()
    (k,) = _kernels(Tensor.input("x", (1024, 4096)).sum(-1))
    assert suggest(k, device).group > 1  # what the calibration's row-sum benchmark times
    assert device.predict(k, DEFAULT_VARIANT) > 100 * device.predict(k, Variant(group=256))


def test_the_source_is_the_cublas_call_and_nvrtcs_cuda_c():
    """What runs: a bare matmul is one cuBLAS call; a matmul with a bias, that call and its epilogue's CUDA C;
    any other kernel, CUDA C (the OpenCL emitter's code under the prelude that names OpenCL's words)."""
    device = _host_cublas()
    x, w = Tensor.input("x", (16, 32)), Tensor.input("w", (32, 24))
    (bare,) = _kernels(x @ w)
    (biased,) = _kernels((x @ w + Tensor.input("bias", (24,))).relu())
    (elementwise,) = _kernels(x.exp())
    call = device.source(bare)
    assert call.title == "cuBLAS call" and "in place, 1 x (16 x 32) @ (32 x 24)" in call.text
    assert "cublasSgemmStridedBatched 1 x (24 x 32) @ (32 x 16)" in call.text and "__global__" not in call.text
    both = device.source(biased)
    assert both.title.startswith("cuBLAS call, then CUDA C") and "cublasSgemmStridedBatched" in both.text
    assert 'extern "C" __global__' in both.text and "reading the matmul's result as in3" in both.text
    own = device.source(elementwise, Variant(local_size=256, upcast=4))
    assert own.title == "CUDA C (NVRTC)" and own.language == "cuda" and own.text.startswith("typedef unsigned char")


def _kernels(t):
    c = compile_program(from_tensors({"y": t}), [NumpyDevice()], Options(tune=False, tune_cache=False, execute=False))
    return [s.kernel for s in c.plan.launches()]


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
    c = compile_program(from_tensors({"y": a @ b}), [NumpyDevice()], Options(tune=False, tune_cache=False))
    k = c.plan.launches()[0]
    assert cuda_blas.as_matmul(k.kernel) is not None  # cuBLAS runs it
    values = c.program.input_values()
    ins = [device.upload(values[x]) for x in ("a", "b")]
    out = device.alloc(k.kernel.output_types[0])
    device.launch(device.compile(k.kernel), ins, [out])
    exact = values["a"].astype(np.float64) @ values["b"].astype(np.float64)
    err = np.abs(device.download(out, k.kernel.output_types[0]) - exact).max() / np.abs(exact).max()
    assert err < 1e-5  # TF32 (10-bit mantissa) gives ~1e-3


@pytest.mark.skipif(_cupy() is None, reason="needs cupy and a CUDA GPU")
@pytest.mark.parametrize("sample", ["mlp.small", "gelu_ffn.small", "swiglu_mlp.small", "residual_mlp.small",
                                    "conv_relu.small", "elementwise.small",
                                    "attention.small", "layernorm.small", "reductions.small", "sum.small"])
def test_on_the_gpu_each_kernel_matches_the_numpy_device_and_plans_verify(sample):
    (device,) = cuda_blas.discover()[:1]
    program = load(sample_graphs.path(sample))
    host = NumpyDevice()
    c = compile_program(program, [host], Options(tune=False, tune_cache=False, execute=False))
    rng = np.random.default_rng(0)
    ran = 0
    for k in (s.kernel for s in c.plan.launches() if device.supports(s.kernel)):
        ins = [rng.standard_normal(b.numel).astype(b.dtype.numpy) for b in k.inputs]
        want = [np.full(b.numel, np.nan, b.dtype.numpy) for b in k.output_types]
        host.launch(host.compile(k), ins, want)
        if cuda_blas.as_matmul(k) is None:  # an NVRTC kernel is built once (see ``_build``)
            assert device.compile(k).function is device.compile(k).function
        for v in [v for v in [*device.seeds(k), *seeds(k, True)] if device.variant_error(k, v) is None]:
            got = [device.upload(np.full(b.numel, np.nan, b.dtype.numpy)) for b in k.output_types]
            device.launch(device.compile(k, v), [device.upload(x) for x in ins], got)
            for g, w, b in zip(got, want, k.output_types):
                np.testing.assert_allclose(device.download(g, b).reshape(-1), w, rtol=1e-4, atol=1e-4, err_msg=str(v))
            ran += 1
    assert ran
    assert compile_program(program, [host, device], Options(tune=False, tune_cache=False)).verification.ok


def _contractions(c):
    return [mm for s in c.plan.launches() if (mm := cuda_blas.as_matmul(s.kernel)) is not None]


def test_attentions_products_are_cublas_calls_on_the_buffers_in_place():
    """q, k and v are head-major views of their projections and the product with v is stored sequence-major: every
    product is one strided cuBLAS call on the buffers (no operand or result copied), the head-major projections a
    batch over heads that reads x at stride 0, and the plan verifies."""
    device = _host_cublas()
    c = compile_program(load(sample_graphs.path("attention.small")), [device], Options(tune=False, tune_cache=False))
    assert c.verification.ok
    products = _contractions(c)
    assert len(products) == 6 and all(mm.strided is not None for mm in products)
    assert any(mm.strided.batch > 1 and 0 in (mm.strided.p.batch_stride, mm.strided.q.batch_stride)
               for mm in products)


def test_a_reduce_whose_axes_have_no_single_stride_goes_through_cupy_matmul_and_verifies():
    """a's two k axes sit on either side of its m axis: no one stride walks k, so cuBLAS cannot read it in place."""
    a = Tensor.input("a", (3, 5, 4))  # (k1, m, k2)
    b = Tensor.input("b", (3, 4, 6))  # (k1, k2, n)
    y = (a.permute(1, 0, 2).reshape(5, 12) @ b.reshape(12, 6))
    device = _host_cublas()
    c = compile_program(from_tensors({"y": y}), [device], Options(tune=False, tune_cache=False))
    assert c.verification.ok
    (mm,) = _contractions(c)
    assert mm.strided is None


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.tuples(st.integers(1, 3), st.integers(1, 5), st.integers(1, 6), st.integers(1, 5)),
       st.permutations(range(3)), st.permutations(range(3)), st.permutations(range(3)))
def test_batched_products_of_permuted_operands_into_a_permuted_output_verify(sizes, pa, pb, po):
    """Operands stored in any axis order and the result stored in any: the strided call (or, where it cannot read
    one in place, cupy.matmul) computes what the reference does, and never touches an element outside a buffer
    (``sgemm_strided_on_host`` asserts it)."""
    nb, m, k, n = sizes
    logical_a, logical_b = (nb, m, k), (nb, k, n)
    a = Tensor.input("a", tuple(logical_a[i] for i in pa)).permute(*(int(i) for i in np.argsort(pa)))
    b = Tensor.input("b", tuple(logical_b[i] for i in pb)).permute(*(int(i) for i in np.argsort(pb)))
    y = (a @ b).permute(*po)
    device = _host_cublas()
    c = compile_program(from_tensors({"y": y}), [device], Options(tune=False, tune_cache=False))
    assert c.verification.ok


@pytest.mark.parametrize("on", ["host", pytest.param("gpu", marks=pytest.mark.skipif(_cupy() is None,
                                                                             reason="needs cupy and a CUDA GPU"))])
def test_products_of_permuted_operands_into_permuted_outputs_match_the_numpy_device(on):
    """cublasSgemmStridedBatched (its contract in numpy on the host, the real one on a GPU) on every layout the
    strided call takes (transposed operands, leading dimensions, batch strides) at odd sizes: 64 of the 216."""
    device = _host_cublas() if on == "host" else cuda_blas.discover()[0]
    host = NumpyDevice()
    rng = np.random.default_rng(0)
    taken = 0
    for pa, pb, po in itertools.product(itertools.permutations(range(3)), repeat=3):
        nb, m, k, n = 3, 37, 19, 45
        a = Tensor.input("a", tuple((nb, m, k)[i] for i in pa)).permute(*(int(i) for i in np.argsort(pa)))
        b = Tensor.input("b", tuple((nb, k, n)[i] for i in pb)).permute(*(int(i) for i in np.argsort(pb)))
        (kernel,) = _kernels((a @ b).permute(*po))
        mm = cuda_blas.as_matmul(kernel)
        if mm is None or mm.strided is None:
            continue
        ins = [rng.standard_normal(buf.numel).astype(np.float32) for buf in kernel.inputs]
        (want,) = [np.full(buf.numel, np.nan, np.float32) for buf in kernel.output_types]
        host.launch(host.compile(kernel), ins, [want])
        out = device.upload(np.full(want.size, np.nan, np.float32))
        device.launch(device.compile(kernel), [device.upload(x) for x in ins], [out])
        got = device.download(out, kernel.output_types[0]).reshape(-1)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=f"{pa} {pb} {po}")
        taken += 1
    assert taken == 64


def test_a_small_matmul_is_priced_as_a_whole_wave_of_tiles():
    device = _host_cublas()
    (small,) = _kernels(Tensor.input("a", (256, 256)) @ Tensor.input("b", (256, 256)))
    (large,) = _kernels(Tensor.input("a", (4096, 4096)) @ Tensor.input("b", (4096, 4096)))
    peak = [2 * k.numel * k.reduce.size / device.flops for k in (small, large)]
    assert device.estimate(small) - device.launch_overhead > 20 * peak[0]  # 4 tiles on 132 multiprocessors
    assert device.estimate(large) - device.launch_overhead < 1.1 * peak[1]


def test_a_kernel_the_device_refuses_is_recorded_with_its_reason():
    x = Tensor.input("x", (8, 8), DType.F64)  # NVRTC's kernels are f32 only; numpy computes it
    device = _host_cublas()
    c = compile_program(from_tensors({"y": x.exp()}), [NumpyDevice(), device], Options(tune=False, tune_cache=False))
    assert c.verification.ok and {s.device for s in c.plan.launches()} == {"numpy"}
    assert c.attached.refused and all(r == {device.name: "f16 or f64 values"} for r in c.attached.refused.values())


@pytest.mark.parametrize("sample", ["swiglu_mlp.small", "residual_mlp.small", "conv_relu.small"])
def test_factors_that_are_computed_get_a_prologue_and_the_plan_verifies(sample):
    """rmsnorm's and layernorm's scaled rows before a matmul, a padded convolution's operand: computed into a
    scratch buffer first, so that the contraction is a GEMM."""
    device = _host_cublas()
    program = load(sample_graphs.path(sample))
    c = compile_program(program, [NumpyDevice(), device], Options(tune=False, tune_cache=False))
    assert c.verification.ok
    staged = [mm for s in c.plan.launches() if s.device == device.name
              and (mm := cuda_blas.as_matmul(s.kernel)) is not None and mm.prologues]
    assert staged
    for mm in staged:
        for pro in mm.prologues:
            assert pro.reduce is None and not pro.stages
        assert all(is_contraction_load(f) for f in (mm.a, mm.b))
        shown = device.source(mm.kernel).text
        assert shown.count("// prologue ") == len(mm.prologues) and shown.index("// prologue 1") < shown.index("cuBLAS")


@pytest.mark.parametrize("sample", ["swiglu_mlp.small", "conv_relu.small", "gelu_ffn.small"])
def test_a_session_builds_each_launchs_calls_once_and_its_replays_verify(sample, monkeypatch):
    """Prologue scratch, the product's views and the epilogue's accumulator are made when a session first runs a
    launch; later runs replay those calls on the same buffers."""
    device = _HostCublas(_numpy_as_pinned_cupy(), 0, "fake", Link.line(0.0, 1e30))
    program = load(sample_graphs.path(sample))
    devices = [device]
    c = compile_program(program, devices, Options(tune=False, tune_cache=False, execute=False,
                                                  resident_inputs=True))
    on_device = c.plan.launches()
    assert any(cuda_blas.as_matmul(s.kernel) is not None for s in on_device)
    built = []
    calls = device._calls
    monkeypatch.setattr(device, "_calls", lambda *a: built.append(a) or calls(*a))
    inputs = {k: v.copy() for k, v in program.input_values().items()}
    with Session(c.plan, devices) as session:
        runs = [session.run(inputs).outputs for _ in range(3)]
    assert len(built) == len(on_device)
    expected = execute(c.plan, devices, inputs).outputs
    assert all(np.array_equal(r[k], expected[k]) for r in runs for k in expected)


def test_dot_products_per_row_are_left_to_nvrtc_reductions():
    x = Tensor.input("x", (64, 256))
    (k,) = _kernels((x * x).sum(-1))
    assert k.reduce is not None and cuda_blas.as_matmul(k) is None and _host_cublas().supports(k)


class _Gpu(np.ndarray):
    """A numpy array standing in for a cupy array: ``set`` and ``get`` as cupy's, recording the streams given."""

    streams: ClassVar[list] = []

    def set(self, arr, stream=None):
        assert isinstance(arr, np.ndarray) and arr.shape == self.shape and arr.dtype == self.dtype
        _Gpu.streams.append(stream)
        np.ndarray.__setitem__(self, Ellipsis, arr)

    def get(self, stream=None, out=None, blocking=True):
        assert out is not None and out.shape == self.shape and out.dtype == self.dtype
        _Gpu.streams.append(stream)
        out[...] = self.view(np.ndarray)
        return out


def _numpy_as_pinned_cupy(refuse: bool = False) -> types.SimpleNamespace:
    """``_numpy_as_cupy`` with cupy's pinned memory (bytearrays standing in; refused when ``refuse``) and a
    current stream."""
    cp = _numpy_as_cupy()
    stream = types.SimpleNamespace(synchronize=lambda: None, record=_Event)

    def alloc_pinned_memory(nbytes):
        if refuse:
            raise RuntimeError("cudaErrorMemoryAllocation")
        return bytearray(nbytes)

    cp.cuda.alloc_pinned_memory = alloc_pinned_memory
    cp.cuda.get_current_stream = lambda: stream
    cp.empty = lambda n, dtype=np.float32: np.empty(n, dtype).view(_Gpu)
    cp.asarray = lambda a: np.array(a).view(_Gpu)
    return cp


@pytest.mark.parametrize("refuse", [False, True], ids=["pinned", "refused"])
def test_copies_stage_through_pinned_memory_in_chunks_or_fall_back_and_a_session_matches(monkeypatch, refuse):
    monkeypatch.setattr(staging, "CHUNK", 512)
    device = _HostCublas(_numpy_as_pinned_cupy(refuse), 0, "fake", Link.line(0.0, 1e30))
    _Gpu.streams = []
    data = np.arange(1000, dtype=np.float32)  # 4000 bytes: 8 chunks
    handle, buffer = device.upload(data), Buffer(data.shape, DType.F32)
    back = device.download(handle, buffer)
    assert np.array_equal(back, data) and device.copies == ("pageable" if refuse else "pinned")
    if not refuse:
        assert len(_Gpu.streams) == 8 + 1 and all(s is not None for s in _Gpu.streams)  # 8 chunks up, 1 DMA down
        held = [device.download(handle, buffer) for _ in range(staging.Blocks.PER_SIZE - 1)]  # every block lent
        _Gpu.streams = []
        staged = device.download(handle, buffer)
        assert len(_Gpu.streams) == 8 and np.array_equal(staged, data)  # 8 chunks through the staging buffer
        assert device._stage.size == 1 << 20 and not np.shares_memory(staged, device._stage)  # a fresh output
        assert len({a.ctypes.data for a in (back, *held, staged)}) == len(held) + 2
    c = compile_program(_program("plain"), [NumpyDevice(), device], Options(tune=False, tune_cache=False,
                                                                              execute=False))
    assert any(s.device == device.name for s in c.plan.launches())
    inputs = c.program.input_values()
    fresh = execute(c.plan, [NumpyDevice(), device], inputs)
    with Session(c.plan, [NumpyDevice(), device]) as session:
        queued = session.run(inputs)
        inputs["a"][0, 0] += 1
        changed = session.run(inputs)
    assert np.array_equal(queued.outputs["y"], fresh.outputs["y"]) and not queued.timed
    assert np.allclose(changed.outputs["y"], inputs["a"] @ inputs["b"], rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(_cupy() is None, reason="needs cupy and a CUDA GPU")
@pytest.mark.parametrize("nbytes", [4, 4096, (4 << 20) + 12, 40 << 20])
def test_on_the_gpu_pinned_copies_round_trip(nbytes):
    (device,) = cuda_blas.discover()[:1]
    data = np.random.default_rng(1).standard_normal(nbytes // 4).astype(np.float32)
    back = device.download(device.upload(data), Buffer(data.shape, DType.F32))
    assert device.copies == "pinned" and np.array_equal(back, data)


@pytest.mark.skipif(_cupy() is None, reason="needs cupy and a CUDA GPU")
@pytest.mark.parametrize("sample", ["mlp.small", "attention.small", "sum.small"])
def test_on_the_gpu_queued_runs_and_sessions_match_timed_runs(sample):
    (device,) = cuda_blas.discover()[:1]
    program = load(sample_graphs.path(sample))
    devices = [NumpyDevice(), device]
    c = compile_program(program, devices, Options(tune=False, tune_cache=False, execute=False))
    inputs = {k: v.copy() for k, v in program.input_values().items()}
    timed = execute(c.plan, devices, inputs).outputs
    assert all(np.array_equal(timed[k], v) for k, v in execute(c.plan, devices, inputs, timed=False).outputs.items())
    with Session(c.plan, devices) as session:
        assert all(np.array_equal(timed[k], v) for k, v in session.run(inputs).outputs.items())
        name = session.inputs[0]
        inputs[name] *= 2
        changed = session.run(inputs).outputs
        assert all(np.array_equal(v, execute(c.plan, devices, inputs).outputs[k]) for k, v in changed.items())
        replayed = session.run(inputs).outputs  # the launches prepared in the run before, replayed
        assert all(np.array_equal(v, changed[k]) for k, v in replayed.items())


def _siblings(program) -> list:
    """The siblings kernels of ``program``'s kernelization."""
    c = compile_program(program, [NumpyDevice()], Options(tune=False, tune_cache=False, execute=False))
    return [cand.kernel for cand in c.kernelization.candidates.values() if cand.kernel.siblings]


def _host_result(kernel, ins):
    """``kernel`` evaluated by the numpy device's row plan (which declines it in a plan, but evaluates it)."""
    host = NumpyDevice()
    want = [np.full(b.numel, np.nan, b.dtype.numpy) for b in kernel.output_types]
    host.launch(host.compile(kernel), ins, want)
    return want


def _gated(shared_rhs: bool):
    """``silu(x @ wg) * (x @ wu)`` (two products sharing ``x``), or ``silu(x @ wg) * (z @ wu)`` (sharing nothing)."""
    x, z = Tensor.input("x", (24, 40)), Tensor.input("z", (24, 40))
    wg, wu = Tensor.input("wg", (40, 72)), Tensor.input("wu", (40, 72))
    return from_tensors({"y": (x @ wg).silu() * ((x if shared_rhs else z) @ wu)})


@pytest.mark.parametrize("shared", [True, False])
def test_a_gated_units_products_run_as_siblings_paired_where_they_share_an_operand(shared):
    """The two products of a gated unit are one siblings kernel on the cuBLAS device: one strided-batched call of
    two when they share an operand (the weights one batch stride apart), two calls when they do not; either way
    its outputs equal the host's evaluation, and the source says which."""
    (kernel,) = _siblings(_gated(shared))
    device = _host_cublas()
    sib = cuda_blas.as_siblings(kernel)
    assert device.supports(kernel) and sib is not None and len(sib.stages) == 2
    assert (sib.paired is not None) == shared
    rng = np.random.default_rng(3)
    ins = [rng.standard_normal(b.numel).astype(np.float32) for b in kernel.inputs]
    pairs = []
    pair = device._sgemm_pair
    device._sgemm_pair = lambda *a: pairs.append(a) or pair(*a)
    got = [np.full(b.numel, np.nan, np.float32) for b in kernel.output_types]
    device.launch(device.compile(kernel), ins, got)
    assert len(pairs) == shared
    np.testing.assert_allclose(got[0], _host_result(kernel, ins)[0], rtol=1e-5, atol=1e-5)
    text = device.source(kernel).text
    assert ("cublasSgemmStridedBatched of 2" in text) == shared and text.count("// stage ") == 2


def test_two_slices_of_one_fused_weight_are_paired_too():
    """A gate-and-up weight stored as one (40, 144) array: its two halves are one buffer at two offsets."""
    x, w = Tensor.input("x", (24, 40)), Tensor.input("w", (40, 144))
    gate, up = w.slice([0], [72], [1]), w.slice([72], [144], [1])
    (kernel,) = _siblings(from_tensors({"y": (x @ gate).silu() * (x @ up)}))
    sib = cuda_blas.as_siblings(kernel)
    assert sib is not None and sib.paired is not None and len(kernel.inputs) == 2
    device = _host_cublas()
    rng = np.random.default_rng(4)
    ins = [rng.standard_normal(b.numel).astype(np.float32) for b in kernel.inputs]
    got = [np.full(24 * 72, np.nan, np.float32)]
    device.launch(device.compile(kernel), ins, got)
    np.testing.assert_allclose(got[0], _host_result(kernel, ins)[0], rtol=1e-5, atol=1e-5)


def test_the_pair_works_out_its_batch_stride_from_the_operands_addresses():
    """Two weights at either order in one buffer: the call reads each at its own place, and each stage's
    result lands in its slot."""
    device = _host_cublas()
    (kernel,) = _siblings(_gated(True))
    sib = cuda_blas.as_siblings(kernel)
    call = sib.stages[0].strided
    rng = np.random.default_rng(5)
    base = rng.standard_normal(3 * 40 * 72).astype(np.float32)
    x = rng.standard_normal(24 * 40).astype(np.float32)
    shared, side = (x, sib.paired)
    for lo, hi in ((0, 2), (1, 2)):
        first, second = base[lo * 40 * 72:], base[hi * 40 * 72:]
        out = np.full(2 * 24 * 72, np.nan, np.float32)
        cuda_blas.CublasDevice._sgemm_pair(device, (call, call), side, shared, (first, second), out)
        for slot, w in enumerate((first, second)):
            want = x.reshape(24, 40).astype(np.float64) @ w[:40 * 72].reshape(40, 72)
            np.testing.assert_allclose(out[slot * 24 * 72:(slot + 1) * 24 * 72].reshape(24, 72), want, rtol=1e-5)


def test_a_rows_reduces_side_by_side_are_one_nvrtc_row_kernel():
    """Siblings that are no products (a row's max beside its mean) are an ordinary row kernel to this device."""
    x = Tensor.input("x", (6, 300))
    (kernel,) = _siblings(from_tensors({"y": x.max(-1) - x.mean(-1)}))
    device = _host_cublas()
    assert cuda_blas.as_siblings(kernel) is None and device.supports(kernel)
    assert "cuBLAS" not in device.source(kernel).text
    ins = [np.random.default_rng(2).standard_normal(1800).astype(np.float32)]
    got = [np.full(6, np.nan, np.float32)]
    device.launch(device.compile(kernel), ins, got)
    np.testing.assert_allclose(got[0], _host_result(kernel, ins)[0], rtol=1e-6)


def test_siblings_of_half_products_are_declined_with_the_reason():
    """f16 products are no cuBLAS calls here, and one point per thread is no way to run them."""
    x = Tensor.input("x", (24, 40), DType.F16)
    w, v = Tensor.input("w", (40, 72), DType.F16), Tensor.input("v", (40, 72), DType.F16)
    (kernel,) = _siblings(from_tensors({"y": (x @ w) * (x @ v)}))
    assert cuda_blas.as_siblings(kernel) is None
    assert _host_cublas().unsupported(kernel) == cuda_blas.NOT_SIBLING_PRODUCTS


def test_siblings_of_products_are_offered_on_cublas_alone():
    """The CPU devices decline products side by side (each point would read their operands again) and say why; a
    plan on the host and the stand-in verifies either way."""
    program = load(sample_graphs.path("swiglu_mlp.small"))
    (kernel,) = _siblings(program)
    assert NumpyDevice().unsupported(kernel) == SIBLINGS_ELSEWHERE
    assert LibraryDevice().unsupported(kernel) == SIBLINGS_ELSEWHERE
    device = _host_cublas()
    assert device.supports(kernel) and cuda_blas.as_siblings(kernel).paired is not None
    c = compile_program(program, [NumpyDevice(), device], Options(tune=False, tune_cache=False))
    assert c.verification.ok


@pytest.mark.skipif(_cupy() is None, reason="needs cupy and a CUDA GPU")
@pytest.mark.parametrize("sample", ["swiglu_mlp.small", "swiglu_mlp"])
def test_on_the_gpu_a_siblings_kernel_matches_the_host_and_a_cublas_plan_verifies(sample):
    """The paired call on real buffers (its batch stride the distance between two cupy allocations).  Random
    normal operands make sums of 1024 products up to a few hundred: cuBLAS and numpy add them in other orders, so
    the tolerance is relative to the output's largest value."""
    (device,) = cuda_blas.discover()[:1]
    program = load(sample_graphs.path(sample))
    (kernel,) = _siblings(program)
    assert cuda_blas.as_siblings(kernel).paired is not None
    rng = np.random.default_rng(0)
    ins = [rng.standard_normal(b.numel).astype(np.float32) for b in kernel.inputs]
    got = [device.upload(np.full(b.numel, np.nan, np.float32)) for b in kernel.output_types]
    device.launch(device.compile(kernel), [device.upload(x) for x in ins], got)
    want = _host_result(kernel, ins)[0]
    np.testing.assert_allclose(device.download(got[0], kernel.output_types[0]).reshape(-1), want, rtol=1e-4,
                               atol=1e-4 * float(np.abs(want).max()))
    assert compile_program(program, [NumpyDevice(), device], Options(tune=False, tune_cache=False)).verification.ok

"""The CUDA device's own NVRTC kernels: the implicit GEMM of a contraction (a convolution's padded operand gathered
into shared memory, never written out) and the row kernel held in registers.

Their CUDA C is run on the host here: compiled by g++ with one thread per CUDA thread, a barrier for
``__syncthreads`` and a shared array for ``__shfl_xor_sync``, so the generated source is checked against the
numpy device without a GPU (odd sizes, tails of every tile, padding, strides, batches, computed factors).  On a
CUDA GPU each variant also runs there.  The tuner sees the implicit GEMM as variants of the contraction and keeps
whichever form it measures faster.
"""

from __future__ import annotations

import functools
import itertools
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from engine import Tensor, from_tensors
from engine.devices import cuda_blas
from engine.devices.numpy_device import NumpyDevice
from engine.kernel.ir import Kernel
from engine.kernel.render import cuda, cuda_gemm
from engine.kernel.schedule import DEFAULT_VARIANT, Variant
from engine.pipeline import Options, compile_program
from engine.tuning import Budget
from engine.tuning.search import tune
from tests.test_cuda_blas import _cupy, _host_cublas, _HostCublas, _numpy_as_cupy

SHIM = r"""
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>
using std::isnan; using std::max; using std::min;
struct zx_dim3 { unsigned x, y, z; };
thread_local zx_dim3 threadIdx, blockIdx, blockDim;
static std::barrier<>* zx_barrier;
#define __syncthreads() zx_barrier->arrive_and_wait()
#define __global__
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(n)
struct float4 { float x, y, z, w; };
inline float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
template <class T> T __shfl_xor_sync(unsigned, T v, int o) {
  static T lanes[1024];
  lanes[threadIdx.x] = v; __syncthreads();
  T r = lanes[threadIdx.x ^ o]; __syncthreads();
  return r;
}
"""
"""CUDA's words for the host: every thread of a block is a ``std::thread``, and blocks run one after another, so
``static`` locals stand for shared memory."""


@functools.lru_cache(maxsize=1)
def _compiler() -> str | None:
    """g++ when it builds C++20 ``<barrier>`` programs here."""
    gxx = shutil.which("g++")
    if gxx is None:
        return None
    probe = subprocess.run([gxx, "-std=c++20", "-fsyntax-only", "-x", "c++", "-"], input=b"#include <barrier>\n",
                           capture_output=True)
    return gxx if probe.returncode == 0 else None


needs_gxx = pytest.mark.skipif(_compiler() is None, reason="needs g++ with C++20 <barrier>")


def _emulate(code: str, name: str, blocks: tuple[int, int, int], threads: int, kernel: Kernel,
             inputs: list[np.ndarray], tmp: Path) -> list[np.ndarray]:
    """Run the CUDA C function ``name`` of ``code`` over ``blocks`` of ``threads`` on the host."""
    args = [f"in{i}" for i in range(len(kernel.inputs))] + [f"out{i}" for i in range(len(kernel.output_types))]
    main = ["int main() {"]
    main += [f"  static float in{i}[{max(b.numel, 1)}]; fread(in{i}, 4, {b.numel}, stdin);"
             for i, b in enumerate(kernel.inputs)]
    main += [f"  static float out{i}[{max(b.numel, 1)}];" for i, b in enumerate(kernel.output_types)]
    main += [f"  for (unsigned z = 0; z < {blocks[2]}; ++z) for (unsigned y = 0; y < {blocks[1]}; ++y)",
             f"  for (unsigned x = 0; x < {blocks[0]}; ++x) {{",
             f"    std::barrier<> bar({threads}); zx_barrier = &bar; std::vector<std::thread> ts;",
             f"    for (unsigned t = 0; t < {threads}; ++t) ts.emplace_back([=]() {{",
             f"      threadIdx = {{t, 0, 0}}; blockIdx = {{x, y, z}}; blockDim = {{{threads}, 1, 1}}; "
             f"{name}({', '.join(args)}); }});",
             "    for (auto& t : ts) t.join();",
             "  }"]
    main += [f"  fwrite(out{i}, 4, {b.numel}, stdout);" for i, b in enumerate(kernel.output_types)]
    main.append("}")
    src, exe = tmp / f"{name}.cpp", tmp / name
    src.write_text(SHIM + code + "\n".join(main) + "\n")
    subprocess.run([_compiler(), "-w", "-std=c++20", "-O1", "-pthread", "-o", str(exe), str(src)], check=True)
    data = b"".join(np.ascontiguousarray(x, np.float32).tobytes() for x in inputs)
    out = np.frombuffer(subprocess.run([str(exe)], input=data, capture_output=True, check=True).stdout, np.float32)
    sizes = np.cumsum([0, *(b.numel for b in kernel.output_types)])
    return [out[a:b] for a, b in itertools.pairwise(sizes)]


def _kernels(t: Tensor) -> list[Kernel]:
    """Every candidate kernel of ``t``'s program (the row kernels too, which plans may not take)."""
    c = compile_program(from_tensors({"y": t}), [NumpyDevice()], Options(tune=False, tune_cache=False, execute=False))
    return [cand.kernel for cand in c.kernelization.candidates.values()]


def _expected(kernel: Kernel, seed: int = 0) -> tuple[list[np.ndarray], list[np.ndarray]]:
    rng = np.random.default_rng(seed)
    ins = [rng.standard_normal(b.numel).astype(np.float32) for b in kernel.inputs]
    want = [np.full(b.numel, np.nan, np.float32) for b in kernel.output_types]
    host = NumpyDevice()
    host.launch(host.compile(kernel), ins, want)
    return ins, want


def _conv(n: int, c: int, h: int, w: int, o: int, k: int, stride: int = 1, padding: int = 1, bias: bool = True):
    x, wt = Tensor.input("x", (n, c, h, w)), Tensor.input("w", (o, c, k, k))
    b = Tensor.input("b", (o,)) if bias else None
    return x.conv2d(wt, b, stride=stride, padding=padding).relu()


CONTRACTIONS = {
    "conv odd sizes, padding, bias, relu": lambda: _conv(2, 3, 11, 13, 5, 3),
    "conv stride 2, no padding, no bias": lambda: _conv(1, 4, 9, 11, 6, 3, stride=2, padding=0, bias=False),
    "conv 1x1": lambda: _conv(2, 6, 5, 7, 9, 1, padding=0),
    "batched, transposed, permuted": lambda: (Tensor.input("a", (3, 37, 7)) @ Tensor.input("b", (3, 6, 7))
                                              .permute(0, 2, 1)).permute(1, 0, 2),
    "computed factor": lambda: Tensor.input("a", (70, 19)).exp() @ Tensor.input("b", (19, 23)),
    "k through a reshape": lambda: (Tensor.input("a", (5, 12))
                                    @ Tensor.input("b", (4, 3, 7)).permute(1, 0, 2).reshape(12, 7)),
    "conv whose k tables outgrow shared memory": lambda: _conv(1, 456, 4, 3, 4, 3),
}
GEMM_VARIANTS = [*cuda_blas.GEMM_SEEDS, Variant(local_size=64, upcast=4, tile=4, smem=8)]


def _contraction(t: Tensor) -> tuple[Kernel, cuda_blas.Matmul]:
    (found,) = [(k, mm) for k in _kernels(t) if (mm := cuda_blas.as_matmul(k)) is not None][:1]
    assert found[1].gemm is not None
    return found


@needs_gxx
@pytest.mark.parametrize("case", list(CONTRACTIONS))
def test_the_implicit_gemm_source_matches_the_numpy_device_on_the_host(case, tmp_path):
    kernel, mm = _contraction(CONTRACTIONS[case]())
    ins, want = _expected(kernel)
    ran = 0
    for v in GEMM_VARIANTS:
        if cuda_gemm.variant_error(mm.gemm, v) is not None:
            continue
        code, name = cuda_gemm.source(mm.gemm, v)
        blocks, threads = cuda_gemm.grid(mm.gemm, v)
        (got,) = _emulate(code, name, blocks, threads, kernel, ins, tmp_path)
        np.testing.assert_allclose(got, want[0], rtol=1e-4, atol=1e-4, err_msg=str(v))
        ran += 1
    assert ran >= 4


def test_a_convolution_gets_implicit_gemm_variants_that_read_x_directly():
    kernel, mm = _contraction(_conv(8, 32, 64, 64, 64, 3))
    assert mm.prologues  # cuBLAS needs the im2col operand written first; the implicit GEMM does not
    device = _host_cublas()
    found = device.seeds(kernel)
    assert found and all(device.variant_error(kernel, v) is None for v in found)
    text = device.source(kernel, found[0]).text
    assert "_igemm_" in text and "cuBLAS" not in text and "__shared__" in text
    assert "in3" not in text  # no scratch input: the factor is gathered from x (in0)
    assert "cuBLAS" in device.source(kernel, DEFAULT_VARIANT).text


def test_the_gather_looks_k_up_in_tables_only_where_k_does_not_step_the_index_evenly():
    """A padded 3x3 convolution's input offset and window bounds come from k tables; its weights, a plain matmul's
    operands and a 1x1 convolution step by k itself; tables that would not fit beside the tiles are not made (k's
    axes are decoded by division, as before)."""
    v = Variant(local_size=64, upcast=4, tile=4, smem=8)
    found = {case: cuda_gemm.k_tables(_contraction(CONTRACTIONS[case]())[1].gemm, v) for case in CONTRACTIONS}
    assert len(found["conv odd sizes, padding, bias, relu"]) == 3  # offset, window row, window column
    assert found["conv 1x1"] == found["computed factor"] == found["batched, transposed, permuted"] == []
    assert len(found["k through a reshape"]) == 1
    assert found["conv whose k tables outgrow shared memory"] is None
    _, mm = _contraction(CONTRACTIONS["conv odd sizes, padding, bias, relu"]())
    code, _ = cuda_gemm.source(mm.gemm, v)
    assert "kt0[kk]" in code and code.count("(kk / 9)") == 1  # decoded once, when the tables are filled


@pytest.mark.parametrize("variant, why", [
    (Variant(local_size=256, upcast=4, tile=8, smem=12), "k slice"),
    (Variant(local_size=256, upcast=3, tile=8, smem=8), "multiple of 4"),
    (Variant(local_size=256, upcast=4, tile=8, unroll=2, smem=8), "no unroll"),
    (Variant(local_size=32, upcast=4, tile=8, smem=8), "64 to 512"),
])
def test_implicit_gemm_variants_that_do_not_fit_are_refused(variant, why):
    kernel, _ = _contraction(_conv(1, 3, 8, 8, 4, 3))
    assert why in (_host_cublas().variant_error(kernel, variant) or "")


def test_a_kernel_that_is_no_contraction_has_no_implicit_gemm():
    (k,) = _kernels(Tensor.input("x", (64, 256)).exp())
    device = _host_cublas()
    assert device.seeds(k) == [] and device.variant_error(k, Variant(local_size=256, upcast=4, tile=8, smem=8))


class _Timed(_HostCublas):
    """The host device, whose implicit GEMM launches take ``gemm`` seconds and every other launch 1 ms."""

    gemm = 1e-4

    def launch(self, compiled, inputs, outputs):
        super().launch(compiled, inputs, outputs)
        return self.gemm if compiled.variant.smem else 1e-3


@pytest.mark.parametrize("faster", [True, False])
def test_the_tuner_keeps_whichever_form_it_measures_faster(faster):
    kernel, _ = _contraction(_conv(1, 3, 8, 8, 4, 3))
    device = _Timed(_numpy_as_cupy(), 0, "fake")
    device.gemm = 1e-4 if faster else 1e-2
    result = tune(kernel, device, Budget(variants=12, seconds=30.0))
    timed = {t.variant for t in result.trials}
    assert any(v.smem for v in timed) and DEFAULT_VARIANT in timed  # both forms were timed
    assert bool(result.best.smem) == faster


ROWS = {
    "softmax, a guarded tail": lambda: Tensor.input("x", (5, 300)).softmax(-1),
    "layernorm": lambda: Tensor.input("x", (7, 100)).layernorm(Tensor.input("g", (100,)), Tensor.input("b", (100,))),
    "max of a row, rows of 2-D": lambda: _shifted(Tensor.input("x", (3, 4, 96))),
}


def _shifted(x: Tensor) -> Tensor:
    return (x - x.max(-1, True)).exp()


def _row_kernels(t: Tensor) -> list[Kernel]:
    found = [k for k in _kernels(t) if k.stages]
    assert found
    return found


@needs_gxx
@pytest.mark.parametrize("case", list(ROWS))
def test_the_row_held_in_registers_matches_the_numpy_device_on_the_host(case, tmp_path):
    ran = 0
    for kernel in _row_kernels(ROWS[case]()):
        ins, want = _expected(kernel)
        for v in cuda.row_seeds(kernel):
            code, name = cuda.source(kernel, v)
            blocks, threads = cuda.grid(kernel, v)
            got = _emulate(code, name, (blocks, 1, 1), threads, kernel, ins, tmp_path)
            for g, w in zip(got, want):
                np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5, err_msg=str(v))
            ran += 1
    assert ran


def test_the_row_held_in_registers_reads_the_row_once_and_fits_the_row():
    (kernel,) = _row_kernels(Tensor.input("x", (64, 4096)).softmax(-1))
    found = cuda.row_seeds(kernel)
    assert found and all(v.group * v.unroll == 4096 for v in found)
    text = cuda.source(kernel, found[0])[0]
    assert text.count("in0[") == 1 and "__shfl_xor_sync" in text  # three passes over one register copy
    assert "unroll is the row's" in str(cuda.variant_error(kernel, Variant(group=256, unroll=4)))
    assert cuda.variant_error(kernel, Variant(group=256, unroll=16)) is None
    assert _host_cublas().seeds(kernel) == found


@pytest.mark.skipif(_cupy() is None, reason="needs cupy and a CUDA GPU")
@pytest.mark.parametrize("case", [*CONTRACTIONS, *ROWS])
def test_on_the_gpu_each_own_variant_matches_the_numpy_device(case):
    (device,) = cuda_blas.discover()[:1]
    t = (CONTRACTIONS.get(case) or ROWS[case])()
    kernels = [k for k in _kernels(t) if device.seeds(k)]
    assert kernels
    for kernel in kernels:
        ins, want = _expected(kernel)
        for v in device.seeds(kernel):
            got = [device.upload(np.full(b.numel, np.nan, np.float32)) for b in kernel.output_types]
            device.launch(device.compile(kernel, v), [device.upload(x) for x in ins], got)
            for g, w, b in zip(got, want, kernel.output_types):
                np.testing.assert_allclose(device.download(g, b).reshape(-1), w, rtol=1e-4, atol=1e-4, err_msg=str(v))


def test_untimed_the_implicit_gemm_is_priced_below_cublas_only_where_cublas_needs_a_prologue():
    device = _host_cublas()
    conv, _ = _contraction(_conv(8, 32, 64, 64, 64, 3))
    plain, _ = _contraction(Tensor.input("a", (4096, 4096)) @ Tensor.input("b", (4096, 4096)))
    for kernel, cheaper in ((conv, True), (plain, False)):
        gemm = min(device.predict(kernel, v) for v in device.seeds(kernel))
        assert (gemm < device.predict(kernel, DEFAULT_VARIANT)) == cheaper

"""What each device runs for a kernel, as the source pane shows it: OpenCL C only on OpenCL devices."""

from __future__ import annotations

import pytest

import engine
import sample_graphs
from engine.devices import LibraryDevice, NumpyDevice
from engine.devices.source import device_source, fold_prelude
from engine.pipeline import Options, compile_program


@pytest.fixture(scope="module")
def mlp():
    c = compile_program(engine.load(sample_graphs.path("mlp.small")), [NumpyDevice(threads=2)],
                        Options(tune=False, tune_cache=False, execute=False))
    return [cand.kernel for cand in c.kernelization.candidates.values()]


def test_numpy_shows_its_numpy_calls(mlp):
    src = device_source(NumpyDevice(threads=2), mlp[0])
    assert src.title == "numpy program" and src.language == "python"
    assert src.text.startswith(f"# numpy: {mlp[0].name}") and "np." in src.text and "__kernel" not in src.text


def test_blas_shows_the_matmul_call(mlp):
    blas = LibraryDevice(threads=2)
    kernel = next(k for k in mlp if blas.supports(k))
    src = device_source(blas, kernel)
    assert src.text.startswith(f"# blas: {kernel.name}") and "np.matmul(" in src.text


def test_an_unknown_device_gets_opencl_c(mlp):
    assert "__kernel void" in device_source(None, mlp[0]).text


def test_the_native_prelude_is_folded():
    text = "#include <math.h>\ntypedef int x;\n#pragma omp simd\nint k_ab12_v3(float* out) {\n  return 0;\n}\n"
    folded = fold_prelude(text, "k_ab12")
    assert folded.splitlines()[0] == ("/* 3 lines of shared prelude (includes, typedefs, OpenMP reductions, vector "
                                      "math) folded */")
    assert folded.splitlines()[1] == "int k_ab12_v3(float* out) {" and "#include" not in folded


def test_native_shows_the_c_function_without_its_prelude(mlp):
    from engine.devices import native

    devices, note = native.discover(threads=2)
    if not devices:
        pytest.skip(note or "no native device")
    src = device_source(devices[0], mlp[0])
    lines = src.text.splitlines()
    assert src.title == "C (native)" and lines[0].startswith("/* ") and "folded" in lines[0]
    assert mlp[0].name in lines[1] and "#include" not in src.text

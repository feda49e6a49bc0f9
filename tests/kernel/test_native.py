"""The native C device: the OpenCL device's kernel tests rerun on it, plans, random programs, its cache, discovery.

The kernel tests imported from ``test_opencl`` are collected here again, with this module's ``device``
fixture (the native device) instead of an OpenCL one.  With ``ZYX_EXPLORE_REQUIRE_NATIVE`` set (CI),
a missing C compiler fails these tests instead of skipping them.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from test_random_graphs import programs

import sample_graphs
from engine import load
from engine.devices import discover as discover_all
from engine.devices.evaluate import evaluate
from engine.devices.native import NativeBuildError, NativeDevice, discover, find_compiler
from engine.kernel.index import Var, add, scale, var
from engine.kernel.ir import Acc, Buffer, Kernel, Load, Op, Reduce
from engine.kernel.render.c import source
from engine.kernel.schedule import DEFAULT_VARIANT, Variant
from engine.pipeline import Options, compile_program
from engine.program.dtypes import DType
from engine.tuning import Budget, tune
from engine.tuning.measure import mismatch, tolerance
from kernel.test_opencl import (  # noqa: F401  (collected here again, on the native device)
    VARIANTS,
    check,
    check_all_variants,
    random_inputs,
    run,
    sample,
    test_cast_to_f16_rounds_before_later_ops,
    test_casts,
    test_clamped_load_and_negative_div_mod,
    test_constants_round_trip,
    test_elementwise_broadcast,
    test_empty_tensors,
    test_every_op,
    test_int_division_and_pow_edges,
    test_int_sum_wraps,
    test_matmul_hoists_and_post_ops_multiple_outputs,
    test_movement,
    test_rank0_output_and_local_size,
    test_reduce,
    test_reduce_max_nan_and_bool,
    test_sample_kernels_match_numpy_evaluator,
    variant_kernels,
)

F32, F16, I32 = DType.F32, DType.F16, DType.I32
SMALL = [n for n in sample_graphs.names() if n.endswith(".small")]
PREDICTED = Options(tune=False, tune_cache=False)  # the nominal model: no stored calibration


def _native() -> NativeDevice:
    found, note = discover()
    if not found:
        if os.environ.get("ZYX_EXPLORE_REQUIRE_NATIVE"):
            pytest.fail(f"the native device is required here: {note}")
        pytest.skip(note or "no native device")
    return found[0]


@pytest.fixture(scope="module")
def device() -> NativeDevice:
    """Created after the session fixture pointed the cache at a temporary folder (never at import)."""
    return _native()


class DefaultOnly(NativeDevice):
    """The native device refusing every variant but the default (so plans launch default variants)."""

    def variant_error(self, kernel: Kernel, variant: Variant) -> str | None:
        return None if variant == DEFAULT_VARIANT else "default only"


def assert_verified(compilation) -> None:
    bad = [o for o in compilation.verification.outputs if not o.ok]
    assert not bad, f"{bad}\n" + "\n\n".join(str(s.kernel) for s in compilation.plan.launches())


def big_kernels() -> dict[str, Kernel]:
    """Kernels big enough to run on threads: an exp chain, row sums, a full sum, a row max."""
    n = 1 << 17
    (g,) = (Var("g0", n),)
    x = Load(0, var(g), n, F32)
    chain = Op("sub", (Op("mul", (Op("relu", (x,), F32), x), F32), Op("exp2", (Op("neg", (x,), F32),), F32)), F32)
    rows, cols = 256, 512
    g0, r0 = Var("g0", rows), Var("r0", cols)
    row = Load(0, add(scale(var(g0), cols), var(r0)), rows * cols, F32)
    (rf,) = (Var("r0", n),)
    full = Load(0, var(rf), n, F32)
    return {
        "exp_chain": Kernel((Buffer((n,), F32),), (n,), (g,), None, (chain,)),
        "row_sum": Kernel((Buffer((rows, cols), F32),), (rows,), (g0,), Reduce("sum", (r0,), row), (Acc(F32),)),
        "row_max": Kernel((Buffer((rows, cols), F32),), (rows,), (g0,), Reduce("max", (r0,), row), (Acc(F32),)),
        "full_sum": Kernel((Buffer((n,), F32),), (), (), Reduce("sum", (rf,), full), (Acc(F32),)),
    }


# -- plans and random programs --------------------------------------------------------


@pytest.mark.parametrize("name", SMALL)
def test_sample_plan_on_native(device, name):
    compilation = compile_program(load(sample_graphs.path(name)), [device], PREDICTED)
    assert_verified(compilation)
    assert {s.device for s in compilation.plan.launches()} == {"native"}


@settings(max_examples=100, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_random_programs_suggested_variants(built):
    assert_verified(compile_program(built.program, [_native()], PREDICTED))


@settings(max_examples=100, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_random_programs_default_variants(built):
    d = _native()
    assert_verified(compile_program(built.program, [DefaultOnly(d.compiler, d.threads, d.directory)], PREDICTED))


def test_tuned_plan_launches_native_variants(device):
    compilation = compile_program(load(sample_graphs.path("softmax.small")), [device],
                                  Options(tune_budget=Budget(variants=6, seconds=10.0)))
    assert_verified(compilation)
    results = [r for kn, r in compilation.tuning.items() if kn.device == "native"]
    assert results and all(r.ok and len(r.trials) > 1 for r in results)


def test_every_variant_matches_the_evaluator(device):
    """The OpenCL tests' kernels in every variant the native device takes, built in one call, against numpy."""
    kernels = variant_kernels()
    taken = check_all_variants(device, kernels, [DEFAULT_VARIANT, *VARIANTS], random_inputs)
    assert {v.group > 1 for vs in taken.values() for v in vs} == {True, False}
    assert sum(len(vs) for vs in taken.values()) > 5 * len(kernels)


# -- threads, vector loops, variants on big kernels ---------------------------------------


def test_big_kernels_every_variant(device):
    """Threaded and vectorised loops, split and reassociated reduces, dynamic chunks: all equal the evaluator."""
    variants = [DEFAULT_VARIANT, Variant(upcast=4), Variant(unroll=4), Variant(group=64), Variant(local_size=16),
                Variant(local_size=64, unroll=4), Variant(group=8)]
    taken = check_all_variants(device, big_kernels(), variants, random_inputs)
    assert min(len(vs) for vs in taken.values()) >= 3, taken


def test_source_shapes(device):
    k = big_kernels()
    src = source([(k["exp_chain"], DEFAULT_VARIANT)], 2, True, True)
    assert "#pragma omp parallel for num_threads(2) schedule(static)" in src and "#pragma omp simd\n" in src
    assert "vload4" not in src and "__kernel" not in src
    src = source([(k["row_max"], Variant(unroll=4))], 2, True, True)
    assert "#pragma omp simd reduction(zx_max_f:acc0)" in src
    src = source([(k["full_sum"], Variant(group=64))], 2, True, True)
    assert "malloc" in src and "piece" in src and "reduction(+:acc0)" in src
    src = source([(k["exp_chain"], Variant(local_size=16))], 2, True, True)
    assert "schedule(dynamic, 1)" in src
    tiny = Kernel((Buffer((8,), F32),), (8,), (Var("g0", 8),), None, (Load(0, var(Var("g0", 8)), 8, F32),))
    assert "omp parallel" not in source([(tiny, DEFAULT_VARIANT)], 2, True, True)  # too small for threads
    g0, r0 = Var("g0", 4), Var("r0", 1 << 15)  # four long reduces: two points per thread
    few = Kernel((Buffer((4, 1 << 15), F32),), (4,), (g0,),
                 Reduce("sum", (r0,), Load(0, add(scale(var(g0), 1 << 15), var(r0)), 1 << 17, F32)), (Acc(F32),))
    assert "omp parallel for" in source([(few, DEFAULT_VARIANT)], 2, True, True)


def test_vector_math_from_libmvec(device, tmp_path):
    """The exp chain's loop calls a libmvec vector variant of exp2f (no -ffast-math)."""
    if not device.compiler.simd_math:
        pytest.skip("this compiler links no libmvec")
    fresh = NativeDevice(device.compiler, device.threads, tmp_path)
    fresh.compile(big_kernels()["exp_chain"])
    (so,) = tmp_path.glob("*.so")
    assert b"_ZGV" in so.read_bytes() and b"exp2f" in so.read_bytes()


def test_native_device_is_tunable(device):
    k = big_kernels()["full_sum"]
    result = tune(k, device, Budget(variants=6, seconds=20.0))
    assert result.ok and len({t.variant for t in result.trials}) == len(result.trials) > 2
    assert all(t.status == "ok" for t in result.trials), [t.reason for t in result.trials if t.status != "ok"]
    assert device.predict(k, Variant(group=64)) < device.predict(k, DEFAULT_VARIANT)
    assert 0 < device.estimate(k) <= device.predict(k, DEFAULT_VARIANT) and device.transfer_estimate(1 << 20) == 0


def test_strided_reduce_loads(device):
    """A matmul's column operand: not vectorised (gathers), predicted by cache lines, lanes sharing them."""
    from engine.kernel.render.c import strided_loads

    mm, rows = variant_kernels()["matmul_odd"], big_kernels()["row_sum"]
    assert strided_loads(mm) == 1 and strided_loads(rows) == 0
    assert "strided" in device.variant_error(mm, Variant(unroll=4)) and device.variant_error(rows, Variant(unroll=4)) is None
    assert device.predict(mm, Variant(upcast=4)) < device.predict(mm, DEFAULT_VARIANT)


def test_explorer_source(device):
    from engine.devices.native import generate

    k = big_kernels()["row_sum"]
    assert generate(k, Variant(unroll=4)) == device.program_source([(k, Variant(unroll=4))])
    assert "int k_" in generate(k) and "reduction(+:acc0)" in generate(k, Variant(unroll=4))


def test_index_arithmetic_is_64_bit():
    """Under ``-fwrapv`` an ``int`` index such as ``4096*g0 + g1`` may wrap, so gcc vectorised a row's contiguous
    loads and stores as gathers and scatters; every index variable is a ``long``."""
    rows, cols = Var("g0", 64), Var("g1", 4096)
    at = add(scale(var(rows), 4096), var(cols))
    k = Kernel((Buffer((64, 4096), F32),), (64, 4096), (rows, cols), None,
               (Op("exp2", (Load(0, at, 64 * 4096, F32),), F32),))
    for v in (DEFAULT_VARIANT, Variant(upcast=4), Variant(local_size=16)):
        text = source([(k, v)], 2, False, True)
        assert "const long g0" in text and "for (long g1" in text and "int g" not in text


def test_unsupported_and_invalid(device):
    (g,) = (Var("g0", 4),)
    k = Kernel((Buffer((4,), I32),), (4,), (g,), None, (Op("sin", (Load(0, var(g), 4, I32),), I32),))
    assert not device.supports(k)
    with pytest.raises(NativeBuildError, match="sin does not apply to i32"):
        device.compile(k)
    ew = variant_kernels()["elementwise_broadcast"]
    assert device.variant_error(ew, Variant(unroll=2)) and device.variant_error(ew, Variant(group=64))
    with pytest.raises(NativeBuildError, match="unroll needs a reduce loop"):
        device.compile(ew, Variant(unroll=2))


def test_build_error_has_log(device, tmp_path):
    from engine.devices.native import build

    with pytest.raises(NativeBuildError) as info:
        build(device.compiler, "int broken(void) { return undefined_name; }\n", tmp_path)
    assert "undefined_name" in info.value.log and "undefined_name" in str(info.value)
    assert not list(tmp_path.glob("*.so"))  # nothing cached


def test_non_contiguous_arrays(device):
    k = variant_kernels()["elementwise_broadcast"]
    arrays = [sample(b.dtype, b.shape, seed=i) for i, b in enumerate(k.inputs)]
    want = evaluate(k, arrays)
    compiled = device.compile(k)
    ins = [np.asfortranarray(a) if a.ndim > 1 else a.astype(np.float64) for a in arrays]  # copied to C order/dtype
    outs = [np.asfortranarray(np.zeros(b.shape, b.dtype.numpy)) for b in k.output_types]
    device.launch(compiled, ins, outs)
    assert mismatch(outs, want, *tolerance(k)) is None


# -- the compile cache --------------------------------------------------------------------


def test_compile_cache_hit_on_second_compile(device, tmp_path):
    k = variant_kernels()["matmul_odd"]
    first = NativeDevice(device.compiler, device.threads, tmp_path)
    first.compile(k)
    first.compile(k)
    assert first.builds == 1 and len(list(tmp_path.glob("*.so"))) == 1
    second = NativeDevice(device.compiler, device.threads, tmp_path)  # another process, the same folder
    second.compile(k)
    assert second.builds == 0
    items = [(k, Variant(upcast=2)), (k, Variant(group=16)), (k, Variant(upcast=4, tile=2))]
    second.compile_many(items)
    assert second.builds == 1  # one compiler call for the three
    for kernel, v in items:
        second.compile(kernel, v)
    assert second.builds == 1
    if device.compiler.threads:  # a threaded kernel's source names its thread count: another object per count
        big = big_kernels()["exp_chain"]
        for threads in (2, 3):
            d = NativeDevice(device.compiler, threads, tmp_path)
            d.compile(big)
            assert d.builds == 1


# -- discovery without a working compiler ---------------------------------------------------


def test_broken_compiler_gives_a_note_and_no_device(monkeypatch, tmp_path):
    monkeypatch.setenv("ZYX_EXPLORE_CC", "false")
    found, note = discover()
    assert found == [] and note.startswith("native device not offered: the C compiler ") and "\n" not in note
    notes: list[str] = []
    devices = discover_all(opencl=False, notes=notes)
    assert [d.name for d in devices] == ["numpy", "blas"] and notes == [note]
    monkeypatch.setenv("ZYX_EXPLORE_CC", str(tmp_path / "no-such-cc"))
    assert "is not a command" in discover()[1]


def test_no_compiler_on_path(monkeypatch, tmp_path):
    monkeypatch.delenv("ZYX_EXPLORE_CC", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert find_compiler() == "no C compiler (cc, gcc or clang) on PATH"
    assert discover() == ([], "native device not offered: no C compiler (cc, gcc or clang) on PATH")


def test_cli_prints_the_note(tmp_path):
    env = {**os.environ, "ZYX_EXPLORE_CC": "false"}
    done = subprocess.run([sys.executable, "-m", "zyx_explorer.cli", "export", sample_graphs.path("sum.small"), "-o",
                           str(tmp_path / "out"), "--no-tune", "--no-opencl", "--stage", "plan", "--format", "dot"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "note: native device not offered: the C compiler " in done.stderr and "false" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(("given", "policy"), [(None, "passive"), ("ACTIVE", "active")])
def test_openmp_threads_sleep_after_a_kernel_unless_the_user_says_otherwise(device, given, policy):
    """Threads that spin after a native kernel took the cores from the next BLAS call; the policy is set before
    the OpenMP runtime loads, a policy the user set is kept, and the one in force is part of the cache keys."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"} | ({"OMP_WAIT_POLICY": given} if given else {})
    script = ("import os; from engine.devices.native import discover; (d,), _ = discover(); "
              "print(os.environ['OMP_WAIT_POLICY'], '|', d.driver_version)")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    seen, key = done.stdout.strip().split(" | ", 1)
    assert seen.lower() == policy and f"| wait {policy} |" in key


def test_a_split_reduce_of_many_short_pieces_is_predicted_slower(device):
    """Each piece of a split reduce is a loop set up and stored in scalar code: 512 outputs of 1024 adds cut into
    256 pieces of 4 cost more than into 16 pieces of 64 (the adds alone are the same), and the workers that
    ``predict`` and the calibrated wake-up cost count are the renderer's (one below PARALLEL_STEPS loop steps)."""
    from engine.kernel.render.c import PARALLEL_STEPS
    from tests.test_autotune import row_sum

    k = row_sum(512, 1024)
    assert device.predict(k, Variant(group=256)) > device.predict(k, Variant(group=16))
    tiny = row_sum(4, 64)
    assert tiny.numel * 64 < PARALLEL_STEPS and device.workers(tiny, Variant(group=16)) == 1
    assert device.workers(k, Variant(group=16)) == min(device.threads, 512 * 16)

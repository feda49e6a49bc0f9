"""Row kernels: a chain of reduces over one row and the output that uses them, in one kernel.

The kernelizer offers them beside the unfused kernels; each is checked against the
reference interpreter on the numpy evaluator, on every OpenCL device found, in
the default variant (a row per work item) and group variants (a row per work-group)
whose size does not divide the row, and on the native C device with its stages in order and vectorised.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sample_graphs
from engine import Tensor, from_tensors, load
from engine.devices import native
from engine.devices.base import SIBLINGS_ELSEWHERE, Nominal
from engine.devices.evaluate import evaluate
from engine.devices.numpy_device import LibraryDevice, NumpyDevice
from engine.devices.opencl import discover
from engine.devices.row_plan import unfused
from engine.egraph import from_program, saturate
from engine.kernel.cost import work
from engine.kernel.index import Var, add, scale, var
from engine.kernel.ir import Acc, Buffer, Kernel, Load, Op, Reduce, schedule
from engine.kernel.kernelize import Candidate, Kernelization, kernelize
from engine.kernel.render.base import UnsupportedKernelError, check
from engine.kernel.render.c import ROW_VECTOR, stored_summand
from engine.kernel.render.c import source as c_source
from engine.kernel.render.opencl import generate
from engine.kernel.schedule import DEFAULT_VARIANT, InvalidVariantError, Variant, launch_size
from engine.pipeline import Options, compile_program, extract, run
from engine.program.dtypes import DType
from engine.program.init import Init
from engine.program.program import Program
from engine.program.reference import evaluate as reference
from engine.tuning import Budget, predict, suggest, tune
from engine.tuning.space import seeds

DEVICES = discover()
F32 = DType.F32
VARIANTS = [DEFAULT_VARIANT, Variant(local_size=8), Variant(group=4), Variant(group=64)]


def kernelized(program: Program) -> Kernelization:
    egraph = from_program(program)
    saturate(egraph)
    return kernelize(egraph)


def row_candidates(kz: Kernelization, name: str, siblings: bool = False) -> list[Candidate]:
    """The row kernels (or, with ``siblings``, the siblings kernels) of output ``name``."""
    return [c for c in kz.kernels(kz.egraph.output_classes()[name]) if c.kernel.stages and c.kernel.siblings == siblings]


def row_case(program: Program, siblings: bool = False) -> tuple[Kernel, list[np.ndarray], np.ndarray]:
    """The row kernel (or siblings kernel) of the program's one output (it must read only inputs), its inputs and
    the expected output."""
    kz = kernelized(program)
    ((name, _),) = kz.egraph.output_classes().items()
    (cand,) = row_candidates(kz, name, siblings)
    values = program.input_values()
    names = [kz.egraph.node(kz.defaults[c]).param for c in cand.inputs]
    want = reference(program.lower(), values)[name]
    return cand.kernel, [values[n] for n in names], want


def close(got: np.ndarray, want: np.ndarray, what: str = "") -> None:
    dtype = next(d for d in DType if d.numpy == want.dtype)
    rtol, atol = dtype.tolerance if dtype.is_float else (0, 0)
    np.testing.assert_allclose(np.asarray(got, np.float64), np.asarray(want, np.float64), rtol, atol, err_msg=what)


@functools.cache
def native_devices() -> list[native.NativeDevice]:
    """The native device if this machine has a C compiler (found on first use: the session's cache folder)."""
    return native.discover()[0]


def on_device(device, kernel: Kernel, arrays: list[np.ndarray], variant: Variant) -> np.ndarray:
    compiled = device.compile(kernel, variant)
    ins = [device.upload(np.asarray(a, b.dtype.numpy)) for a, b in zip(arrays, kernel.inputs)]
    (out_type,) = kernel.output_types
    out = device.alloc(out_type)
    device.launch(compiled, ins, [out])
    got = device.download(out, out_type)
    for h in [*ins, out]:
        device.free(h)
    return got


def check_everywhere(kernel: Kernel, arrays: list[np.ndarray], want: np.ndarray) -> None:
    """The numpy evaluator and device, and every OpenCL device in every variant of VARIANTS, give ``want``."""
    (got,) = evaluate(kernel, arrays)
    close(got, want, "numpy evaluator")
    numpy = NumpyDevice(max_elements=64)
    close(on_device(numpy, kernel, arrays, DEFAULT_VARIANT), want, "numpy device")
    for device in DEVICES:
        device.compile_many([(kernel, v) for v in VARIANTS])
        for v in VARIANTS:
            close(on_device(device, kernel, arrays, v), want, f"{device.name} {v}")
    for device in native_devices():
        for v in (DEFAULT_VARIANT, ROW_VECTOR):
            close(on_device(device, kernel, arrays, v), want, f"native {v}")


# -- the kernelizer ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ["softmax.small", "layernorm.small"])
def test_kernelizer_offers_a_row_kernel_for_normalisations(name):
    program = load(sample_graphs.path(name))
    kz = kernelized(program)
    ((out, cls),) = kz.egraph.output_classes().items()
    rows = row_candidates(kz, out)
    assert len(rows) == 1 and rows[0] is not kz.kernels(cls)[0]  # an extra candidate, not the default
    kernel = rows[0].kernel
    assert kernel.reduce is None and len(kernel.stages) == 2
    assert [s.op for s in kernel.stages] == (["max", "sum"] if name.startswith("softmax") else ["sum", "sum"])
    assert all(kz.egraph.node(kz.defaults[c]).op == "leaf" for c in rows[0].inputs)  # nothing stored between
    assert kernel.shape == kernel.output_types[0].shape[:1] and kernel.row_size == kernel.output_types[0].shape[1]
    assert any(isinstance(e, Acc) and e.stage == 0 for e in schedule([kernel.stages[1].body]))  # a chain
    # the unfused kernels are still offered: the output's default kernel loads the stored reduces
    assert len(kz.kernels(cls)[0].inputs) > len(rows[0].inputs)


def test_row_kernel_moves_fewer_bytes_than_the_unfused_chain():
    kernel, _, _ = row_case(from_tensors([Tensor.input("x", (64, 100)).softmax().named("y")]))
    parts = unfused(kernel)
    assert len(parts) == 3
    assert work(kernel).bytes == 2 * 64 * 100 * 4
    assert work(kernel).bytes < sum(work(k).bytes for k in parts)
    assert work(kernel).ops >= sum(work(k).ops for k in parts[:1])


def test_elementwise_and_lone_reduces_get_no_row_kernel():
    x = Tensor.input("x", (8, 16))
    for y in ((x * 2).exp(), x.sum(-1), x.max(-1).exp()):
        kz = kernelized(from_tensors([y.named("y")]))
        assert not row_candidates(kz, "y")


def test_no_row_kernel_recomputes_a_normalisation_per_point_of_a_matmul():
    x, w = Tensor.input("x", (8, 16)), Tensor.input("w", (16, 32))
    kz = kernelized(from_tensors([(x.layernorm() @ w).relu().named("y")]))
    assert not [c for c in kz.candidates.values() if c.kernel.stages and c.kernel.row_size <= 1]


def siblings(kz: Kernelization) -> list[Candidate]:
    return [c for c in kz.candidates.values() if c.kernel.siblings]


def test_kernelizer_offers_siblings_for_a_gated_units_products():
    """swiglu's ``silu(norm @ wg) * (norm @ wu)``: both products as stages of one kernel of one point per row,
    beside the default kernel (which stores the first product); the shared normalisation stays stored."""
    kz = kernelized(load(sample_graphs.path("swiglu_mlp.small")))
    (cand,) = siblings(kz)
    kernel = cand.kernel
    assert [s.op for s in kernel.stages] == ["sum", "sum"] and kernel.row_size == 1 and kernel.store == kernel.vars
    assert not any(isinstance(e, Acc) for s in kernel.stages for e in schedule([s.body]))  # side by side
    assert [f.rule for f in cand.decisions.fused].count("sibling") == 2 and cand.decisions.grown == "siblings"
    assert kz.name(cand.id).endswith("/siblings")
    default = kz.kernels(cand.output)[0]
    assert default.kernel.reduce is not None and set(default.inputs) - set(cand.inputs)  # it loads a stored product


def test_a_lone_reduce_gets_no_siblings_and_product_siblings_are_declined_off_cublas():
    """One reduce at the output point is the default kernel already.  Siblings of products are declined by every
    device here, with the reason; a row's sum beside its max is not (each point reads its own row)."""
    x, w, v = Tensor.input("x", (8, 16)), Tensor.input("w", (16, 32)), Tensor.input("v", (16, 32))
    assert not siblings(kernelized(from_tensors([(x @ w).relu().named("y")])))
    (products,) = siblings(kernelized(from_tensors([((x @ w) * (x @ v)).named("y")])))
    (rows,) = siblings(kernelized(from_tensors([(x.sum(-1) + x.max(-1)).named("y")])))
    assert sorted(s.op for s in rows.kernel.stages) == ["max", "sum"]
    for device in (NumpyDevice(), LibraryDevice(), *DEVICES, *native_devices()):
        assert device.unsupported(products.kernel) == SIBLINGS_ELSEWHERE
    assert NumpyDevice().supports(rows.kernel) and not LibraryDevice().supports(rows.kernel)
    assert all(d.supports(rows.kernel) for d in (*DEVICES, *native_devices()))


SIBLING_CASES = {
    "max_minus_mean": (lambda x: x.max(-1) - x.mean(-1), (5, 37)),
    "three": (lambda x: x.sum(-1) * x.max(-1) - (-x).max(-1), (6, 29)),
    "two_axes": (lambda x: x.max((1, 2)) - x.mean((1, 2)), (3, 4, 5)),
    "first_axis": (lambda x: x.sum(0) + (x * x).sum(0), (67, 3)),
    "one_row": (lambda x: x.max(-1) - x.sum(-1), (1, 1000)),
}


@pytest.mark.parametrize("case", list(SIBLING_CASES))
def test_siblings_of_row_reduces_match_the_reference_everywhere(case):
    """Each point's reduces over its own row, side by side: the numpy evaluator and device, every OpenCL device in
    every variant and the native device give the reference's values."""
    build, shape = SIBLING_CASES[case]
    kernel, arrays, want = row_case(_program(build, shape), siblings=True)
    assert kernel.row_size == 1 and len(kernel.stages) >= 2
    check_everywhere(kernel, arrays, want)


def test_siblings_of_f16_integer_special_and_empty_rows_match_the_reference():
    """Half rows, integer extremes (a wrapping sum beside a max), NaN, infinities and signed zeros, and no rows."""
    x16 = Tensor.input("x", (3, 70), DType.F16)
    xi = Tensor.input("x", (4, 33), DType.I32, Init.uniform(3, -2.0**31, 2.0**31 - 1))
    special = [[math.nan, 1, 2, 3], [math.inf, 0, -1, 2], [-math.inf, -math.inf, 0, 1], [-0.0, 0.0, -0.0, -0.0]]
    xs = Tensor.input("x", (4, 4), init=Init("values", {"values": special}))
    empty = Tensor.input("x", (0, 5))
    for x in (x16, xi, xs, empty):
        kernel, arrays, want = row_case(from_tensors([(x.max(-1) + x.sum(-1)).named("y")]), siblings=True)
        check_everywhere(kernel, arrays, want)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 5), st.integers(2, 70), st.lists(st.sampled_from(["sum", "max", "min", "sumsq"]),
                                                      min_size=2, max_size=4, unique=True))
def test_random_siblings_match_the_reference(rows, cols, reduces):
    """2-4 distinct reduces of each row (a reduce over one element is none; a mean is its row's sum, shared)."""
    x = Tensor.input("x", (rows, cols))
    forms = {"sum": x.sum(-1), "max": x.max(-1), "min": -(-x).max(-1), "sumsq": (x * x).sum(-1)}
    parts = [forms[r] for r in reduces]
    y = parts[0]
    for p in parts[1:]:
        y = y * 0.5 + p
    kernel, arrays, want = row_case(from_tensors([y.named("y")]), siblings=True)
    assert len(kernel.stages) == len(reduces)
    check_everywhere(kernel, arrays, want)


# -- correctness: numpy and OpenCL, every variant -----------------------------------------


def _program(build, shape) -> Program:
    return from_tensors([build(Tensor.input("x", shape)).named("y")])


CASES = {
    "softmax": (lambda x: x.softmax(), (5, 37)),
    "log_softmax": (lambda x: x.log_softmax(), (3, 100)),
    "softmax_axis0": (lambda x: x.softmax(axis=0), (67, 6)),
    "softmax_middle": (lambda x: x.softmax(axis=1), (2, 19, 3)),
    "softmax_whole": (lambda x: x.reshape(90).softmax(), (9, 10)),
    "layernorm_no_affine": (lambda x: x.layernorm(), (4, 33)),
    "var_of_exp": (lambda x: x.exp().var(-1, keepdim=True).expand(6, 29) * x, (6, 29)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_row_kernel_matches_the_reference(case):
    build, shape = CASES[case]
    kernel, arrays, want = row_case(_program(build, shape))
    check_everywhere(kernel, arrays, want)


def test_layernorm_with_weight_and_bias_matches_the_reference():
    x, w, b = Tensor.input("x", (7, 45)), Tensor.input("w", (45,)), Tensor.input("b", (45,))
    kernel, arrays, want = row_case(from_tensors([x.layernorm(w, b).named("y")]))
    assert len(kernel.inputs) == 3
    check_everywhere(kernel, arrays, want)


@st.composite
def chains(draw):
    """x (rows, cols), then 1-3 reduces over its last axis, each reading x and the reduces before it."""
    rows, cols = draw(st.integers(1, 5)), draw(st.integers(2, 70))  # a reduce over 1 element is no reduce
    x = Tensor.input("x", (rows, cols))
    cur, ops = x, []
    for _ in range(draw(st.integers(1, 3))):
        pre = draw(st.sampled_from(["id", "square", "exp"]))
        arg = {"id": cur, "square": cur * cur, "exp": cur.exp()}[pre]
        red = draw(st.sampled_from(["sum", "max", "mean"]))
        r = getattr(arg, red)(-1, keepdim=True).expand(rows, cols)
        post = draw(st.sampled_from(["sub", "mul", "div"]))
        squashed = r.tanh()  # keeps every stage's values within [-1, 1]
        cur = {"sub": x - squashed, "mul": x * squashed, "div": x / (squashed.abs() + 1)}[post]
        ops.append((pre, red, post))
    return from_tensors([cur.named("y")]), ops


def test_f16_integer_special_value_and_empty_rows_match_the_reference():
    """Half rows computed in float, integer stages (a max, then a wrapping sum), NaN and infinities in a max, and
    a softmax over no rows."""
    x16 = Tensor.input("x", (3, 70), DType.F16)
    xi = Tensor.input("x", (4, 33), DType.I32, Init.uniform(3, -2.0**30, 2.0**30))
    shifted = xi - xi.max(-1, keepdim=True).expand(4, 33)
    special = [[math.nan, 1, 2, 3], [math.inf, 0, -1, 2], [-math.inf, -math.inf, 0, 1], [-0.0, 0.0, 5, -5]]
    xs = Tensor.input("x", (4, 4), init=Init("values", {"values": special}))
    empty = Tensor.input("x", (0, 5)).softmax()
    for y in (x16.softmax(), shifted + shifted.sum(-1, keepdim=True).expand(4, 33), xs.softmax(), empty):
        kernel, arrays, want = row_case(from_tensors([y.named("y")]))
        check_everywhere(kernel, arrays, want)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chains())
def test_random_reduce_chains(case):
    program, ops = case
    kernel, arrays, want = row_case(program)
    assert 1 <= len(kernel.stages) <= len(ops)
    check_everywhere(kernel, arrays, want)


# -- codegen -------------------------------------------------------------------------------


def test_group_variant_source_and_launch():
    kernel, _, _ = row_case(_program(lambda x: x.softmax(), (5, 37)))
    source = generate(kernel, Variant(group=16))
    assert source.count("barrier(CLK_LOCAL_MEM_FENCE)") == 4 and "zx_part1" in source
    assert "for (int ro = lid; ro < 37; ro += 16)" in source and "return" not in source
    assert launch_size(kernel, Variant(group=16)) == (5 * 16, 16)
    assert launch_size(kernel, Variant(local_size=4)) == (8, 4)
    for bad in (Variant(upcast=2), Variant(unroll=2), Variant(group=12), Variant(group=16, local_size=8)):
        with pytest.raises(InvalidVariantError):
            generate(kernel, bad)


def test_siblings_stages_share_one_loop_and_its_loads():
    """A row's max beside its mean: one loop, each element loaded once, the sum in blocks beside the max; on the
    native device's vectorised variant one ``omp simd`` reducing both."""
    kernel, _, _ = row_case(_program(lambda x: x.max(-1) - x.mean(-1), (5, 300)), siblings=True)
    source = generate(kernel, DEFAULT_VARIANT)
    assert source.count("in0[") == 1 and source.count("for (int ri") == 1 and "part1 = part1 + " in source
    assert "omp simd reduction(zx_max_f:acc0) reduction(+:acc1)" in c_source([(kernel, ROW_VECTOR)], 2, False, False)
    grouped = generate(kernel, Variant(group=16))
    assert grouped.count("in0[") == 2  # a work-group per point: a group reduce per stage


def test_a_stage_reading_a_later_stage_is_unsupported():
    g, r = Var("g0", 4), Var("r0", 8)
    x = Load(0, add(scale(var(g), 8), var(r)), 32, F32)
    stages = (Reduce("sum", (r,), Op("add", (x, Acc(F32, 1)), F32)), Reduce("sum", (r,), x))
    c = Var("g1", 8)
    kernel = Kernel((Buffer((4, 8), F32),), (4,), (g,), None, (Acc(F32, 0),), stages, (g, c))
    with pytest.raises(UnsupportedKernelError):
        check(kernel)


# -- devices, tuning and extraction ----------------------------------------------------------


def test_blas_declines_row_kernels_and_numpy_estimates_them_as_their_parts():
    kernel, _, _ = row_case(_program(lambda x: x.softmax(), (64, 100)))
    assert not LibraryDevice().supports(kernel)
    numpy = NumpyDevice()
    parts = sum(numpy.estimate(k) for k in unfused(kernel))
    assert math.isclose(numpy.estimate(kernel), parts - 2 * numpy.launch_overhead)


@pytest.mark.skipif(not DEVICES, reason="no OpenCL device")
def test_tuning_a_row_kernel_verifies_every_seed():
    kernel, _, _ = row_case(_program(lambda x: x.log_softmax(), (33, 300)))
    result = tune(kernel, DEVICES[0], Budget(variants=8, seconds=20))
    assert result.ok and len(result.trials) >= 3
    assert all(t.status == "ok" for t in result.trials), [(str(t.variant), t.reason) for t in result.trials]
    assert any(t.variant.group > 1 for t in result.trials)


@pytest.mark.parametrize("name", ["softmax.small", "layernorm.small"])
def test_plans_choose_the_row_kernel_by_cost_and_still_run_without_it(name):
    program = load(sample_graphs.path(name))
    devices = [NumpyDevice(), *DEVICES]
    c = compile_program(program, devices, Options(tune=False, tune_cache=False))  # nominal: no stored calibration
    assert c.verification.ok
    (launch,) = c.plan.launches()  # one kernel: the row kernel, on whichever device is cheapest
    assert launch.kernel.stages
    # where the row kernel is slower (here: made infinitely slow), extraction takes the unfused chain
    for kn in c.kernel_times:
        if c.kernelization.candidates[kn.candidate].kernel.stages:
            c.kernel_times[kn] = math.inf
    extract(c)
    assert len(c.plan.launches()) > 1 and not any(s.kernel.stages for s in c.plan.launches())
    assert run(c).ok


def _unfused_and_row(program: Program) -> tuple[list[Kernel], Kernel]:
    """The output's default chain of kernels (the reduces stored) and its row kernel."""
    kz = kernelized(program)
    chain, seen, stack = [], set(), list(kz.egraph.output_classes().values())
    while stack:
        c = kz.egraph.find(stack.pop())
        if c not in seen and kz.kernels(c):
            seen.add(c)
            chain.append(kz.kernels(c)[0].kernel)
            stack.extend(kz.kernels(c)[0].inputs)
    ((name, _),) = kz.egraph.output_classes().items()
    (row,) = row_candidates(kz, name)
    return chain, row.kernel


class _GPU:
    """Just what the cost model reads of an OpenCL GPU: H200-like nominal numbers and limits."""

    name, pool, is_gpu, tunable = "gpu", "gpu", True, True
    nominal = Nominal(bandwidth=3.3e12, throughput=132 * 1.98e9 * 64, overhead=5e-6, transfer_bandwidth=20e9,
                      transfer_overhead=1e-5, units=132, lanes=1)

    def variant_error(self, kernel: Kernel, variant: Variant) -> str | None:
        return None

    def seeds(self, kernel: Kernel) -> list[Variant]:
        return []


@pytest.mark.skipif(not any(not d.is_gpu for d in DEVICES), reason="no OpenCL CPU device")
def test_the_cost_model_prefers_row_kernels_on_gpus_not_cpus():
    x = Tensor.input("x", (4096, 4096))
    chain, row = _unfused_and_row(from_tensors([x.softmax().named("y")]))
    assert len(chain) == 3
    gpu, cpu = _GPU(), next(d for d in DEVICES if not d.is_gpu)

    def seconds(device, kernels):
        return sum(predict(k, device, suggest(k, device)) for k in kernels)

    assert seconds(gpu, [row]) < 0.6 * seconds(gpu, chain)  # read once instead of three times
    assert suggest(row, gpu).group > 1  # a row per work-group
    assert seeds(row, gpu=True)[0].group > 1 and seeds(row, gpu=False)[0] == DEFAULT_VARIANT  # timed first
    assert seconds(cpu, [row]) > seconds(cpu, chain)  # its loops do not vectorise there


def test_native_runs_rows_in_parallel_and_prefers_its_vectorised_stages():
    """One pass over memory instead of three: the vectorised row kernel is predicted under the unfused chain's
    best variants; its in-order default is scalar; no OpenCL variant applies."""
    if not native_devices():
        pytest.skip("no C compiler")
    device = native_devices()[0]
    chain, row = _unfused_and_row(from_tensors([Tensor.input("x", (4096, 4096)).softmax().named("y")]))
    assert device.predict(row, ROW_VECTOR) < 0.6 * sum(device.estimate(k) for k in chain)
    assert device.predict(row, ROW_VECTOR) < device.predict(row) and device.estimate(row) == device.predict(
        row, ROW_VECTOR)
    assert device.seeds(row) == [ROW_VECTOR] and device.workers(row) == device.threads
    for bad in (Variant(group=64), Variant(local_size=8), Variant(unroll=2)):
        assert "row kernel" in device.variant_error(row, bad)
    source = device.source(row, ROW_VECTOR).text
    assert source.count("#pragma omp simd reduction") == 2 and "#pragma omp parallel for" in source
    assert "#pragma omp simd reduction" not in device.source(row).text
    # the sum's exp is stored into the output's row and read back there, not computed again
    assert source.count("exp2(") == 1 and "out0[4096*g0 + ri] = " in source and "= out0[4096*g0 + c0] / " in source


def test_a_stored_summand_needs_a_dear_op_and_an_output_of_its_dtype():
    x = Tensor.input("x", (6, 40))
    for y, stored in ((x.softmax(), True), (x.softmax(axis=0), True), (x.log_softmax(), False),
                      (x.layernorm(), False), (Tensor.input("x", (6, 40), DType.F16).softmax(), False)):
        kernel, _, _ = row_case(from_tensors([y.named("y")]))
        assert (stored_summand(kernel) is not None) == stored, y

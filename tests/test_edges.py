"""Correctness at the edges (issue 17), on every device, against hand-written numpy oracles.

Each point has its own tests: wrong input arrays, empty tensors, integer extremes,
signed zeros, f16 accumulation, composites near zero, infinities in contractions, the
verification tolerance, and the smaller cases.  ``test_edge_programs`` is the property
over random programs: edge shapes (0, 1, odd sizes), special values (±0, ±inf, NaN,
integer extremes) and f16, each op computed alongside by plain numpy in the program's
dtype, compared with the reference and with every device's result.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import DType, Init, Tensor, from_tensors
from engine.devices import LibraryDevice, NumpyDevice
from engine.devices.native import discover as discover_native
from engine.devices.opencl import discover as discover_opencl
from engine.egraph import EGraph, Runner, check_semantics, from_program, rewrite
from engine.egraph.pattern import P, Var
from engine.errors import DTypeError, InputError, ShapeError
from engine.pipeline import Options, compile_program, run, verify
from engine.plan import Session, execute
from engine.program.reference import evaluate
from engine.tuning import Budget

F16, F32, F64, I32, I64 = DType.F16, DType.F32, DType.F64, DType.I32, DType.I64
PREDICTED = Options(tune=False, tune_cache=False)
DEVICE_SETS = {"numpy": [NumpyDevice(), LibraryDevice()], "native": discover_native()[0],
               "opencl": [d for d in discover_opencl() if not d.is_gpu][:1]}
DEVICE_SETS = {name: devices for name, devices in DEVICE_SETS.items() if devices}
ON_EVERY_DEVICE = pytest.mark.parametrize("devices", list(DEVICE_SETS.values()), ids=list(DEVICE_SETS))


def given_values(name: str, values, dtype: DType = F32) -> Tensor:
    """An input holding exactly ``values``."""
    array = np.asarray(values, dtype.numpy)
    return Tensor.input(name, array.shape, dtype, Init("values", {"values": array.tolist()}))


def assert_matches(got: np.ndarray, want: np.ndarray, dtype: DType) -> None:
    """Equal shapes, NaN where the oracle has NaN, the same infinities, finite values within ``dtype``'s tolerance."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    if not dtype.is_float:
        np.testing.assert_array_equal(got, want)
        return
    g, w = got.astype(np.float64), want.astype(np.float64)
    assert np.array_equal(np.isnan(g), np.isnan(w)), (got, want)
    assert np.array_equal(g[np.isinf(w)], w[np.isinf(w)]) and not np.isinf(g[~np.isinf(w)]).any(), (got, want)
    rtol, atol = dtype.tolerance
    finite = np.isfinite(w)
    assert np.allclose(g[finite], w[finite], rtol=rtol, atol=atol), (got, want)


def on(devices, outputs, oracle: dict[str, np.ndarray], options: Options = PREDICTED) -> None:
    """Compile ``outputs`` for ``devices``: the reference and the plan's results match the oracle, and verify."""
    program = from_tensors(outputs)
    reference = evaluate(program.lower(), program.input_values())
    c = compile_program(program, devices, options)
    for name, want in oracle.items():
        dtype = program.types()[name][1]
        assert_matches(reference[name], want, dtype)
        assert_matches(c.execution.outputs[name], want, dtype)
    assert c.verification.ok, c.verification


# -- 1. input arrays are checked before anything reads them ----------------------------------------------


@ON_EVERY_DEVICE
def test_a_wrong_input_is_an_input_error_naming_it_and_both_shapes(devices):
    x = Tensor.input("x", (4, 4))
    c = compile_program(from_tensors([(x.exp() + 1).named("y")]), devices, PREDICTED)
    with pytest.raises(InputError, match=r"input 'x' has shape \[2, 2\], the program declares \[4, 4\]") as e:
        run(c, {"x": np.ones((2, 2), np.float32)})
    assert e.value.location == "inputs.x"
    with pytest.raises(InputError, match="has dtype complex64, the program declares f32"):
        execute(c.plan, c.devices, {"x": np.ones((4, 4), np.complex64)})
    with pytest.raises(InputError, match="no array given for input 'x'"):
        run(c, {})
    values = {"x": np.arange(16, dtype=np.float64).reshape(4, 4)}  # f64 data for an f32 input: rounded
    assert run(c, values).ok
    np.testing.assert_allclose(c.execution.outputs["y"], np.exp(values["x"]) + 1, rtol=1e-5)


def test_the_reference_checks_its_inputs_too():
    program = from_tensors([Tensor.input("n", (3,), I32).abs().named("y")])
    with pytest.raises(InputError, match="outside the range of i32"):
        evaluate(program.lower(), {"n": np.array([1, 2, 2**40])})
    with pytest.raises(InputError, match="has dtype float64, the program declares i32"):
        evaluate(program.lower(), {"n": np.zeros(3)})


@pytest.mark.parametrize("kind", [k for k in ("native", "opencl") if k in DEVICE_SETS])
def test_kernels_refuse_buffers_shorter_than_declared(kind):
    """Defence in depth below the entry checks: a launch, queued, timed or prepared for replay, never hands a
    kernel a short buffer."""
    (device,) = DEVICE_SETS[kind]
    x = Tensor.input("x", (64,))
    c = compile_program(from_tensors([(x * 2).named("y")]), [device], PREDICTED)
    (launch,) = c.plan.launches()
    compiled = device.compile(launch.kernel, launch.variant)
    short, out = np.ones(3, np.float32), np.empty(64, np.float32)
    if kind == "opencl":
        short, out = device.upload(short), device.upload(out)
    with pytest.raises(ValueError, match="buffer"):
        device.launch(compiled, [short], [out])
    with pytest.raises(ValueError, match="buffer"):
        device.launch_queued(compiled, [short], [out])
    with pytest.raises(ValueError, match="buffer"):
        device.prepare(compiled, [short], [out])()


# -- 2. empty tensors ---------------------------------------------------------------------------------------


def _empty_cases():
    a, b = Tensor.input("a", (2, 0)), Tensor.input("b", (0, 4))
    x, s = Tensor.input("x", (0, 3)), Tensor.input("s", (3, 2))
    return [
        ([a.reshape(0, 2).named("y")], {"y": np.zeros((0, 2))}),
        ([(a @ b).named("y")], {"y": np.zeros((2, 4))}),  # K = 0: zeros
        ([x.exp().named("y"), x.sum(0).named("z"), x.mean(0).named("m")],
         {"y": np.zeros((0, 3)), "z": np.zeros(3), "m": np.full(3, np.nan)}),
        ([s.pad(((0, 0), (-1, -1))).exp().named("y")], {"y": np.zeros((3, 0))}),
    ]


@ON_EVERY_DEVICE
@pytest.mark.parametrize("case", range(4))
def test_empty_tensors_compute_to_empty_results(devices, case):
    outputs, oracle = _empty_cases()[case]
    on(devices, outputs, oracle)


def test_an_empty_matmul_tuned_on_every_device():
    """Every tuning variant of the empty matmul's kernels runs and verifies."""
    devices = [d for ds in DEVICE_SETS.values() for d in ds]
    outputs, oracle = _empty_cases()[1]
    on(devices, outputs, oracle, Options(tune_budget=Budget(variants=3, seconds=2.0), tune_cache=False))


# -- 3. integer extremes ------------------------------------------------------------------------------------


@ON_EVERY_DEVICE
@pytest.mark.parametrize("dtype", [I32, I64])
def test_integer_extremes(devices, dtype):
    info = np.iinfo(dtype.numpy)
    values = np.array([info.min, info.min + 1, -1, 0, 5, info.max], dtype.numpy)
    x, y = given_values("x", values, dtype), given_values("y", values[::-1], dtype)
    on(devices, [x.minimum(5).named("lo"), x.abs().named("a"), x.maximum(y).named("hi"), x.minimum(y).named("m")],
       {"lo": np.minimum(values, 5), "a": np.abs(values), "hi": np.maximum(values, values[::-1]),
        "m": np.minimum(values, values[::-1])})


# -- 4. signed zeros ------------------------------------------------------------------------------------------


@ON_EVERY_DEVICE
def test_adding_zero_keeps_the_sign_rules_of_ieee(devices):
    values = np.array([-0.0, 0.0, 1.0, -np.inf], np.float32)
    x = given_values("x", values)
    with np.errstate(divide="ignore"):
        oracle = {"y": 1 / (values + np.float32(0.0)), "z": 1 / (values - np.float32(0.0))}
    on(devices, [(x + 0.0).recip().named("y"), (x - 0.0).recip().named("z")], oracle)
    assert list(oracle["y"][:2]) == [np.inf, np.inf] and oracle["z"][0] == -np.inf


def test_the_semantic_check_tries_special_values():
    """The old exact rule x + 0 = x is caught, though random inputs alone never expose it."""
    x = Tensor.input("x", (64,))
    egraph = from_program(from_tensors([(x + 0.0).recip().named("y")]))
    Runner([rewrite("old-add-zero", P("add", Var("x"), Var("y")), Var("x"), _is_zero)]).run(egraph)
    assert not check_semantics(egraph).ok
    values = np.random.default_rng(0).standard_normal(64).astype(np.float32)
    assert check_semantics(egraph, {"x": values}).ok  # what the check saw before special values


def _is_zero(egraph: EGraph, m) -> bool:
    s = egraph.eclass(m["y"]).splat
    return s is not None and s.value == 0


# -- 5. f16 and integer accumulation --------------------------------------------------------------------------


@ON_EVERY_DEVICE
def test_f16_reductions_accumulate_in_f32(devices):
    x = given_values("x", np.full(1000, 100.0), F16)
    row = np.array([1.0, 2.0, 3.0, 300.0], np.float16)  # d * d of the outlier overflows f16
    r = given_values("r", row, F16)
    r32 = row.astype(np.float32)
    d = r32 - r32.mean()
    oracle = {"m": np.float16(100.0), "s": np.float16(np.float32(100.0) * 1000),
              "v": np.float16((d * d).mean()), "ln": (d / np.sqrt((d * d).mean() + 1e-5)).astype(np.float16)}
    on(devices, [x.mean().named("m"), x.sum().named("s"), r.var().named("v"), r.layernorm().named("ln")], oracle)


@ON_EVERY_DEVICE
def test_integer_sums_and_means_are_exact(devices):
    values = np.array([2**40 + 1] * 5 + [-(2**52)], np.int64)
    x = given_values("x", values, I64)
    total = int(sum(int(v) for v in values))
    on(devices, [x.sum().named("s"), x.mean().named("m")], {"s": np.int64(total), "m": np.float32(total / 6)})


# -- 6. composites near zero ------------------------------------------------------------------------------------


@ON_EVERY_DEVICE
def test_tanh_and_gelu_keep_relative_accuracy(devices):
    small = np.array([1e-8, -1e-6, 3e-4, 0.049, -0.051, 0.5, -3.0, 20.0, np.inf, -np.inf, np.nan], np.float32)
    tail = np.array([-2.0, -4.0, -5.0, -5.5], np.float32)
    x, t = given_values("x", small), given_values("t", tail)
    program = from_tensors([x.tanh().named("y"), t.gelu().named("g")])
    wide = tail.astype(np.longdouble)  # 0.5 x (1 + tanh u) in extended precision: accurate down to -5.5
    gelu = (0.5 * wide * (1 + np.tanh(np.sqrt(np.longdouble(2) / np.longdouble(np.pi)) * (wide + 0.044715 * wide**3))))
    c = compile_program(program, devices, PREDICTED)
    reference = evaluate(program.lower(), program.input_values())
    for got in (reference, c.execution.outputs):
        finite = np.isfinite(small)
        with np.errstate(invalid="ignore"):
            assert np.all(np.abs(got["y"][finite] / np.tanh(small[finite].astype(np.float64)) - 1) < 1e-5)
        assert_matches(got["y"], np.tanh(small), F32)
        assert np.all(np.abs(got["g"] / gelu.astype(np.float64) - 1) < 1e-4), (got["g"], gelu)


# -- 7. infinities in contractions --------------------------------------------------------------------------------


@ON_EVERY_DEVICE
def test_contractions_never_regroup_products(devices):
    a_values = np.array([[np.inf, 1.0], [2.0, 3.0]], np.float32)
    b_values = np.array([[1.0, -2.0], [0.5, 0.5]], np.float32)
    a, b = given_values("a", a_values), given_values("b", b_values)
    row = given_values("r", [[np.inf]])
    signs = given_values("signs", [[1.0, -1.0, 1.0]])
    with np.errstate(invalid="ignore"):
        products = (a_values[:, :, None] * b_values[None, :, :]).sum(1)  # every product formed, then summed
        broadcast = (np.broadcast_to(np.float32(np.inf), (2, 3)) * np.array([1, -1, 1], np.float32)).sum(1)
    on(devices, [(a @ b).mean().named("m"), (a @ b).sum(1).named("s"), (row.expand(2, 3) * signs).sum(1).named("k")],
       {"m": products.mean(), "s": products.sum(1), "k": broadcast})
    assert np.isnan(broadcast).all() and np.isnan(products.mean())


# -- 8. each output is verified by its own dtype ------------------------------------------------------------


def test_an_f16_node_does_not_relax_an_unrelated_f32_output():
    x = Tensor.input("x", (8,))
    h = Tensor.input("h", (8,), F16)
    program = from_tensors([(x * 3).named("y"), (h + 1).named("z"), (x + h.cast(F32)).named("w")])
    want = evaluate(program.lower(), program.input_values())
    off = {name: v + np.asarray(1e-3 * np.maximum(np.abs(v), 1), v.dtype) for name, v in want.items()}
    checks = {check.name: check for check in verify(off, want, program).outputs}
    assert not checks["y"].ok and checks["y"].rtol == F32.tolerance[0]
    assert checks["z"].ok and checks["w"].ok  # f16 flows into w: f16's tolerance


# -- 9. smaller edges -------------------------------------------------------------------------------------------


def test_float_composites_refuse_bool_like_their_primitives():
    flag = Tensor.input("f", (3,), DType.BOOL)
    for op in ("exp", "exp2", "log", "sigmoid", "tanh", "gelu", "silu"):
        with pytest.raises(DTypeError, match=f"{op} does not accept bool"):
            getattr(flag, op)()


@pytest.mark.parametrize(("sa", "sb"), [((3,), (3,)), ((3,), (3, 4)), ((2, 5, 3), (3,)), ((3,), (2, 3, 4))])
def test_rank_1_matmul_is_numpys(sa, sb):
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal(sa).astype(np.float32), rng.standard_normal(sb).astype(np.float32)
    program = from_tensors([(Tensor.input("a", sa) @ Tensor.input("b", sb)).named("y")])
    got = evaluate(program.lower(), {"a": a, "b": b})["y"]
    assert got.shape == np.matmul(a, b).shape
    np.testing.assert_allclose(got, np.matmul(a, b), rtol=1e-5, atol=1e-6)
    with pytest.raises(ShapeError, match=r"\[3\] @ \[4\]"):
        Tensor.input("a", (3,)) @ Tensor.input("b", (4,))


def test_a_constant_that_overflows_its_float_dtype_is_an_error():
    x = Tensor.input("x", (2,))
    with pytest.raises(DTypeError, match="does not fit dtype f32"):
        x * 1e39
    with pytest.raises(DTypeError, match="does not fit dtype f16"):
        x.cast(F16) * 70000.0
    assert math.isinf(evaluate(from_tensors([(x * math.inf).named("y")]).lower(), {"x": np.ones(2, np.float32)})["y"][0])


@pytest.mark.skipif("opencl" not in DEVICE_SETS, reason="no OpenCL CPU device")
def test_opencl_compiles_guards_without_compiler_warnings(monkeypatch):
    """A shrinking pad proves some bounds checks false; they must not become ``&&`` with a constant."""
    monkeypatch.setenv("PYOPENCL_COMPILER_OUTPUT", "1")
    s = Tensor.input("s", (5, 6))
    grown = np.pad(s.init.materialize((5, 6), F32), ((0, 2), (1, 0)), constant_values=-7.0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        on(DEVICE_SETS["opencl"], [s.pad(((-1, 2), (1, -3)), -7.0).named("y")], {"y": grown[1:, :4]})
    assert not [w for w in caught if "Compiler" in type(w.message).__name__], [str(w.message) for w in caught]


# -- the property: random programs at the edges, on every device --------------------------------------------


FLOAT_SPECIALS = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0]
"""No huge or tiny magnitudes: a device keeps f16 in f32 registers, where 2 * 65504 is not yet inf."""
FLOAT_OPS = ["neg", "abs", "relu", "recip", "sqrt", "exp", "tanh", "add", "sub", "mul", "maximum", "minimum",
             "add0", "sum", "mean", "max"]
INT_OPS = ["neg", "abs", "relu", "add", "sub", "mul", "maximum", "minimum", "add0", "sum", "max"]


def _widened(f, *xs):
    """``f`` on float16 arrays computed in float32 and rounded back, as the reference does."""
    out_dtype = xs[0].dtype
    with np.errstate(all="ignore"):
        return np.asarray(f(*(x.astype(np.float32) if x.dtype == np.float16 else x for x in xs))).astype(out_dtype)


def _oracle(op: str, x: np.ndarray, y: np.ndarray, axis: int) -> np.ndarray:
    """Plain numpy, written apart from the engine: a tie of a max gives the second operand."""
    n = x.shape[axis] if x.ndim else 1
    table = {
        "neg": lambda a: -a, "abs": np.abs, "relu": lambda a: np.maximum(a, np.zeros((), a.dtype)),
        "recip": lambda a: 1 / a, "sqrt": np.sqrt, "exp": np.exp,
        "tanh": lambda a: np.tanh(a) + np.zeros((), a.dtype),  # tanh(-0.0) is +0.0 (documented)
        "add0": lambda a: a + np.zeros((), a.dtype), "add": np.add, "sub": np.subtract, "mul": np.multiply, "maximum": np.maximum, "minimum": np.minimum,
        "sum": lambda a: np.sum(a, axis, keepdims=True, dtype=a.dtype),
        "mean": lambda a: np.sum(a, axis, keepdims=True) * np.asarray(1 / n if n else math.nan, a.dtype),
        "max": lambda a: np.max(a, axis, keepdims=True) + np.zeros((), a.dtype),
    }
    f = table[op]
    return _widened(f, x, y) if op in ("add", "sub", "mul", "maximum", "minimum") else _widened(f, x)


def _apply(op: str, t: Tensor, y: Tensor, axis: int) -> Tensor:
    if op in ("add", "sub", "mul", "maximum", "minimum"):
        return {"add": t + y, "sub": t - y, "mul": t * y}.get(op) or getattr(t, op)(y)
    if op in ("sum", "mean"):
        return getattr(t, op)(axis, keepdim=True)
    if op == "add0":  # a constant operand, where the e-graph's identities apply
        return t + t.const(0, t.dtype)
    if op == "max":  # a tie of -0.0 and +0.0 may go either way in a split reduce: + 0.0 makes it +0.0
        return t.max(axis, keepdim=True) + t.const(0, t.dtype)
    return -t if op == "neg" else getattr(t, op)()


def _values(draw, shape: tuple[int, ...], dtype: DType) -> np.ndarray:
    if dtype.is_float:
        specials = st.sampled_from(FLOAT_SPECIALS)
        pool = st.one_of(specials, specials, st.floats(0.5, 3.0), st.floats(-3.0, -0.5))
    else:
        info = np.iinfo(dtype.numpy)
        specials = st.sampled_from([0, 1, -1, int(info.min), int(info.max), int(info.min) + 1])
        pool = st.one_of(specials, specials, st.integers(-100, 100))  # two in three values special
    flat = draw(st.lists(pool, min_size=math.prod(shape), max_size=math.prod(shape)))
    return np.array(flat, dtype.numpy).reshape(shape)


@st.composite
def edge_programs(draw):
    """(program, oracle outputs, dtype): inputs of edge shapes and values, 1 to 4 ops with their numpy value."""
    dtype = draw(st.sampled_from([F32, F16, F64, I32, I64]))
    shape = tuple(draw(st.lists(st.sampled_from([0, 1, 2, 3, 5, 7]), min_size=1, max_size=3)))
    y_shape = tuple(1 if draw(st.booleans()) else d for d in shape)
    xv, yv = _values(draw, shape, dtype), _values(draw, y_shape, dtype)
    x, y = given_values("x", xv, dtype), given_values("y", yv, dtype)
    t, v = x, xv
    menu = FLOAT_OPS if dtype.is_float else INT_OPS
    ops = []
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from([o for o in menu if not (o == "exp" and dtype == F16)]))
        axis = draw(st.integers(0, len(shape) - 1))
        if op == "max" and v.shape[axis] == 0:
            op = "sum"  # max of nothing has no value: a located error (tested by the loader)
        t, v = _apply(op, t, y, axis), _oracle(op, v, yv, axis)
        ops.append(op)
    return from_tensors([t.named("out")], description=" ".join(ops)), {"out": v}, t.dtype


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(edge_programs())
def test_edge_programs(case):
    """The reference and every device agree with numpy on empty, size-1 and odd shapes, ±0, ±inf, NaN, integer
    extremes and f16."""
    program, oracle, dtype = case
    assert_matches(evaluate(program.lower(), program.input_values())["out"], oracle["out"], dtype)
    for devices in DEVICE_SETS.values():
        c = compile_program(program, devices, PREDICTED)
        assert_matches(c.execution.outputs["out"], oracle["out"], dtype)
        assert c.verification.ok, c.verification


@pytest.mark.skipif("opencl" not in DEVICE_SETS, reason="needs an OpenCL device with a pool of its own (PoCL)")
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(edge_programs())
def test_edge_programs_planned_for_resident_inputs(case):
    """On OpenCL alone (every input uploaded), planned for inputs resident on the device and run through one
    session, whose later runs reuse the uploads (empty and f16 inputs included), the plan agrees with numpy; so do
    an untimed session's runs, whose later ones replay the launches prepared in its first."""
    program, oracle, dtype = case
    c = compile_program(program, DEVICE_SETS["opencl"], Options(tune=False, tune_cache=False, resident_inputs=True))
    assert c.resident and c.verification.ok, c.verification
    assert_matches(c.execution.outputs["out"], oracle["out"], dtype)
    with Session(c.plan, c.devices) as session:
        for _ in range(3):
            assert_matches(session.run(program.input_values()).outputs["out"], oracle["out"], dtype)


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(edge_programs())
def test_edge_programs_tuned(case):
    """Every variant tuning tries is verified, and the tuned plan on all devices together agrees with numpy."""
    program, oracle, dtype = case
    devices = [d for ds in DEVICE_SETS.values() for d in ds]
    c = compile_program(program, devices, Options(tune_budget=Budget(variants=3, seconds=1.0), tune_cache=False))
    assert_matches(c.execution.outputs["out"], oracle["out"], dtype)
    assert c.verification.ok, c.verification

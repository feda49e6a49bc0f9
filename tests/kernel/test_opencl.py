"""OpenCL C codegen and the OpenCL device: hand-built kernels run on every device found, checked against numpy."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sample_graphs
from engine import load
from engine.devices.evaluate import evaluate
from engine.devices.opencl import KernelBuildError, OpenCLDevice, device_names, discover
from engine.egraph import from_program, saturate
from engine.egraph.egraph import Scalar
from engine.kernel.index import Div, Idx, Mod, Var, add, flatten, floordiv, lit, mod, scale, unflatten, var
from engine.kernel.ir import Acc, Bound, Buffer, Const, Expr, Kernel, Load, Op, Reduce, Where
from engine.kernel.kernelize import kernelize
from engine.kernel.render.base import applies, literal
from engine.kernel.render.opencl import generate
from engine.kernel.schedule import DEFAULT_VARIANT, Variant
from engine.program.dtypes import DType
from engine.program.primitives import BINARY_OPS, COMPARE_OPS, UNARY_OPS, PrimNode
from engine.program.reference import eval_node

DEVICES = discover()
F16, F32, F64, I32, I64, BOOL = DType.F16, DType.F32, DType.F64, DType.I32, DType.I64, DType.BOOL


@pytest.fixture(scope="module", params=DEVICES or [None], ids=[d.name for d in DEVICES] or ["none"])
def device(request) -> OpenCLDevice:
    if request.param is None:
        pytest.skip("no OpenCL platform found (install PoCL: pocl-binary-distribution or pocl-opencl-icd)")
    return request.param


# -- helpers ------------------------------------------------------------------------


def gvars(shape: tuple[int, ...], prefix: str = "g") -> tuple[Var, ...]:
    return tuple(Var(f"{prefix}{i}", d) for i, d in enumerate(shape))


def run(
    device: OpenCLDevice, kernel: Kernel, *arrays: np.ndarray, variant: Variant = DEFAULT_VARIANT
) -> list[np.ndarray]:
    """Upload, launch, download, free."""
    assert device.supports(kernel)
    compiled = device.compile(kernel, variant)
    ins = [device.upload(np.asarray(a, b.dtype.numpy)) for a, b in zip(arrays, kernel.inputs)]
    outs = [device.alloc(b) for b in kernel.output_types]
    assert device.launch(compiled, ins, outs) >= 0
    result = [device.download(h, b) for h, b in zip(outs, kernel.output_types)]
    for h in ins + outs:
        device.free(h)
    return result


def check(got: np.ndarray, want: np.ndarray, dtype: DType, what: str = "") -> None:
    with np.errstate(all="ignore"):
        want = np.asarray(want).astype(dtype.numpy)
    assert got.shape == want.shape and got.dtype == want.dtype, what
    if dtype.is_float:
        rtol, atol = dtype.tolerance
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol, atol, err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


def const(value: bool | int | float, dtype: DType) -> Const:
    return Const(Scalar(value, dtype), dtype)


def view(shape: tuple[int, ...], ops: list[tuple[str, object]], out: list[Idx]) -> tuple[Idx, list[Bound]]:
    """The flat index into a contiguous tensor of ``shape`` that ``ops`` (applied in order) read at ``out``.

    Also returns the pad bounds the read must satisfy.  This is what a kernelizer does with movement ops.
    """
    shapes = [shape]
    for op, p in ops:
        node = PrimNode(op, (0,), p, (), F32)
        shapes.append(eval_node(node, [np.empty(shapes[-1])]).shape)
    idx, bounds = list(out), []
    for (op, p), before, after in reversed(list(zip(ops, shapes, shapes[1:]))):
        if op == "permute":
            inv = [0] * len(p)
            for i, a in enumerate(p):
                inv[a] = i
            idx = [idx[inv[a]] for a in range(len(p))]
        elif op == "reshape":
            idx = unflatten(flatten(idx, after), before)
        elif op == "expand":
            idx = [lit(0) if b == 1 else i for i, b in zip(idx, before)]
        elif op == "pad":
            idx = [add(i, lit(-lo)) for i, (lo, _) in zip(idx, p[0])]
            bounds += [Bound(i, 0, d) for i, d in zip(idx, before) if i.bounds[0] < 0 or i.bounds[1] >= d]
    return flatten(idx, shape), bounds


def reference_view(x: np.ndarray, ops: list[tuple[str, object]]) -> np.ndarray:
    for op, p in ops:
        x = eval_node(PrimNode(op, (0,), p, (), F32), [x])
    return x


def movement_kernel(shape: tuple[int, ...], ops: list[tuple[str, object]], fill: float = -7.0):
    out_shape = reference_view(np.empty(shape), ops).shape
    vs = gvars(out_shape)
    index, bounds = view(shape, ops, [var(v) for v in vs])
    load: Expr = Load(0, index, math.prod(shape), F32)
    if bounds:
        load = Where(tuple(bounds), load, const(fill, F32), F32)
    return Kernel((Buffer(shape, F32),), out_shape, vs, None, (load,))


# -- movement -----------------------------------------------------------------------


def test_elementwise_broadcast(device):
    g0, g1 = gvars((4, 8))
    a = Load(0, var(g0), 4, F32)  # a [4, 1] expanded to [4, 8]: stride 0 along g1
    b = Load(1, add(scale(var(g0), 8), var(g1)), 32, F32)
    k = Kernel((Buffer((4, 1), F32), Buffer((4, 8), F32)), (4, 8), (g0, g1), None, (Op("add", (a, b), F32),))
    x, y = np.random.default_rng(0).standard_normal((2, 4, 8)).astype(np.float32)
    (got,) = run(device, k, x[:, :1], y)
    check(got, x[:, :1] + y, F32)


MOVEMENTS = {
    "permute": ((4, 6, 3), [("permute", (2, 0, 1))]),
    "reshape_split": ((4, 6), [("permute", (1, 0)), ("reshape", (3, 8))]),
    "reshape_merge_permute": ((2, 3, 4), [("permute", (2, 1, 0)), ("reshape", (4, 6)), ("permute", (1, 0))]),
    "expand": ((3, 1), [("expand", (3, 5)), ("permute", (1, 0))]),
    "pad": ((3, 4), [("pad", (((1, 2), (2, 0)), -7.0))]),
    "pad_shrink": ((5, 6), [("pad", (((-1, 2), (1, -3)), -7.0))]),
    "pad_shrink_past_edge": ((3,), [("pad", (((-4, 2),), -7.0))]),
    "pad_then_reshape": ((2, 3), [("pad", (((1, 0), (0, 1)), -7.0)), ("reshape", (12,))]),
    "permute_reshape_pad": ((2, 4), [("permute", (1, 0)), ("reshape", (8,)), ("pad", (((3, 2),), -7.0))]),
    "pad_reshape_pad": ((2, 3), [("pad", (((0, 1), (2, 0)), -7.0)), ("reshape", (15,)), ("pad", (((4, 1),), -7.0))]),
}


@pytest.mark.parametrize("name", MOVEMENTS)
def test_movement(device, name):
    shape, ops = MOVEMENTS[name]
    k = movement_kernel(shape, ops)
    x = np.arange(math.prod(shape), dtype=np.float32).reshape(shape) + 1
    (got,) = run(device, k, x)
    np.testing.assert_array_equal(got, reference_view(x, ops))


def test_clamped_load_and_negative_div_mod(device):
    """Div/Mod of operands that go negative get floor semantics, seen through Where bounds on them."""
    g0, g1 = gvars((6, 8))
    q = add(var(g0), scale(var(g1), -1))  # -7 .. 5
    d, m = floordiv(q, 4), mod(q, 5)
    atoms = [a for x in (d, m) for a in x.atoms()]
    assert all(isinstance(a, Div | Mod) and a.num.bounds[0] < 0 for a in atoms), (d, m)
    one, zero = const(1, I32), const(0, I32)
    div_in = Where((Bound(d, -1, 1),), one, zero, I32)
    mod_in = Where((Bound(m, 1, 3),), one, zero, I32)
    # a load whose index (through a Div) leaves the buffer in masked lanes reads clamped
    load = Load(0, add(d, lit(1)), 2, I32)
    assert load.clamped
    padded = Where((Bound(d, 0, 2),), Load(0, d, 2, I32), const(-5, I32), I32)
    k = Kernel((Buffer((2,), I32),), (6, 8), (g0, g1), None, (div_in, mod_in, load, padded, Load(0, m, 2, I32)))
    assert "%" in generate(k) and "/" in generate(k)
    src = np.array([10, 20], np.int32)
    got = run(device, k, src)
    qs = np.arange(6)[:, None] - np.arange(8)[None, :]
    check(got[0], (qs // 4 >= -1) & (qs // 4 < 1), I32, "div")
    check(got[1], (qs % 5 >= 1) & (qs % 5 < 3), I32, "mod")
    check(got[2], src[np.clip(qs // 4 + 1, 0, 1)], I32, "clamped")
    check(got[3], np.where((qs // 4 >= 0) & (qs // 4 < 2), src[np.clip(qs // 4, 0, 1)], -5), I32, "pad")
    check(got[4], src[np.clip(qs % 5, 0, 1)], I32, "clamped mod")


# -- reduce -------------------------------------------------------------------------


def reduce_kernel(op: str, dtype: DType, shape: tuple[int, ...], axes: tuple[int, ...], post=None) -> Kernel:
    out_shape = tuple(d for i, d in enumerate(shape) if i not in axes)
    gs, rs = gvars(out_shape), gvars(tuple(shape[a] for a in axes), "r")
    gi, ri = iter(gs), iter(rs)
    index = [var(next(ri) if i in axes else next(gi)) for i in range(len(shape))]
    body = Load(0, flatten(index, shape), math.prod(shape), dtype)
    outputs = (Acc(dtype),) if post is None else post(Acc(dtype))
    return Kernel((Buffer(shape, dtype),), out_shape, gs, Reduce(op, rs, body), outputs)


def sample(dtype: DType, shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype == BOOL:
        return rng.random(shape) < 0.3
    if dtype.is_int:
        return rng.integers(-100, 100, shape).astype(dtype.numpy)
    return rng.standard_normal(shape).astype(dtype.numpy)


REDUCES = [(op, dt, (1,)) for op in ("sum", "max") for dt in (F32, F16, F64, I32, I64)]
REDUCES += [(op, dt, (0, 1, 2)) for op, dt in [("sum", F32), ("max", F32), ("sum", F16), ("sum", I64), ("max", I32)]]


@pytest.mark.parametrize(
    ("op", "dtype", "axes"), REDUCES, ids=[f"{o}-{d}-{'all' if len(a) > 1 else 'middle'}" for o, d, a in REDUCES]
)
def test_reduce(device, op, dtype, axes):
    shape = (3, 17, 5)
    x = sample(dtype, shape)
    (got,) = run(device, reduce_kernel(op, dtype, shape, axes), x)
    f = np.sum if op == "sum" else np.max
    want = f(x.astype(np.float32) if dtype == F16 else x, axis=axes)
    assert got.shape == want.shape == tuple(d for i, d in enumerate(shape) if i not in axes)
    check(got, want, dtype)


def test_reduce_max_nan_and_bool(device):
    x = sample(F32, (4, 6))
    x[1, 3] = np.nan
    x[2, 0] = -np.inf
    (got,) = run(device, reduce_kernel("max", F32, (4, 6), (1,)), x)
    check(got, np.max(x, axis=1), F32)
    assert np.isnan(got[1])
    b = sample(BOOL, (4, 6))
    b[0] = False
    (got,) = run(device, reduce_kernel("max", BOOL, (4, 6), (1,)), b)
    check(got, np.max(b, axis=1), BOOL)


def test_int_sum_wraps(device):
    x = np.full((2, 3), 2**30, np.int32)
    (got,) = run(device, reduce_kernel("sum", I32, (2, 3), (1,)), x)
    check(got, np.sum(x, axis=1), I32)


def test_matmul_hoists_and_post_ops_multiple_outputs(device):
    m, n, kk = 5, 7, 16
    g0, g1 = gvars((m, n))
    (r,) = gvars((kk,), "r")
    a = Load(0, add(scale(var(g0), kk), var(r)), m * kk, F32)
    b = Load(1, add(scale(var(r), n), var(g1)), kk * n, F32)
    scale_ = Op("exp2", (Load(2, var(g1), n, F32),), F32)  # loop-invariant: computed before the loop
    body = Op("mul", (Op("mul", (a, b), F32), scale_), F32)
    bias = Load(3, var(g0), m, F32)
    acc = Acc(F32)
    outs = (
        Op("relu", (acc,), F32),
        Op("add", (acc, bias), F32),
        Op("cmpgt", (acc, const(0.0, F32)), BOOL),
        acc,
    )
    ins = (Buffer((m, kk), F32), Buffer((kk, n), F32), Buffer((n,), F32), Buffer((m, 1), F32))
    k = Kernel(ins, (m, n), (g0, g1), Reduce("sum", (r,), body), outs)
    src = generate(k)
    assert src.index("exp2") < src.index("for (")
    rng = np.random.default_rng(1)
    x, y, s, c = (rng.standard_normal(b.shape).astype(np.float32) for b in ins)
    got = run(device, k, x, y, s, c)
    prod = (x @ y) * np.exp2(s)
    for out, want, dt in zip(got, [np.maximum(prod, 0), prod + c, prod > 0, prod], [F32, F32, BOOL, F32]):
        check(out, want, dt)


def test_rank0_output_and_local_size(device):
    k = reduce_kernel("sum", F32, (4, 5), (0, 1), post=lambda acc: (Op("sqrt", (acc,), F32),))
    x = np.abs(sample(F32, (4, 5)))
    for variant in (Variant(), Variant(local_size=16)):
        (got,) = run(device, k, x, variant=variant)
        assert got.shape == ()
        check(got, np.sqrt(x.sum()), F32)
    g = gvars((37,))
    k = Kernel((Buffer((37,), F32),), (37,), g, None, (Op("neg", (Load(0, var(g[0]), 37, F32),), F32),))
    x = sample(F32, (37,))
    (got,) = run(device, k, x, variant=Variant(local_size=16))  # 48 work items, 11 return at once
    check(got, -x, F32)


# -- elementwise ops on every dtype ------------------------------------------------


def operands(dtype: DType, n: int = 64) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(2)
    if dtype == BOOL:
        a = np.array([False, False, True, True] * (n // 4))
        return a, np.array([False, True] * (n // 2))
    if dtype.is_int:
        info = np.iinfo(dtype.numpy)
        edges_a = [0, 1, -1, 2, -2, 3, 7, -7, info.max, info.min + 1, info.max // 3, 100]
        edges_b = [0, -1, 1, 5, -3, 40, 63, -2, 2, 1, 0, info.max]
        a = np.concatenate([edges_a, rng.integers(-1000, 1000, n - len(edges_a))])
        b = np.concatenate([edges_b, rng.integers(-12, 12, n - len(edges_b))])
        return a.astype(dtype.numpy), b.astype(dtype.numpy)
    special_a = [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 2.0, -2.5, 0.5, 3.0, 1e-3, 0.0, np.nan]
    special_b = [0.0, 0.0, np.nan, 2.0, 1.0, 3.0, 0.0, np.inf, -np.inf, -1.0, 0.5, 2.0, -1.0, 1.0]
    a = np.concatenate([special_a, rng.standard_normal(n - len(special_a)) * 3])
    b = np.concatenate([special_b, rng.standard_normal(n - len(special_b)) * 2])
    return a.astype(dtype.numpy), b.astype(dtype.numpy)


@pytest.mark.parametrize("dtype", [F32, F64, F16, I32, I64, BOOL])
def test_every_op(device, dtype):
    """Every unary and binary op that applies to ``dtype``, as outputs of one kernel, against eval_node."""
    n = 64
    (g,) = gvars((n,))
    x, y = Load(0, var(g), n, dtype), Load(1, var(g), n, dtype)
    unary = [op for op in UNARY_OPS if applies(op, dtype)]
    binary = [op for op in BINARY_OPS if applies(op, dtype)]
    assert unary and binary
    result = {op: BOOL if op in COMPARE_OPS else dtype for op in unary + binary}
    outs = [Op(op, (x,), dtype) for op in unary] + [Op(op, (x, y), result[op]) for op in binary]
    k = Kernel((Buffer((n,), dtype), Buffer((n,), dtype)), (n,), (g,), None, tuple(outs))
    a, b = operands(dtype, n)
    got = run(device, k, a, b)
    for op, out in zip(unary + binary, got):
        args = [a] if op in unary else [a, b]
        with np.errstate(all="ignore"):
            want = eval_node(PrimNode(op, (0, 1)[: len(args)], None, (n,), result[op]), args)
        check(out, want, result[op], f"{op} on {dtype}")


def test_int_division_and_pow_edges(device):
    (g,) = gvars((8,))
    x, y = Load(0, var(g), 8, I32), Load(1, var(g), 8, I32)
    k = Kernel((Buffer((8,), I32),) * 2, (8,), (g,), None, (Op("div", (x, y), I32), Op("pow", (x, y), I32)))
    a = np.array([7, -7, 7, -7, 5, 1, -1, -1], np.int32)
    b = np.array([2, 2, -2, 0, -1, -3, -3, -4], np.int32)
    div, pw = run(device, k, a, b)
    check(div, [3, -3, -3, 0, -5, 0, 0, 0], I32, "div truncates, x / 0 = 0")
    check(pw, [49, 49, 0, 1, 0, 1, -1, 1], I32, "negative exponent")


@pytest.mark.parametrize("src", [F32, F64, F16, I32, I64, BOOL])
def test_casts(device, src):
    n = 32
    (g,) = gvars((n,))
    x, s = Load(0, var(g), n, src), Load(1, var(g), n, src)
    if src.is_float:
        a = np.array([0.0, -0.0, 0.5, -0.5, 1.7, -1.7, 2.5, -3.99, 100.25, 1e4, 0.1, 65504.0] + [7.75] * (n - 12))
        special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, 1e30, 1.0] * (n // 8))
    elif src.is_int:
        a = np.array([0, 1, -1, 2**31 - 1, -(2**31), 255, -256, 70000] * (n // 8))
        if src == I64:
            a[:4] = [2**31, -(2**31) - 1, 2**40 + 5, 2**53 + 1]
        special = a
    else:
        a = special = np.array([True, False] * (n // 2))
    with np.errstate(over="ignore"):
        a, special = a.astype(src.numpy), special.astype(src.numpy)
    targets = list(DType)
    safe = [t for t in targets if t.is_float or t == BOOL]
    outs = [Op("cast", (x,), t) for t in targets] + [Op("cast", (s,), t) for t in safe]
    k = Kernel((Buffer((n,), src),) * 2, (n,), (g,), None, tuple(outs))
    got = run(device, k, a, special)
    for out, t, v in zip(got, targets + safe, [a] * len(targets) + [special] * len(safe)):
        with np.errstate(all="ignore"):
            check(out, v.astype(t.numpy), t, f"cast {src} -> {t}")


def test_cast_to_f16_rounds_before_later_ops(device):
    """A cast to f16 rounds at once (as the reference does), even though f16 is computed in float."""
    n = 8
    (g,) = gvars((n,))
    outs = []
    for src in (F32, F64):
        half = Op("cast", (Load(0 if src == F32 else 1, var(g), n, src),), F16)
        outs += [Op("cast", (half,), I32), Op("cast", (half,), F32)]
    k = Kernel((Buffer((n,), F32), Buffer((n,), F64)), (n,), (g,), None, tuple(outs))
    a = np.array([2047.9, 0.1, -3.3333, 65519.0, 1e-8, 4097.0, -2049.5, 1.0009766])
    got = run(device, k, a.astype(np.float32), a)
    for i, src in enumerate((np.float32, np.float64)):
        half = a.astype(src).astype(np.float16)
        np.testing.assert_array_equal(got[2 * i], half.astype(np.int32))
        np.testing.assert_array_equal(got[2 * i + 1], half.astype(np.float32))


# -- kernels the kernelizer makes ------------------------------------------------


SMALL = [n for n in sample_graphs.names() if n.endswith(".small")]


@pytest.mark.parametrize("name", SMALL)
def test_sample_kernels_match_numpy_evaluator(device, name):
    """The kernels of each small sample graph's default plan, against the numpy kernel evaluator."""
    egraph = from_program(load(sample_graphs.path(name)))
    saturate(egraph)
    kz = kernelize(egraph)
    seen, stack = set(), list(egraph.output_classes().values())
    while stack:
        c = egraph.find(stack.pop())
        if c in seen or not kz.kernels(c):
            continue
        seen.add(c)
        cand = kz.kernels(c)[0]
        stack.extend(cand.inputs)
        k = cand.kernel
        arrays = [sample(b.dtype, b.shape, seed=i) for i, b in enumerate(k.inputs)]
        for got, want, b in zip(run(device, k, *arrays), evaluate(k, arrays), k.output_types):
            check(got, want, b.dtype, f"{name}: {k}")


# -- codegen details, errors, cache -------------------------------------------------


def test_literals():
    assert literal(float("inf"), F32) == "INFINITY" and literal(float("nan"), F64) == "(double)NAN"
    assert literal(0.1, F32) == "0.1f" and literal(0.1, F64) == "0.1" and literal(-2.0, F32) == "(-2.0f)"
    assert np.float32(literal(0.1, F16)[:-1]) == np.float16(0.1)  # the exact half value, as a float
    assert literal(-(2**31), I32) == "(-2147483647 - 1)" and literal(5, I64) == "5L"
    assert literal(1e300, F64) == "1e+300" and literal(True, BOOL) == "true"


def test_constants_round_trip(device):
    values = {
        F32: [3.4028234663852886e38, 1.401298464324817e-45, 0.1, -1 / 3],
        F64: [1.7976931348623157e308, 0.1],
        I64: [-(2**63), 2**63 - 1],
        I32: [-(2**31), 2**31 - 1],
        F16: [65504.0, 0.1, 6e-8],
    }
    for dtype, vs in values.items():
        k = Kernel((), (), (), None, tuple(const(v, dtype) for v in vs))
        got = run(device, k)
        for out, v in zip(got, vs):
            assert out == np.asarray(v, dtype.numpy), (dtype, v, out)


def test_long_index_when_int32_overflows(device):
    big = 2**31 + 10
    (g,) = gvars((4,))
    load = Load(0, add(scale(var(g), 2**30), lit(7)), big, F32)
    k = Kernel((Buffer((big,), F32),), (4,), (g,), None, (load,))
    src = generate(k)
    assert "const long gid" in src
    device.compile(k)  # builds; not run (it would need an 8 GiB buffer)


def test_unsupported_kernel(device):
    (g,) = gvars((4,))
    x = Load(0, var(g), 4, I32)
    k = Kernel((Buffer((4,), I32),), (4,), (g,), None, (Op("sin", (x,), I32),))
    assert not device.supports(k)
    with pytest.raises(KernelBuildError, match="sin does not apply to i32"):
        device.compile(k)


def test_build_error_has_log(device):
    with pytest.raises(KernelBuildError) as info:
        device.build("__kernel void broken(__global float* x) { x[0] = undefined_name; }")
    assert "undefined_name" in info.value.log and "undefined_name" in str(info.value)


def test_program_cache(device):
    (g,) = gvars((9,))
    k = Kernel((Buffer((9,), F32),), (9,), (g,), None, (Op("cos", (Load(0, var(g), 9, F32),), F32),))
    before = device.builds
    first, second = device.compile(k), device.compile(k)
    assert device.builds == before + 1 and first.program is second.program
    device.compile(k, Variant(local_size=8))  # another source (reqd_work_group_size): another build
    assert device.builds == before + 2
    assert device.estimate(k) > 0 and device.transfer_estimate(1 << 20) > device.transfer_estimate(0) > 0


def test_empty_tensors(device):
    (g,) = gvars((0,))
    k = Kernel((Buffer((0,), F32),), (0,), (g,), None, (Op("neg", (Load(0, var(g), 0, F32),), F32),))
    (got,) = run(device, k, np.zeros(0, np.float32))
    assert got.shape == (0,)


def test_device_names_unique():
    pocl = "OpenCL 3.0 PoCL 3.1+debian  Linux, None+Asserts"
    names = device_names(
        [
            ("pthread-cpu", pocl),
            ("pthread-cpu", "OpenCL 3.0 PoCL 3.0  Linux"),
            ("gpu", "x"),
            ("H200", "CUDA 12"),
            ("H200", "CUDA 12"),
        ]
    )
    assert len(set(names)) == len(names)
    assert names[0] == "opencl:pthread-cpu (OpenCL 3.0 PoCL 3.1+debian Linux)" and names[2] == "opencl:gpu"
    assert names[3:] == ["opencl:H200 (CUDA 12) #1", "opencl:H200 (CUDA 12) #2"]
    assert len({d.name for d in DEVICES}) == len(DEVICES)


# -- variants (upcast, tile, unroll, group reduce, vector loads) ---------------------------


VARIANTS = [
    Variant(local_size=16),
    Variant(upcast=2),
    Variant(upcast=4),
    Variant(upcast=8, local_size=32),
    Variant(upcast=4, tile=2),
    Variant(upcast=4, tile=4, unroll=4),
    Variant(upcast=3, tile=3, unroll=3),
    Variant(unroll=2),
    Variant(unroll=8),
    Variant(tile=2, unroll=4),
    Variant(local_size=16, upcast=4, tile=2, unroll=2),
    Variant(local_size=64, upcast=2, tile=3),
    Variant(local_size=8, tile=2),
    Variant(group=16),
    Variant(group=64),
]


def variant_kernels() -> dict[str, Kernel]:
    """Small kernels covering each transform's edge: odd sizes, pads with clamped loads, f16, ints, rank 0."""
    out: dict[str, Kernel] = {}
    g0, g1 = gvars((7, 13))
    x = Load(0, add(scale(var(g0), 13), var(g1)), 91, F32)
    row = Load(1, var(g0), 7, F32)
    ew = Op("exp2", (Op("mul", (Op("sub", (x, row), F32), const(0.5, F32)), F32),), F32)
    out["elementwise_broadcast"] = Kernel((Buffer((7, 13), F32), Buffer((7, 1), F32)), (7, 13), (g0, g1), None,
                                          (ew, Op("cmpgt", (x, row), BOOL)))
    out["reduce_middle"] = reduce_kernel("sum", F32, (3, 17, 5), (1,))
    out["reduce_max_rows"] = reduce_kernel("max", F32, (5, 37), (1,))
    out["reduce_all_rank0"] = reduce_kernel("sum", F32, (4, 25), (0, 1), post=lambda acc: (Op("sqrt", (acc,), F32),))
    out["f16_reduce"] = reduce_kernel("sum", F16, (6, 19), (1,), post=lambda acc: (acc, Op("cast", (acc,), F32)))
    out["i32_sum_wraps"] = reduce_kernel("sum", I32, (9, 11), (1,))
    out["i64_max"] = reduce_kernel("max", I64, (3, 5, 7), (0, 2))
    out["bool_any"] = reduce_kernel("max", BOOL, (6, 10), (1,))
    m, n, kk = 13, 10, 19
    g0, g1 = gvars((m, n))
    (r,) = gvars((kk,), "r")
    a = Load(0, add(scale(var(g0), kk), var(r)), m * kk, F32)
    b = Load(1, add(scale(var(r), n), var(g1)), kk * n, F32)
    acc = Acc(F32)
    outs = (acc, Op("relu", (acc,), F32), Op("cmpgt", (acc, const(0.0, F32)), BOOL))
    out["matmul_odd"] = Kernel((Buffer((m, kk), F32), Buffer((kk, n), F32)), (m, n), (g0, g1),
                               Reduce("sum", (r,), Op("mul", (a, b), F32)), outs)
    g0, g1 = gvars((5, 1))
    (r,) = gvars((37,), "r")
    e = Op("exp2", (Op("sub", (Load(0, add(scale(var(g0), 37), var(r)), 185, F32), Load(1, var(g0), 5, F32)),
                         F32),), F32)
    out["softmax_rows"] = Kernel((Buffer((5, 37), F32), Buffer((5, 1), F32)), (5, 1), (g0, g1),
                                 Reduce("sum", (r,), e), (Op("recip", (Acc(F32),), F32),))
    (g,) = gvars((23,))
    (r,) = gvars((5,), "r")
    pos = add(var(g), var(r), lit(-2))  # a 1-D convolution over a zero-padded input: clamped loads
    tap = Where((Bound(pos, 0, 23),), Load(0, pos, 23, F32), const(0.0, F32), F32)
    conv = Op("mul", (tap, Load(1, var(r), 5, F32)), F32)
    out["conv_pad_clamped"] = Kernel((Buffer((23,), F32), Buffer((5,), F32)), (23,), (g,), Reduce("sum", (r,), conv),
                                     (Acc(F32),))
    out["pad_movement"] = movement_kernel((5, 6), [("pad", (((-1, 2), (1, -3)), -7.0))])
    out["permute_reshape"] = movement_kernel((2, 3, 4), MOVEMENTS["reshape_merge_permute"][1])
    return out


def test_every_variant_matches_the_evaluator(device):
    """Every applicable variant of every kernel above, built in one program, against the numpy evaluator."""
    kernels = variant_kernels()
    taken = check_all_variants(device, kernels, [DEFAULT_VARIANT, *VARIANTS], random_inputs)
    assert min(len(vs) for vs in taken.values()) >= 4 and sum(len(vs) for vs in taken.values()) > 8 * len(kernels)
    assert {v.group > 1 for vs in taken.values() for v in vs} == {True, False}


def test_variant_source_shapes():
    """Upcast gives vector loads and stores and guards the lanes past an odd end; group uses local memory."""
    k = variant_kernels()["matmul_odd"]
    src = generate(k, Variant(upcast=4, tile=2, unroll=4))
    assert "vload4(0, in1" in src and "vstore2" in src and "if ((4*g1 + 3 < 10))" in src
    assert src.count("acc7 = ") > 4 and "_l0u4t2r4g0(" in src
    src = generate(k, Variant(group=64))
    assert "__local float zx_part[64]" in src and "reqd_work_group_size(64, 1, 1)" in src and "barrier" in src
    assert generate(k).count("__kernel void k_") == 1 and "vload" not in generate(k)
    src = generate(k, Variant(local_size=16, upcast=4, tile=2))  # a 4 x 4 block of work items per group
    assert "get_group_id(0)" in src and "lid / 4" in src and "if (g0 >= 7 || g1 >= 3) return;" in src


def test_blocked_work_groups():
    """A register tile with a power-of-two local size lays the group out as a 2-D block covering every point."""
    from engine.kernel.schedule import block, launch_size

    assert block(Variant(local_size=256, upcast=4, tile=4)) == (16, 16)
    assert block(Variant(local_size=128, tile=2)) == (8, 16) and block(Variant(local_size=64, tile=8)) == (8, 8)
    assert block(Variant(local_size=256, upcast=4)) is None and block(Variant(tile=4)) is None
    assert block(Variant(local_size=48, tile=2)) is None
    k = variant_kernels()["matmul_odd"]  # 13 x 10 outputs; tile 2 x upcast 4 -> 7 x 3 work items
    assert launch_size(k, Variant(local_size=16, upcast=4, tile=2)) == (2 * 16, 16)  # 2 blocks of 4 x 4


def test_invalid_variants(device):
    from engine.kernel.schedule import InvalidVariantError, variant_error

    ew = variant_kernels()["elementwise_broadcast"]
    assert variant_error(ew, Variant(unroll=2)) and variant_error(ew, Variant(group=64))
    assert variant_error(variant_kernels()["reduce_middle"], Variant(group=48))
    with pytest.raises(InvalidVariantError):
        generate(ew, Variant(group=64))
    with pytest.raises(KernelBuildError, match="local size"):
        device.compile(ew, Variant(local_size=1 << 20))


# -- local-memory tiles (smem) and blocked float sums --------------------------------------


SMEM_VARIANTS = [
    Variant(local_size=16, upcast=2, tile=2, smem=4),
    Variant(local_size=16, tile=2, smem=8),
    Variant(local_size=32, upcast=4, tile=2, unroll=4, smem=4),
    Variant(local_size=16, upcast=4, tile=2, unroll=3, smem=6),
    Variant(local_size=64, upcast=4, tile=4, unroll=2, smem=8),
    Variant(local_size=16, upcast=4, tile=4, unroll=4, smem=16),
]


def matmul_kernel(m: int, n: int, k: int, batch: int = 0, ta: bool = False, tb: bool = False,
                  dtype: DType = F32, split: int = 0) -> Kernel:
    """``a @ b`` (``batch`` > 0: batched) with ``a`` stored transposed (``ta``) and/or ``b`` (``tb``): views.

    ``split`` > 0 writes the reduce as two loops (``k = split * outer + inner``), as a kernelizer does for a
    reshaped contraction.
    """
    shape = ((batch,) if batch else ()) + (m, n)
    vs = gvars(shape)
    g, i, j = (vs[0] if batch else None), vs[-2], vs[-1]
    rs = gvars((k // split, split) if split else (k,), "r")
    r = add(scale(var(rs[0]), split), var(rs[1])) if split else var(rs[0])
    base_a = scale(var(g), m * k) if batch else lit(0)
    base_b = scale(var(g), k * n) if batch else lit(0)
    ia = add(base_a, scale(r, m), var(i)) if ta else add(base_a, scale(var(i), k), r)
    ib = add(base_b, scale(var(j), k), r) if tb else add(base_b, scale(r, n), var(j))
    nb = max(batch, 1)
    a = Load(0, ia, nb * m * k, dtype)
    b = Load(1, ib, nb * k * n, dtype)
    bufs = (Buffer((nb, k, m) if ta else (nb, m, k), dtype), Buffer((nb, n, k) if tb else (nb, k, n), dtype))
    acc = Acc(dtype)
    outs = (acc, Op("relu", (acc,), dtype)) if dtype.is_float else (acc,)
    return Kernel(bufs, shape, vs, Reduce("sum", rs, Op("mul", (a, b), dtype)), outs)


def smem_kernels() -> dict[str, Kernel]:
    """Matmul-shaped reduces: tile multiples and not, batched, transposed operands, split reduces, f16, i32,
    and a body with loads that stay in global memory (a per-step scale, a per-output bias)."""
    out = {
        "square_32": matmul_kernel(32, 32, 32),
        "odd_37x29x45": matmul_kernel(37, 29, 45),
        "batched_3x17x12x33": matmul_kernel(17, 12, 33, batch=3),
        "a_transposed": matmul_kernel(20, 24, 40, ta=True),
        "b_transposed": matmul_kernel(19, 16, 27, tb=True),
        "both_transposed_batched": matmul_kernel(9, 13, 21, batch=2, ta=True, tb=True),
        "split_reduce": matmul_kernel(16, 20, 48, split=12),
        "f16": matmul_kernel(18, 20, 36, dtype=F16),
        "i32": matmul_kernel(12, 20, 30, dtype=I32),
    }
    m, n, kk = 21, 18, 35
    g0, g1 = gvars((m, n))
    (r,) = gvars((kk,), "r")
    a = Load(0, add(scale(var(g0), kk), var(r)), m * kk, F32)
    b = Load(1, add(scale(var(r), n), var(g1)), kk * n, F32)
    step = Load(2, var(r), kk, F32)  # follows the reduce only: read from global memory in every lane
    bias = Load(3, add(scale(var(g0), n), var(g1)), m * n, F32)  # follows both axes: hoisted per lane
    body = Op("add", (Op("mul", (Op("mul", (a, b), F32), step), F32), bias), F32)
    ins = (Buffer((m, kk), F32), Buffer((kk, n), F32), Buffer((kk,), F32), Buffer((m, n), F32))
    out["global_loads_too"] = Kernel(ins, (m, n), (g0, g1), Reduce("sum", (r,), body), (Acc(F32),))
    return out


def random_inputs(kernel: Kernel) -> list[np.ndarray]:
    """Normal floats (sums inexact: the tolerance is tested too), ints in [-100, 100), bools."""
    return [sample(b.dtype, b.shape, seed=i) for i, b in enumerate(kernel.inputs)]


def check_all_variants(device, kernels: dict[str, Kernel], variants: list[Variant],
                       inputs: Callable[[Kernel], list[np.ndarray]] | None = None) -> dict[str, list[Variant]]:
    """Every variant of ``variants`` that ``device`` takes for each kernel, all built in one program, against the
    numpy evaluator (dtypes and values) on ``inputs(kernel)`` (default: exact multiples of 1/4, whose sums are
    exact in any order); the variants each kernel took, by name."""
    from engine.tuning.measure import mismatch, sample_inputs, tolerance

    taken = {name: [v for v in variants if device.variant_error(k, v) is None] for name, k in kernels.items()}
    device.compile_many([(kernels[name], v) for name, ok in taken.items() for v in ok])
    for name, k in kernels.items():
        arrays = (inputs or sample_inputs)(k)
        want = evaluate(k, arrays)
        for v in taken[name]:
            got = run(device, k, *arrays, variant=v)
            assert [g.dtype for g in got] == [w.dtype for w in want]
            assert mismatch(got, want, *tolerance(k)) is None, f"{name} {v}: {mismatch(got, want, *tolerance(k))}"
    return taken


def check_variants(device, kernel: Kernel, variants: list[Variant]) -> int:
    """``check_all_variants`` for one kernel on exact inputs; how many variants it took."""
    return len(check_all_variants(device, {kernel.name: kernel}, variants)[kernel.name])


def test_smem_variants_match_the_evaluator(device):
    """Every local-memory variant of every matmul-shaped kernel above equals the numpy evaluator."""
    from engine.kernel.schedule import staged_loads

    for name, k in smem_kernels().items():
        assert len(staged_loads(k)) == 2, name
        assert check_variants(device, k, SMEM_VARIANTS) >= 4, name
    with_random = smem_kernels()["odd_37x29x45"]
    arrays = [sample(F32, b.shape, seed=i) for i, b in enumerate(with_random.inputs)]
    got = run(device, with_random, *arrays, variant=SMEM_VARIANTS[4])
    a, b = (x.reshape(x.shape[-2:]) for x in arrays)
    check(got[0], a @ b, F32)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(m=st.integers(2, 40), n=st.integers(2, 40), k=st.integers(1, 50), batch=st.sampled_from([0, 2]),
       ta=st.booleans(), tb=st.booleans(), variant=st.sampled_from(SMEM_VARIANTS))
def test_smem_hypothesis(device, m, n, k, batch, ta, tb, variant):
    kernel = matmul_kernel(m, n, k, batch=batch, ta=ta, tb=tb)
    check_variants(device, kernel, [variant, replace(variant, smem=0)])


def test_smem_source_and_applicability():
    """Tiles in aligned local memory, coalesced vector copies, barriers; the guard waits for the reduce."""
    from engine.kernel.schedule import local_bytes, staging, variant_error

    k = matmul_kernel(37, 29, 64)
    v = Variant(local_size=64, upcast=4, tile=4, unroll=4, smem=16)
    src = generate(k, v)
    assert src.count("barrier(CLK_LOCAL_MEM_FENCE)") == 2 and "__local float zx_s0[" in src
    assert "*(__local const float4*)(zx_s" in src and "vload4(0, in0" in src  # a: along the reduce
    assert src.index("return;") > src.rindex("barrier(")  # items past the end run every barrier first
    a, b = staging(k, v)
    assert (a.along_axis, b.along_axis) == (False, True) and a.stride == 32 + 4 and b.stride == 32
    assert local_bytes(k, v) == (36 + 32) * 16 * 4
    assert v.tag == "l64u4t4r4g0s16" and Variant(local_size=64).tag == "l64u1t1r1g0"
    assert Variant.from_json(v.to_json()) == v
    old = {"local_size": 64, "upcast": 8, "tile": 8, "unroll": 2, "group": 0}  # a cache entry before smem
    assert Variant.from_json(old) == Variant(local_size=64, upcast=8, tile=8, unroll=2)
    ew = variant_kernels()["elementwise_broadcast"]
    assert "reduce" in variant_error(ew, Variant(local_size=16, tile=2, smem=4))
    assert "blocked" in variant_error(k, Variant(upcast=4, tile=4, smem=8))  # no local size: no block
    assert "evenly" in variant_error(k, Variant(local_size=64, upcast=1, tile=2, smem=2))
    row = variant_kernels()["reduce_middle"]
    assert variant_error(row, Variant(local_size=16, tile=2, smem=4))  # no two tiled axes
    both = Kernel(k.inputs, k.shape, k.vars, Reduce("sum", k.reduce.vars, Load(0, add(*map(var, k.vars)), 37 * 64,
                                                                                F32)), (Acc(F32),))
    assert "follows one tiled axis" in variant_error(both, v)


def tiny_terms_kernel(k: int) -> tuple[Kernel, list[np.ndarray], float]:
    """A 4 x 4 matmul whose every output sums 1 and ``k - 1`` terms of 2**-24 (exact: 1 + (k-1) 2**-24).

    Added one by one to 1.0 in float32 each term is half an ulp and rounds away (ties to even), so a
    sequential sum returns 1.0, off by (k-1) 2**-24 = 2.4e-4 relative for k = 4096: beyond f32's rtol 2e-4.
    """
    kernel = matmul_kernel(4, 4, k)
    a = np.full((1, 4, k), 2.0**-24, np.float32)
    a[..., 0] = 1
    return kernel, [a, np.ones((1, k, 4), np.float32)], 1 + (k - 1) * 2.0**-24


BLOCKED = [DEFAULT_VARIANT, Variant(unroll=4), Variant(upcast=2, tile=2, unroll=2),
           Variant(local_size=4, upcast=2, tile=2, unroll=4, smem=16)]


def test_blocked_sums_meet_the_f32_tolerance(device):
    """Each run of SUM_BLOCK terms is summed apart: the tiny terms survive, within f32's tolerance."""
    from engine.kernel.render.base import SUM_BLOCK

    kernel, arrays, exact = tiny_terms_kernel(4096)
    rtol, atol = F32.tolerance
    for v in BLOCKED:
        got = run(device, kernel, *arrays, variant=v)[0]
        assert np.all(np.abs(got - exact) <= atol + rtol * exact), (v, got.ravel()[0] - exact)
        assert np.all(np.abs(got - exact) <= SUM_BLOCK * 2.0**-24), v  # the first block's terms at most
    assert "zp0 = 0.0f" in generate(kernel) and "zp0" not in generate(matmul_kernel(4, 4, 4096, dtype=I32))
    ragged = matmul_kernel(5, 6, 1000)  # blocks that do not divide the loop, a remainder past the last tile
    assert "? r0b + 21 : 333)" in generate(ragged, Variant(unroll=3))
    assert check_variants(device, ragged, [*BLOCKED, Variant(unroll=3)]) == len(BLOCKED) + 1


def test_sequential_sums_miss_the_f32_tolerance(device, monkeypatch):
    """The same kernels with sequential accumulation (sum_block 0) return 1.0: the check above can fail."""
    from engine.kernel.render import opencl
    from engine.kernel.render.base import CStyleEmitter

    monkeypatch.setattr(CStyleEmitter, "sum_block", 0)
    opencl.generate.cache_clear()
    try:
        kernel, arrays, exact = tiny_terms_kernel(4096)
        rtol, atol = F32.tolerance
        for v in BLOCKED:
            assert "zp0" not in generate(kernel, v)
            got = run(device, kernel, *arrays, variant=v)[0]
            assert np.all(got == 1) and np.all(np.abs(got - exact) > atol + rtol * exact), v
    finally:
        opencl.generate.cache_clear()

"""The numpy kernel evaluator, the numpy device and the BLAS library device against plain numpy."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import engine.devices.chunk_eval as chunk_eval
from engine.devices.chunk_eval import read
from engine.devices.chunk_plan import CHUNK_ELEMENTS, Frame, plan
from engine.devices.evaluate import evaluate, run
from engine.devices.matmul import factor_order
from engine.devices.numpy_device import LibraryDevice, NumpyDevice
from engine.egraph.egraph import Scalar
from engine.kernel.index import Idx, Var, add, flatten, floordiv, lit, mod, scale, unflatten, var
from engine.kernel.ir import Acc, Bound, Buffer, Const, Expr, Kernel, Load, Op, Reduce, Where
from engine.program.dtypes import DType
from engine.program.primitives import PrimNode
from engine.program.reference import eval_node, widen

F32 = DType.F32
RNG = np.random.default_rng(0)


# ---- a tiny view tracer: the index a permute/reshape/expand/pad of an input becomes, and its numpy twin


@dataclass(frozen=True)
class View:
    """A movement-op view of input buffer ``input``: ``at(idx)`` is its element expression, ``ops`` its numpy twin."""

    input: int
    buffer: Buffer
    shape: tuple[int, ...]
    at: Callable[[list[Idx]], Expr]
    ops: tuple[tuple[str, Any], ...] = ()

    def then(self, op: str, param: Any, shape: tuple[int, ...], at: Callable[[list[Idx]], Expr]) -> View:
        return View(self.input, self.buffer, shape, at, (*self.ops, (op, param)))

    def permute(self, p: Sequence[int]) -> View:
        inv = [list(p).index(i) for i in range(len(p))]
        return self.then("permute", tuple(p), tuple(self.shape[i] for i in p), lambda ix: self.at([ix[j] for j in inv]))

    def reshape(self, shape: Sequence[int]) -> View:
        new = tuple(shape)
        return self.then("reshape", new, new, lambda ix: self.at(unflatten(flatten(ix, new), self.shape)))

    def expand(self, shape: Sequence[int]) -> View:
        old = self.shape
        return self.then(
            "expand", tuple(shape), tuple(shape), lambda ix: self.at([lit(0) if d == 1 else i for i, d in zip(ix, old)])
        )

    def pad(self, pads: Sequence[tuple[int, int]], value: float | int | bool = 0) -> View:
        dt = self.buffer.dtype
        shape = tuple(d + lo + hi for d, (lo, hi) in zip(self.shape, pads))

        def at(ix: list[Idx]) -> Expr:
            inner = [add(i, lit(-lo)) for i, (lo, _) in zip(ix, pads)]
            bounds = tuple(Bound(i, 0, d) for i, d in zip(inner, self.shape) if i.bounds[0] < 0 or i.bounds[1] >= d)
            e = self.at(inner)
            return Where(bounds, e, Const(Scalar(value, dt), dt), dt) if bounds else e

        return self.then("pad", (tuple(pads), value), shape, at)

    def numpy(self, x: np.ndarray) -> np.ndarray:
        for op, param in self.ops:
            x = eval_node(PrimNode(op, (), param, (), self.buffer.dtype), [x])
        return x


def leaf(input: int, shape: Sequence[int], dtype: DType = F32) -> View:
    buf = Buffer(tuple(shape), dtype)
    return View(input, buf, tuple(shape), lambda ix: Load(input, flatten(ix, buf.shape), buf.numel, dtype))


def gvars(shape: Sequence[int], prefix: str = "g") -> tuple[Var, ...]:
    return tuple(Var(f"{prefix}{i}", d) for i, d in enumerate(shape))


def elementwise(inputs: Sequence[View], shape: Sequence[int], outs: Callable[[list[Expr]], Sequence[Expr]]) -> Kernel:
    """A kernel storing ``outs(elements of inputs)`` over ``shape`` (every view has that shape)."""
    vs = gvars(shape)
    ix = [var(v) for v in vs]
    return Kernel(tuple(v.buffer for v in inputs), tuple(shape), vs, None, tuple(outs([v.at(ix) for v in inputs])))


def reduction(
    view: View, axes: Sequence[int], op: str, post: Callable[[Expr, list[Idx]], Expr] | None = None
) -> tuple[Kernel, list[Var]]:
    """``op`` of ``view`` over ``axes``; ``post(acc, global index)`` is the output expression."""
    gs = [Var(f"g{i}", d) for i, d in enumerate(view.shape) if i not in axes]
    rs = [Var(f"r{i}", d) for i, d in enumerate(view.shape) if i in axes]
    git, rit = iter(gs), iter(rs)
    ix = [var(next(rit)) if i in axes else var(next(git)) for i in range(len(view.shape))]
    body = view.at(ix)
    acc = Acc(body.dtype)
    out = post(acc, [var(g) for g in gs]) if post else acc
    red = Reduce(op, tuple(rs), body)
    return Kernel((view.buffer,), tuple(g.size for g in gs), tuple(gs), red, (out,)), gs


def data(shape: Sequence[int], dtype: DType = F32) -> np.ndarray:
    if dtype == DType.BOOL:
        return RNG.random(shape) < 0.5
    if dtype.is_int:
        return RNG.integers(-6, 7, shape).astype(dtype.numpy)
    return RNG.standard_normal(shape).astype(dtype.numpy)


def ref_op(op: str, dtype: DType, *args: np.ndarray) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.asarray(eval_node(PrimNode(op, (), None, (), dtype), list(args))).astype(dtype.numpy)


def ref_reduce(op: str, x: np.ndarray, axes: Sequence[int], dtype: DType) -> np.ndarray:
    with np.errstate(all="ignore"):
        r = np.sum(widen(x), axis=tuple(axes)) if op == "sum" else np.max(x, axis=tuple(axes))
        return np.asarray(r).astype(dtype.numpy)


@pytest.fixture
def gathers(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the evaluator's gathers (copies); affine unclamped loads must not make any."""
    calls: list[int] = []
    original = chunk_eval._gather

    def counting(flat: np.ndarray, index: Any) -> np.ndarray:
        calls.append(np.size(index))
        return original(flat, index)

    monkeypatch.setattr(chunk_eval, "_gather", counting)
    return calls


def close(got: np.ndarray, want: np.ndarray, dtype: DType) -> None:
    rtol, atol = dtype.tolerance
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol)


# ---- elementwise and movement


def test_broadcast_reads_stride_zero_views(gathers: list[int]) -> None:
    x, y = data((4, 1, 6)), data((5, 1))
    vx = leaf(0, (4, 1, 6)).expand((4, 5, 6))
    vy = leaf(1, (5, 1)).reshape((1, 5, 1)).expand((4, 5, 6))
    k = elementwise([vx, vy], (4, 5, 6), lambda e: [Op("add", (e[0], e[1]), F32)])
    (out,) = evaluate(k, [x, y])
    np.testing.assert_array_equal(out, ref_op("add", F32, vx.numpy(x), vy.numpy(y)))
    assert gathers == []
    frame = plan(k).whole()
    for load in k.loads():
        v = read(load, [x.reshape(-1), y.reshape(-1)][load.input], frame)
        assert np.shares_memory(v, [x, y][load.input])
        assert 0 in v.strides or 1 in v.shape


def test_permute_is_a_view(gathers: list[int]) -> None:
    x = data((2, 3, 4))
    v = leaf(0, (2, 3, 4)).permute((2, 0, 1))
    k = elementwise([v], v.shape, lambda e: [Op("exp2", (e[0],), F32)])
    (out,) = evaluate(k, [x])
    close(out, ref_op("exp2", F32, v.numpy(x)), F32)
    assert gathers == []
    (load,) = k.loads()
    view = read(load, x.reshape(-1), plan(k).whole())
    assert np.shares_memory(view, x) and view.shape == (4, 2, 3)
    np.testing.assert_array_equal(view, np.transpose(x, (2, 0, 1)))


def test_reshape_split_and_merge(gathers: list[int]) -> None:
    x = data((6, 4))
    affine = leaf(0, (6, 4)).reshape((2, 3, 4)).permute((0, 2, 1))  # split: still affine
    merged = leaf(0, (6, 4)).reshape((2, 3, 4)).permute((0, 2, 1)).reshape((4, 6))  # needs div/mod
    for v, copies in ((affine, False), (merged, True)):
        gathers.clear()
        k = elementwise([v], v.shape, lambda e: [Op("neg", (e[0],), F32)])
        (out,) = evaluate(k, [x])
        np.testing.assert_array_equal(out, ref_op("neg", F32, v.numpy(x)))
        assert bool(gathers) == copies
    (load,) = elementwise([merged], merged.shape, lambda e: e).loads()
    assert not load.index.is_affine


@pytest.mark.parametrize(
    "pads",
    [((1, 2), (0, 3)), ((-1, 2), (2, -1)), ((-4, 2), (0, 0)), ((2, -3), (-5, 1)), ((0, 0), (-1, -1))],
)
def test_pad_grow_and_shrink(pads: tuple[tuple[int, int], ...]) -> None:
    x = data((3, 5))
    v = leaf(0, (3, 5)).pad(pads, 7.5)
    k = elementwise([v], v.shape, lambda e: [Op("mul", (e[0], e[0]), F32)])
    (load,) = k.loads()
    assert load.clamped == any(lo > 0 or hi > 0 for lo, hi in pads)
    (out,) = evaluate(k, [x])
    np.testing.assert_array_equal(out, ref_op("mul", F32, v.numpy(x), v.numpy(x)))


def test_pad_of_reshape_clamps_and_masks() -> None:
    x = data((4, 6), DType.I32)
    v = leaf(0, (4, 6), DType.I32).permute((1, 0)).reshape((3, 8)).pad(((1, 1), (-2, 3)), -1)
    k = elementwise([v], v.shape, lambda e: [e[0]])
    assert not any(load.index.is_affine for load in k.loads())
    (out,) = evaluate(k, [x])
    np.testing.assert_array_equal(out, v.numpy(x))


# ---- dtypes

OPS = {
    DType.F16: ["add", "sub", "mul", "div", "max", "pow", "cmplt", "eq", "neg", "exp2", "log2", "sqrt", "recip", "sin"],
    DType.F32: ["add", "sub", "mul", "div", "max", "pow", "cmpgt", "noteq", "neg", "relu", "exp2", "cos", "recip"],
    DType.F64: ["add", "div", "max", "cmplt", "log2", "sqrt", "sin"],
    DType.I32: ["add", "sub", "mul", "div", "max", "pow", "cmplt", "eq", "neg", "relu", "recip"],
    DType.I64: ["add", "mul", "div", "pow", "cmpgt", "neg"],
    DType.BOOL: ["and", "or", "eq", "noteq", "not", "cmplt"],
}
UNARY = {"neg", "relu", "exp2", "log2", "sqrt", "recip", "sin", "cos", "not"}


@pytest.mark.parametrize("dtype", list(OPS), ids=str)
def test_every_dtype_matches_eval_node(dtype: DType) -> None:
    shape = (3, 1, 5)
    x, y = data((3, 4, 5), dtype), data(shape, dtype)
    vx = leaf(0, (3, 4, 5), dtype).permute((0, 2, 1))
    vy = leaf(1, shape, dtype).expand((3, 4, 5)).permute((0, 2, 1))
    for op in OPS[dtype]:
        out_dt = DType.BOOL if op in ("cmplt", "cmpgt", "eq", "noteq") else dtype
        k = elementwise(
            [vx, vy], vx.shape, lambda e, op=op, dt=out_dt: [Op(op, (e[0],) if op in UNARY else (e[0], e[1]), dt)]
        )
        args = [vx.numpy(x)] if op in UNARY else [vx.numpy(x), vy.numpy(y)]
        want = ref_op(op, out_dt, *args)
        for limit, threads in ((CHUNK_ELEMENTS, 1), (7, 2)):  # one chunk; chunks of 7 on two threads
            (out,) = evaluate(k, [x, y], limit, threads)
            assert out.dtype == want.dtype, op
            if out_dt.is_float and op in ("exp2", "log2", "sin", "cos", "pow"):
                close(out, want, out_dt)  # SIMD loops may differ by an ulp between strided and contiguous arrays
            else:
                np.testing.assert_array_equal(out, want, err_msg=op)


@pytest.mark.parametrize("src", list(OPS), ids=str)
def test_casts_and_consts(src: DType) -> None:
    x = data((4, 3), src)
    v = leaf(0, (4, 3), src)
    for dst in OPS:
        c = Const(Scalar(True if dst == DType.BOOL else 3, dst), dst)
        k = elementwise([v], (4, 3), lambda e, dst=dst, c=c: [Op("max", (Op("cast", (e[0],), dst), c), dst)])
        (out,) = evaluate(k, [x])
        np.testing.assert_array_equal(out, ref_op("max", dst, ref_op("cast", dst, x), c.value.array()))


# ---- reduces


@pytest.mark.parametrize("op", ["sum", "max"])
@pytest.mark.parametrize("dtype", [DType.F16, DType.F32, DType.F64, DType.I32, DType.I64, DType.BOOL], ids=str)
def test_reduce_middle_axis(op: str, dtype: DType) -> None:
    x = data((3, 7, 5), dtype)
    k, _ = reduction(leaf(0, (3, 7, 5), dtype), [1], op)
    for limit, threads in ((CHUNK_ELEMENTS, 1), (4, 2), (4, 3)):
        (out,) = evaluate(k, [x], limit, threads, view_elements=limit)
        close(out, ref_reduce(op, x, [1], dtype), dtype)


@pytest.mark.parametrize("op", ["sum", "max"])
def test_reduce_all_axes_rank0(op: str) -> None:
    x = data((4, 6, 5))
    v = leaf(0, (4, 6, 5)).permute((2, 0, 1))
    k, _ = reduction(v, [0, 1, 2], op)
    assert k.shape == () and k.vars == ()
    (out,) = evaluate(k, [x])
    assert out.shape == ()
    close(out, ref_reduce(op, v.numpy(x), [0, 1, 2], F32), F32)


def test_rank0_elementwise() -> None:
    x = data(())
    k = elementwise([leaf(0, ())], (), lambda e: [Op("sqrt", (Op("mul", (e[0], e[0]), F32),), F32)])
    (out,) = evaluate(k, [x])
    np.testing.assert_array_equal(out, ref_op("sqrt", F32, ref_op("mul", F32, x, x)))


def test_post_reduce_ops_and_reduce_of_expanded() -> None:
    """Mean-and-subtract; the reduce reads a broadcast operand it does not depend on along one axis."""
    x = data((4, 6))
    v = leaf(0, (4, 6)).reshape((4, 1, 6)).expand((4, 3, 6))
    inv = Const(Scalar(1 / 6, F32), F32)

    def post(acc: Expr, ix: list[Idx]) -> Expr:
        return Op("sub", (Load(0, add(scale(ix[0], 6), lit(2)), 24, F32), Op("mul", (acc, inv), F32)), F32)

    k, _ = reduction(v, [2], "sum", post)
    (out,) = evaluate(k, [x])
    want = ref_op(
        "sub",
        F32,
        np.broadcast_to(x[:, None, 2], (4, 3)),
        ref_op("mul", F32, ref_reduce("sum", v.numpy(x), [2], F32), inv.value.array()),
    )
    close(out, want, F32)


def test_reduce_body_independent_of_a_reduce_var() -> None:
    x = data((4,))
    g, r = Var("g0", 4), Var("r0", 5)
    k = Kernel((Buffer((4,), F32),), (4,), (g,), Reduce("sum", (r,), Load(0, var(g), 4, F32)), (Acc(F32),))
    (out,) = evaluate(k, [x])
    close(out, x * 5, F32)


def test_multiple_outputs() -> None:
    a, b = data((3, 4)), data((4, 3))
    va, vb = leaf(0, (3, 4)), leaf(1, (4, 3)).permute((1, 0))
    k = elementwise(
        [va, vb],
        (3, 4),
        lambda e: [Op("add", (e[0], e[1]), F32), Op("cmplt", (e[0], e[1]), DType.BOOL), Op("cast", (e[1],), DType.F16)],
    )
    outs = evaluate(k, [a, b])
    assert [o.dtype for o in outs] == [np.float32, np.bool_, np.float16]
    np.testing.assert_array_equal(outs[0], ref_op("add", F32, a, b.T))
    np.testing.assert_array_equal(outs[1], a < b.T)
    np.testing.assert_array_equal(outs[2], b.T.astype(np.float16))


# ---- chunking and empty shapes


def _pad_kernel() -> tuple[Kernel, list[np.ndarray]]:
    v = leaf(0, (5, 6, 7)).permute((2, 0, 1)).reshape((7, 30)).pad(((1, 2), (-3, 4)), 1.0)
    w = leaf(1, (7, 1)).expand((7, 30)).pad(((1, 2), (0, 1)))
    k = elementwise([v, w], v.shape, lambda e: [Op("add", (e[0], e[1]), F32), Op("exp2", (e[0],), F32)])
    return k, [data((5, 6, 7)), data((7, 1))]


@pytest.mark.parametrize("limit", [1, 7, 31, 64, 1000])
def test_chunking_does_not_change_results(limit: int) -> None:
    k, xs = _pad_kernel()
    for got, want in zip(evaluate(k, xs, limit), evaluate(k, xs)):
        np.testing.assert_array_equal(got, want)
    x = data((6, 5, 4))
    for op in ("sum", "max"):
        r, _ = reduction(leaf(0, (6, 5, 4)).permute((1, 0, 2)), [1], op)
        p = plan(r, max(limit, 6))
        assert all(len(b) == 1 for b in p.reduce_blocks)  # the reduce fits: only global axes are split
        np.testing.assert_array_equal(evaluate(r, [x], max(limit, 6))[0], evaluate(r, [x])[0])


@pytest.mark.parametrize("dtype", [DType.F32, DType.I32])
def test_chunking_the_reduce_itself(dtype: DType) -> None:
    x = data((3, 40, 5), dtype)
    for op in ("sum", "max"):
        k, _ = reduction(leaf(0, (3, 40, 5), dtype), [1, 2], op)
        p = plan(k, 16, 16)
        assert sum(len(b) for b in p.reduce_blocks) > 2
        got, want = evaluate(k, [x], 16, view_elements=16)[0], evaluate(k, [x])[0]
        if op == "sum" and dtype.is_float:
            close(got, want, dtype)  # partial sums may round differently
        else:
            np.testing.assert_array_equal(got, want)


def test_zero_size_shapes() -> None:
    v = leaf(0, (3, 0))
    k = elementwise([v], (3, 0), lambda e: [Op("neg", (e[0],), F32)])
    (out,) = evaluate(k, [np.zeros((3, 0), np.float32)])
    assert out.shape == (3, 0)
    for op, want in (("sum", 0.0), ("max", -np.inf)):
        r, _ = reduction(leaf(0, (3, 0)), [1], op)
        (out,) = evaluate(r, [np.zeros((3, 0), np.float32)])
        np.testing.assert_array_equal(out, np.full(3, want, np.float32))
    r, _ = reduction(leaf(0, (0, 4)), [1], "sum")
    assert evaluate(r, [np.zeros((0, 4), np.float32)])[0].shape == (0,)


# ---- random shapes


@st.composite
def views(draw: st.DrawFn) -> tuple[View, np.ndarray]:
    rank = draw(st.integers(0, 4))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank)))
    v = leaf(0, shape)
    x = data(shape)
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(st.sampled_from(["permute", "reshape", "expand", "pad"]))
        if kind == "permute":
            v = v.permute(draw(st.permutations(range(len(v.shape)))))
        elif kind == "reshape":
            n = int(np.prod(v.shape, dtype=np.int64))
            f = draw(st.sampled_from([f for f in range(1, n + 1) if n % f == 0]))
            v = v.reshape((f, n // f))
        elif kind == "expand" and 1 in v.shape:
            v = v.expand(tuple(draw(st.integers(1, 3)) if d == 1 else d for d in v.shape))
        elif kind == "pad" and v.shape:
            pads = tuple((draw(st.integers(-d + 1, 2)), draw(st.integers(0, 2))) for d in v.shape)
            v = v.pad(pads, 0.5)
    return v, x


@settings(max_examples=60, deadline=None)
@given(views(), st.integers(1, 50), st.data())
def test_random_views_and_reduces(vx: tuple[View, np.ndarray], limit: int, draw: st.DataObject) -> None:
    v, x = vx
    k = elementwise([v], v.shape, lambda e: [Op("add", (e[0], e[0]), F32)])
    want = ref_op("add", F32, v.numpy(x), v.numpy(x))
    np.testing.assert_array_equal(evaluate(k, [x])[0], want)
    np.testing.assert_array_equal(evaluate(k, [x], limit)[0], want)
    if v.shape:
        axes = sorted(draw.draw(st.sets(st.integers(0, len(v.shape) - 1), min_size=1)))
        op = draw.draw(st.sampled_from(["sum", "max"]))
        r, _ = reduction(v, axes, op)
        close(evaluate(r, [x])[0], ref_reduce(op, v.numpy(x), axes, F32), F32)


# ---- devices


def matmul(layout: str, m: int = 5, n: int = 6, kk: int = 7, batch: int | None = None, dtype: DType = F32) -> Kernel:
    """``a @ b`` with a stored ``[m, k]`` (N) or ``[k, m]`` (T) and b ``[k, n]`` (N) or ``[n, k]`` (T)."""
    pre = (batch,) if batch else ()
    a = leaf(0, pre + ((m, kk) if layout[0] == "N" else (kk, m)), dtype)
    b = leaf(1, pre + ((kk, n) if layout[1] == "N" else (n, kk)), dtype)
    nb = len(pre)
    if layout[0] == "T":
        a = a.permute((*range(nb), nb + 1, nb))
    if layout[1] == "T":
        b = b.permute((*range(nb), nb + 1, nb))
    gs = gvars((*pre, m, n))
    r = Var("r0", kk)
    bi = [var(g) for g in gs[:nb]]
    ea = a.at([*bi, var(gs[nb]), var(r)])
    eb = b.at([*bi, var(r), var(gs[nb + 1])])
    body = Op("mul", (ea, eb), dtype)
    return Kernel((a.buffer, b.buffer), tuple(g.size for g in gs), gs, Reduce("sum", (r,), body), (Acc(dtype),))


def operands(k: Kernel, layout: str) -> tuple[list[np.ndarray], np.ndarray]:
    a, b = (data(buf.shape, buf.dtype) for buf in k.inputs)
    at = np.swapaxes(a, -1, -2) if layout[0] == "T" else a
    bt = np.swapaxes(b, -1, -2) if layout[1] == "T" else b
    return [a, b], widen(at) @ widen(bt)


def launch(device: NumpyDevice, k: Kernel, xs: list[np.ndarray]) -> list[np.ndarray]:
    compiled = device.compile(k)
    outs = [device.alloc(t) for t in k.output_types]
    seconds = device.launch(compiled, [device.upload(x) for x in xs], outs)
    assert isinstance(seconds, float) and seconds >= 0
    return [device.download(o, t) for o, t in zip(outs, k.output_types)]


@pytest.mark.parametrize("layout", ["NN", "NT", "TN", "TT"])
@pytest.mark.parametrize("batch", [None, 3])
def test_library_matmul_layouts(layout: str, batch: int | None) -> None:
    k = matmul(layout, batch=batch)
    blas = LibraryDevice()
    assert blas.supports(k)
    xs, want = operands(k, layout)
    (got,) = launch(blas, k, xs)
    close(got, want.astype(np.float32), F32)
    close(launch(NumpyDevice(), k, xs)[0], got, F32)


@pytest.mark.parametrize("dtype", [DType.F16, DType.F64])
def test_library_dtypes(dtype: DType) -> None:
    k = matmul("NT", 8, 4, 33, dtype=dtype)
    xs, want = operands(k, "NT")
    (got,) = launch(LibraryDevice(), k, xs)
    assert got.dtype == dtype.numpy
    close(got, want.astype(dtype.numpy), dtype)


def test_library_bias_relu_and_chunks() -> None:
    base = matmul("NN", 9, 10, 11)
    bias = Load(2, var(base.vars[1]), 10, F32)
    out = Op("relu", (Op("add", (Acc(F32), bias), F32),), F32)
    k = Kernel((*base.inputs, Buffer((10,), F32)), base.shape, base.vars, base.reduce, (out, Acc(F32)))
    xs, mm = operands(base, "NN")
    b = data((10,))
    for device in (LibraryDevice(), LibraryDevice(max_elements=7)):
        got, acc = launch(device, k, [*xs, b])
        close(acc, mm.astype(np.float32), F32)
        close(got, np.maximum(mm + b, 0).astype(np.float32), F32)


def test_library_rejects_other_kernels() -> None:
    blas = LibraryDevice()
    assert not blas.supports(elementwise([leaf(0, (3, 4))], (3, 4), lambda e: [e[0]]))
    assert not blas.supports(reduction(leaf(0, (3, 4)), [1], "sum")[0])
    mm = matmul("NN")
    assert mm.reduce is not None
    as_max = Kernel(mm.inputs, mm.shape, mm.vars, Reduce("max", mm.reduce.vars, mm.reduce.body), mm.outputs)
    assert not blas.supports(as_max)
    mul = mm.reduce.body
    assert isinstance(mul, Op)
    add_body = Kernel(
        mm.inputs, mm.shape, mm.vars, Reduce("sum", mm.reduce.vars, Op("add", mul.args, F32)), (Acc(F32),)
    )
    assert not blas.supports(add_body)
    exp_body = Op("mul", (Op("exp2", (mul.args[0],), F32), mul.args[1]), F32)
    assert not blas.supports(Kernel(mm.inputs, mm.shape, mm.vars, Reduce("sum", mm.reduce.vars, exp_body), (Acc(F32),)))
    assert not blas.supports(matmul("NN", dtype=DType.I32))


def _padded_product(zero: float) -> Kernel:
    """``pad(x, right=1) @ w`` for x of 4 x 2 and w of 3, the pad's value ``zero``."""
    g, r = Var("g0", 4), Var("r0", 3)
    padded = leaf(0, (4, 2)).pad(((0, 0), (0, 1)), zero)
    body = Op("mul", (padded.at([var(g), var(r)]), Load(1, var(r), 3, F32)), F32)
    return Kernel((Buffer((4, 2), F32), Buffer((3,), F32)), (4,), (g,), Reduce("sum", (r,), body), (Acc(F32),))


def test_a_padded_operand_is_a_view_of_a_zero_padded_copy() -> None:
    """A load masked by a bound on one of its input's axes (a pad) reads a copy padded along that axis: the
    contraction becomes BLAS's, and both devices give the padded product; a -0.0 pad keeps its mask."""
    k = _padded_product(0.0)
    assert [str(w) for w in plan(k).windows] == ["in0 as [4, 2] zero-padded by [[0, 0], [0, 1]]"]
    assert LibraryDevice().supports(k)
    x, w = data((4, 2)), data((3,))
    for device in (NumpyDevice(), LibraryDevice()):
        (got,) = launch(device, k, [x, w])
        close(got, (np.pad(x, ((0, 0), (0, 1))) @ w).astype(np.float32), F32)
    negative = _padded_product(-0.0)
    assert plan(negative).windows == () and not LibraryDevice().supports(negative)


def test_numpy_device_protocol() -> None:
    dev = NumpyDevice()
    assert (dev.name, dev.pool) == ("numpy", "host") and (LibraryDevice.name, LibraryDevice.pool) == ("blas", "host")
    x = data((3, 4))
    h = dev.upload(x)
    assert h is not x and h.flags.c_contiguous and not np.shares_memory(h, x)
    t = np.asfortranarray(x)
    assert dev.upload(t).flags.c_contiguous
    buf = Buffer((3, 4), F32)
    d = dev.download(h, buf)
    np.testing.assert_array_equal(d, x)
    assert not np.shares_memory(d, h)
    assert dev.alloc(buf).shape == (3, 4) and dev.alloc(buf).dtype == np.float32
    dev.free(h)
    assert dev.transfer_estimate(1 << 20) == 0.0 == LibraryDevice().transfer_estimate(1 << 20)
    mm = matmul("NN", 256, 256, 256)
    assert 0 < LibraryDevice().estimate(mm) < dev.estimate(mm)
    assert dev.compile(mm).plan.kernel is mm


def test_negative_strides_and_index_atoms() -> None:
    x = data((5, 4))
    g0, g1 = Var("g0", 5), Var("g1", 4)
    flipped = Load(0, add(lit(19), scale(var(g0), -4), scale(var(g1), -1)), 20, F32)
    k = Kernel((Buffer((5, 4), F32),), (5, 4), (g0, g1), None, (flipped,))
    view = read(flipped, x.reshape(-1), plan(k).whole())
    assert np.shares_memory(view, x) and view.strides == (-16, -4)
    np.testing.assert_array_equal(evaluate(k, [x])[0], x[::-1, ::-1])
    np.testing.assert_array_equal(evaluate(k, [x], 3)[0], x[::-1, ::-1])


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(-9, 9), min_size=2, max_size=2), st.integers(-20, 20), st.integers(1, 7), st.integers(1, 5))
def test_index_arithmetic_is_floor_semantics(coeffs: list[int], const: int, k: int, k2: int) -> None:
    vs = [Var("a", 5), Var("b", 4)]
    x = add(*(scale(var(v), c) for v, c in zip(vs, coeffs)), lit(const))
    exprs = [floordiv(x, k), mod(x, k), floordiv(add(scale(floordiv(x, k), 3), var(vs[0])), k2), mod(mod(x, k), k2)]
    frame = Frame({v: i for i, v in enumerate(vs)}, ((0, 5), (0, 4)))
    a, b = np.arange(5)[:, None], np.arange(4)[None, :]
    xv = coeffs[0] * a + coeffs[1] * b + const
    wants = [xv // k, xv % k, (3 * (xv // k) + a) // k2, (xv % k) % k2]
    for e, want in zip(exprs, wants):
        got = np.broadcast_to(frame.index(e), (5, 4))
        np.testing.assert_array_equal(got, want, err_msg=str(e))
        assert e.bounds[0] <= got.min() and got.max() <= e.bounds[1]


def test_no_intermediate_exceeds_the_chunk_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Materialised values (not views of the inputs) stay within ``max_elements``; views may span more."""
    sizes: list[int] = []
    original = chunk_eval.eval_stage
    k, xs = _pad_kernel()
    r, _ = reduction(leaf(0, (6, 10, 4)).permute((2, 0, 1)), [2], "sum", lambda acc, ix: Op("exp2", (acc,), F32))
    xr = data((6, 10, 4))

    def recording(steps: Any, template: Any, frame: Any, windows: Any) -> list[Any]:
        values = original(steps, template, frame, windows)
        held = [v for v in values if v is not None and not any(np.shares_memory(v, x) for x in (*xs, xr))]
        sizes.extend(np.size(v) for v in held)
        return values

    monkeypatch.setattr(chunk_eval, "eval_stage", recording)
    evaluate(k, xs, 40)
    evaluate(r, [xr], 40)
    assert sizes and max(sizes) <= 40
    assert len(plan(r, 40).global_blocks[0]) == 1  # the reduce reads a view: one chunk holds it all


def test_library_broadcast_operand() -> None:
    """A batched ``a`` times one ``b`` expanded over the batch (stride 0)."""
    a, b = data((3, 4, 5)), data((5, 6))
    gs = gvars((3, 4, 6))
    r = Var("r0", 5)
    ea = leaf(0, (3, 4, 5)).at([var(gs[0]), var(gs[1]), var(r)])
    eb = leaf(1, (5, 6)).reshape((1, 5, 6)).expand((3, 5, 6)).at([var(gs[0]), var(r), var(gs[2])])
    red = Reduce("sum", (r,), Op("mul", (ea, eb), F32))
    k = Kernel((Buffer((3, 4, 5), F32), Buffer((5, 6), F32)), (3, 4, 6), gs, red, (Acc(F32),))
    assert LibraryDevice().supports(k)
    close(launch(LibraryDevice(), k, [a, b])[0], a @ b, F32)


# ---- threads, variable splits, padded views, contractions of computed factors


@pytest.mark.parametrize("dtype", [DType.F32, DType.I32, DType.BOOL], ids=str)
@pytest.mark.parametrize("op", ["sum", "max"])
def test_a_reduce_split_over_threads(op: str, dtype: DType) -> None:
    """One global chunk: threads take ranges of its reduce blocks and combine their partial results in order."""
    x = data((9, 11, 4), dtype)
    k, _ = reduction(leaf(0, (9, 11, 4), dtype), [0, 1, 2], op)
    p = plan(k, 8, 8)
    assert len(list(p.chunks())) == 1 and p.chunk_count > 3
    want = ref_reduce(op, x, [0, 1, 2], dtype)
    for threads in (1, 2, 5):
        (out,) = evaluate(k, [x], 8, threads, view_elements=8)
        if op == "sum" and dtype.is_float:
            close(out, want, dtype)
        else:
            np.testing.assert_array_equal(out, want)


@pytest.mark.parametrize("shape", [(1, 5, 1), (1,), (4, 1, 3), (0, 3), (1, 0)])
def test_size_one_and_zero_dims_on_threads(shape: tuple[int, ...]) -> None:
    x = data(shape)
    k = elementwise([leaf(0, shape)], shape, lambda e: [Op("mul", (Op("relu", (e[0],), F32), e[0]), F32)])
    want = ref_op("mul", F32, ref_op("relu", F32, x), x)
    for limit in (1, 2, CHUNK_ELEMENTS):
        np.testing.assert_array_equal(evaluate(k, [x], limit, 2)[0], want)
    for axes in ([0], [len(shape) - 1]):
        op = "max" if x.size else "sum"  # a max over nothing has no reference value
        r, _ = reduction(leaf(0, shape), axes, op)
        close(evaluate(r, [x], 1, 2, view_elements=1)[0], ref_reduce(op, x, axes, F32), F32)


def test_outputs_written_straight_and_through_copies() -> None:
    """An op spanning the chunk writes into the output; the same value stored twice, a load, a const are copied."""
    x = data((6, 5))
    v = leaf(0, (6, 5))
    c = Const(Scalar(2.0, F32), F32)
    k = elementwise([v], (6, 5), lambda e: [Op("mul", (e[0], c), F32), Op("mul", (e[0], c), F32), e[0], c])
    p = plan(k, 8)
    assert p.slots[k.outputs[0]] == -1
    outs = [np.empty((6, 5), np.float32), np.asfortranarray(np.empty((6, 5), np.float32)), *[np.empty((6, 5), np.float32)] * 2]
    outs[3] = np.empty((6, 5), np.float32)
    run(p, [x], outs, threads=2)
    for o, want in zip(outs, [x * 2, x * 2, x, np.full((6, 5), 2.0, np.float32)]):
        np.testing.assert_array_equal(o, want)


def test_split_vars_turn_div_and_mod_into_views(gathers: list[int]) -> None:
    """``x[g // 4 + 3 * (g % 4)]`` (a transpose through a flat index) becomes two axes and a strided view."""
    x = data((12,))
    g = Var("g0", 12)
    idx = add(floordiv(var(g), 4), scale(mod(var(g), 4), 3))
    k = Kernel((Buffer((12,), F32),), (12,), (g,), None, (Op("neg", (Load(0, idx, 12, F32),), F32),))
    p = plan(k)
    assert p.kernel.shape == (3, 4) and all(load.index.is_affine for load in p.kernel.loads())
    i = np.arange(12)
    for limit in (5, CHUNK_ELEMENTS):
        np.testing.assert_array_equal(evaluate(k, [x], limit, 2)[0], -x[i // 4 + 3 * (i % 4)])
    assert gathers == []


def test_modulo_coefficients_reduce() -> None:
    """``(g + 7*r) % 6`` is ``g + r`` while that stays below 6: the load becomes affine."""
    g, r = Var("g0", 3), Var("r0", 3)
    idx = mod(add(var(g), scale(var(r), 7)), 6)
    k = Kernel((Buffer((6,), F32),), (3,), (g,), Reduce("sum", (r,), Load(0, idx, 6, F32)), (Acc(F32),))
    assert all(load.index.is_affine for load in plan(k).kernel.loads())
    x = data((6,))
    close(evaluate(k, [x])[0], np.array([x[j:j + 3].sum() for j in range(3)], np.float32), F32)


@pytest.mark.parametrize("zero", [0.0, -0.0])
def test_clamped_affine_loads_read_a_padded_copy(gathers: list[int], zero: float) -> None:
    """A 1-D convolution with padding 1: the padded operand is a view of a zero-padded copy, no gather; a
    window's (``Plan.windows``, the mask gone) or, for a -0.0 pad, the flat input's (``Plan.pads``, masked)."""
    x, w = data((7,)), data((3,))
    g, r = Var("g0", 7), Var("r0", 3)
    padded = leaf(0, (7,)).pad(((1, 1),), zero)
    body = Op("mul", (padded.at([add(var(g), var(r))]), Load(1, var(r), 3, F32)), F32)
    k = Kernel((Buffer((7,), F32), Buffer((3,), F32)), (7,), (g,), Reduce("sum", (r,), body), (Acc(F32),))
    p = plan(k)
    assert any(load.clamped for load in k.loads())
    if zero == 0.0 and not np.signbit(zero):
        assert p.pads == () and [str(w) for w in p.windows] == ["in0 as [7] zero-padded by [[1, 1]]"]
    else:
        assert p.pads == ((0, 1, 1),) and p.windows == ()
    xp = np.pad(x, 1, constant_values=zero)
    want = np.array([xp[j:j + 3] @ w for j in range(7)], np.float32)
    for limit in (2, CHUNK_ELEMENTS):
        close(evaluate(k, [x, w], limit, 2)[0], want, F32)
    assert gathers == []


def test_kept_workspaces_read_each_launchs_own_arrays() -> None:
    """A plan keeps its workspaces between launches: every launch reads its own inputs (views, padded copies and
    gathers alike) and writes its own outputs, and no more are kept than ran at once."""
    g, r = Var("g0", 7), Var("r0", 3)
    padded = leaf(0, (7,)).pad(((1, 1),))
    conv = Op("mul", (padded.at([add(var(g), var(r))]), Load(1, var(r), 3, F32)), F32)
    bias = Load(2, mod(add(var(g), lit(3)), 7), 7, F32)  # a rotation: read through a gather
    k = Kernel((Buffer((7,), F32), Buffer((3,), F32), Buffer((7,), F32)), (7,), (g,), Reduce("sum", (r,), conv),
               (Op("add", (Acc(F32), bias), F32),))
    p = plan(k, 2)
    for threads in (1, 2, 3):
        for _ in range(3):
            x, w, b = data((7,)), data((3,)), data((7,))
            out = np.empty(7, np.float32)
            run(p, [x, w, b], [out], threads)
            xp = np.pad(x, 1)
            close(out, np.array([xp[j:j + 3] @ w for j in range(7)], np.float32) + np.roll(b, -3), F32)
        assert 1 <= len(p.idle) <= 3
        assert all(not ws.flats and not ws.outputs for ws in p.idle)  # an idle workspace holds no launch's arrays


def test_library_epilogue_in_pieces_matches_numpy() -> None:
    """A contraction whose epilogue spans several pieces (``EPILOGUE_ELEMENTS``), launched twice on new data."""
    base = matmul("NN", 700, 400, 3)  # 280,000 outputs: two pieces
    bias = Load(2, var(base.vars[1]), 400, F32)
    out = Op("relu", (Op("add", (Acc(F32), bias), F32),), F32)
    k = Kernel((*base.inputs, Buffer((400,), F32)), base.shape, base.vars, base.reduce, (out,))
    device = LibraryDevice()
    for _ in range(2):
        xs, mm = operands(base, "NN")
        b = data((400,))
        (got,) = launch(device, k, [*xs, b])
        close(got, np.maximum(mm + b, 0).astype(np.float32), F32)


@pytest.mark.parametrize("dtype", [DType.F16, DType.F32, DType.F64], ids=str)
def test_contraction_of_computed_factors(dtype: DType) -> None:
    """``sum_r relu(a[g0, r] + c[r]) * b[r, g1]``: the factor is computed over (g0, r) only, then matmul'd."""
    a, c, b = data((5, 7), dtype), data((7,), dtype), data((7, 6), dtype)
    g0, g1, r = Var("g0", 5), Var("g1", 6), Var("r0", 7)
    fa = Op("relu", (Op("add", (Load(0, add(scale(var(g0), 7), var(r)), 35, dtype), Load(1, var(r), 7, dtype)),
                            dtype),), dtype)
    fb = Load(2, add(scale(var(r), 6), var(g1)), 42, dtype)
    red = Reduce("sum", (r,), Op("mul", (fa, fb), dtype))
    bufs = (Buffer((5, 7), dtype), Buffer((7,), dtype), Buffer((7, 6), dtype))
    k = Kernel(bufs, (5, 6), (g0, g1), red, (Op("neg", (Acc(dtype),), dtype),))
    p = plan(k)
    assert p.factors is not None and p.spans[fa] == (0, 2)
    assert plan(k, view_elements=None).factors is None
    h = np.maximum(a.astype(np.float64) + c, 0)
    want = (-(h @ b)).astype(dtype.numpy)
    for max_elements in (CHUNK_ELEMENTS, 8):
        for device in (NumpyDevice(max_elements, threads=2, view_elements=max_elements, parallel_elements=0),):
            close(launch(device, k, [a, c, b])[0], want, dtype)
    close(evaluate(k, [a, c, b], view_elements=None)[0], want, dtype)


def test_batched_contraction_through_heads(gathers: list[int]) -> None:
    """``q[h, i, d] k[h, j, d]`` with heads read as ``g1 // 4``: split, then one batched matmul, no gather."""
    q, kk = data((2, 3, 5)), data((2, 4, 5))
    g0, g1, r = Var("g0", 3), Var("g1", 8), Var("r0", 5)
    h, j = floordiv(var(g1), 4), mod(var(g1), 4)
    lq = Load(0, add(scale(h, 15), scale(var(g0), 5), var(r)), 30, F32)
    lk = Load(1, add(scale(h, 20), scale(j, 5), var(r)), 40, F32)
    red = Reduce("sum", (r,), Op("mul", (lq, lk), F32))
    k = Kernel((Buffer((2, 3, 5), F32), Buffer((2, 4, 5), F32)), (3, 8), (g0, g1), red, (Acc(F32),))
    p = plan(k)
    assert p.factors is not None and p.kernel.shape == (3, 2, 4)
    want = np.einsum("hid,hjd->ihj", q, kk).reshape(3, 8)
    close(launch(LibraryDevice(), k, [q, kk])[0], want, F32)
    close(launch(NumpyDevice(), k, [q, kk])[0], want, F32)
    assert gathers == []


def test_estimates_follow_the_plan() -> None:
    """Bigger work costs more; a contraction's estimate counts flops, far below streaming its product."""
    dev = NumpyDevice()
    small, big = (elementwise([leaf(0, s)], s, lambda e: [Op("exp2", (e[0],), F32)]) for s in ((64, 64), (1024, 1024)))
    assert 0 < dev.estimate(small) < dev.estimate(big)
    mm = matmul("NN", 256, 256, 256)
    streamed = NumpyDevice(view_elements=None)
    assert dev.estimate(mm) < streamed.estimate(mm) / 5


def test_convolution_contracts_a_masked_factor(gathers: list[int]) -> None:
    """A 3x3 convolution, padding 1: the padded window is a view of the image copied once with its zero border,
    then one matmul (BLAS's too), computed transposed since an image column is the output's innermost axis."""
    x, w = data((2, 5, 5)), data((3, 2, 3, 3))
    go, gh, gw = gvars((3, 5, 5))
    rc, ri, rj = Var("r0", 2), Var("r1", 3), Var("r2", 3)
    window = leaf(0, (2, 5, 5)).pad(((0, 0), (1, 1), (1, 1))).at([var(rc), add(var(gh), var(ri)), add(var(gw), var(rj))])
    weight = leaf(1, (3, 2, 3, 3)).at([var(go), var(rc), var(ri), var(rj)])
    red = Reduce("sum", (rc, ri, rj), Op("mul", (window, weight), F32))
    k = Kernel((Buffer((2, 5, 5), F32), Buffer((3, 2, 3, 3), F32)), (3, 5, 5), (go, gh, gw), red, (Acc(F32),))
    p = plan(k)
    assert p.factors is not None and isinstance(p.factors[0], Load) and not p.factors[0].clamped
    assert [str(w) for w in p.windows] == ["in0 as [2, 5, 5] zero-padded by [[0, 0], [1, 1], [1, 1]]"]
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1)))
    cols = np.stack([xp[:, i:i + 5, j:j + 5] for i in range(3) for j in range(3)], 1)  # [c, 9, h, w]
    want = np.einsum("ckhw,ock->ohw", cols, w.reshape(3, 2, 9))
    for device in (NumpyDevice(), NumpyDevice(view_elements=60), NumpyDevice(view_elements=None), LibraryDevice()):
        close(launch(device, k, [x, w])[0], want, F32)
    assert gathers == []


@pytest.mark.parametrize("dtype", [DType.F16, DType.F32, DType.F64], ids=str)
def test_streamed_sum_of_products_by_matmul(dtype: DType) -> None:
    """``sum_r (x - m)^2`` (a variance) and ``sum_{r,s} a[g, r] * b[g, r, s]``: matmul'd per block, never formed."""
    x, m = data((6, 9), dtype), data((6,), dtype)
    g, r, q = Var("g0", 6), Var("r0", 9), Var("r1", 4)
    d = Op("sub", (Load(0, add(scale(var(g), 9), var(r)), 54, dtype), Load(1, var(g), 6, dtype)), dtype)
    var_k = Kernel((Buffer((6, 9), dtype), Buffer((6,), dtype)), (6,), (g,), Reduce("sum", (r,), Op("mul", (d, d), dtype)),
                   (Acc(dtype),))
    b = data((6, 9, 4), dtype)
    lb = Load(1, add(scale(var(g), 36), scale(var(r), 4), var(q)), 216, dtype)
    la = Load(0, add(scale(var(g), 9), var(r)), 54, dtype)
    mixed = Kernel((Buffer((6, 9), dtype), Buffer((6, 9, 4), dtype)), (6,), (g,),
                   Reduce("sum", (r, q), Op("mul", (la, lb), dtype)), (Acc(dtype),))
    wide = x.astype(np.float64)
    cases = [(var_k, [x, m], ((wide - m[:, None]) ** 2).sum(1)), (mixed, [x, b], np.einsum("gr,grs->g", wide, b))]
    assert plan(var_k).dot is not None and plan(var_k).factors is None  # a materialised factor: streamed
    assert plan(mixed).factors is not None and plan(mixed, view_elements=None).dot is not None
    for k, xs, want in cases:
        for limit, threads in ((CHUNK_ELEMENTS, 1), (5, 2)):  # the reduce split into blocks, on two threads
            close(evaluate(k, xs, limit, threads, view_elements=limit)[0], want.astype(dtype.numpy), dtype)


def test_contraction_epilogue_in_cache_sized_pieces() -> None:
    """An output chunk bigger than ``CHUNK_ELEMENTS``: relu(acc - row) runs piece by piece over it."""
    mm = matmul("NN", 300, 260, 3)
    gs = mm.vars
    row = Load(2, var(gs[0]), 300, F32)
    out = Op("relu", (Op("sub", (Acc(F32), row), F32),), F32)
    k = Kernel((*mm.inputs, Buffer((300,), F32)), mm.shape, gs, mm.reduce, (out,))
    assert CHUNK_ELEMENTS < 300 * 260 and len(list(plan(k).chunks())) == 1
    a, b, c = data((300, 3)), data((3, 260)), data((300,))
    close(launch(LibraryDevice(), k, [a, b, c])[0], np.maximum(a @ b - c[:, None], 0), F32)


@pytest.mark.parametrize("layout", ["NN", "NT", "TN", "TT"])
@pytest.mark.parametrize("batch", [None, 3])
def test_matmul_writes_the_output_without_a_temporary(layout: str, batch: int | None) -> None:
    """A pure contraction's matmul writes into the output array: nothing of the output's size is allocated."""
    k = matmul(layout, 256, 384, 64, batch=batch)
    xs, want = operands(k, layout)
    blas = LibraryDevice(threads=1)
    compiled = blas.compile(k)
    (out,) = [blas.alloc(t) for t in k.output_types]
    tracemalloc.start()
    try:
        blas.launch(compiled, xs, [out])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < out.nbytes / 2
    close(out, want.astype(np.float32), F32)


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("epilogue", ["twice", "where", "cast"])
def test_epilogue_in_place_over_the_matmul(threads: int, epilogue: str) -> None:
    """Epilogues that read the reduce value more than once, or write the output through a ``Where``, over
    several pieces: the in-place run over the matmul's result leaves them exact."""
    mm = matmul("NN", 300, 260, 3)
    g1 = mm.vars[1]
    acc = Acc(F32)
    a, b = data((300, 3)), data((3, 260))
    h = a.astype(np.float64) @ b
    if epilogue == "twice":  # acc * relu(-acc) + acc
        out = Op("add", (Op("mul", (acc, Op("relu", (Op("neg", (acc,), F32),), F32)), F32), acc), F32)
        want = h * np.maximum(-h, 0) + h
    elif epilogue == "where":  # acc where g1 < 100, else 2 * acc
        out = Where((Bound(var(g1), 0, 100),), acc, Op("add", (acc, acc), F32), F32)
        want = np.where(np.arange(260) < 100, h, 2 * h)
    else:  # a float64 output: the matmul cannot write it
        out = Op("cast", (Op("neg", (acc,), F32),), DType.F64)
        want = -h
    k = Kernel(mm.inputs, mm.shape, mm.vars, mm.reduce, (out,))
    assert len(list(plan(k).chunks())) == 1 and CHUNK_ELEMENTS < 300 * 260
    (got,) = launch(LibraryDevice(threads=threads, parallel_elements=0), k, [a, b])
    close(got, want.astype(got.dtype), F32)


def test_computed_factors_take_their_inputs_layout() -> None:
    """A factor computed from a row-major ``[m, k]`` input is laid out ``[m, k]``; from a ``[k, m]`` one, ``[k, m]``."""
    for stored_km in (False, True):
        g0, g1, r = Var("g0", 5), Var("g1", 6), Var("r0", 7)
        index = add(scale(var(r), 5), var(g0)) if stored_km else add(scale(var(g0), 7), var(r))
        fa = Op("exp2", (Load(0, index, 35, F32),), F32)
        fb = Load(1, add(scale(var(r), 6), var(g1)), 42, F32)
        k = Kernel((Buffer((35,), F32), Buffer((42,), F32)), (5, 6), (g0, g1), Reduce("sum", (r,), Op("mul", (fa, fb), F32)),
                   (Acc(F32),))
        p = plan(k)
        assert p.factors is not None
        assert factor_order(p, fa, p.spans[fa]) == ([2, 0] if stored_km else [0, 2])
        x, w = data((35,)), data((42,))
        am = np.exp2(x.astype(np.float64)).reshape((7, 5) if stored_km else (5, 7))
        want = (am.T if stored_km else am) @ w.reshape(7, 6)
        close(launch(NumpyDevice(), k, [x, w])[0], want.astype(np.float32), F32)


def test_a_kernel_is_planned_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Compiling again (every execution does), checking support and estimating reuse one plan per kernel key."""
    calls = []
    monkeypatch.setattr("engine.devices.numpy_device.plan", lambda *a: calls.append(a) or plan(*a))
    k = matmul("NT")
    blas = LibraryDevice()
    for _ in range(3):
        blas.compile(k)
        blas.estimate(k)
    assert blas.supports(matmul("NT")) and len(calls) == 1


def test_small_kernels_run_on_one_thread() -> None:
    dev = NumpyDevice(threads=4)
    small, big = matmul("NN", 8, 8, 8), matmul("NN", 128, 128, 128)
    assert (dev.threads_for(small), dev.threads_for(big)) == (1, 4)
    assert NumpyDevice(threads=4, parallel_elements=0).threads_for(small) == 4


PICKLE_A_KERNEL = """
import pickle, sys
from engine.egraph.egraph import Scalar
from engine.kernel.index import Var, add, scale, var
from engine.kernel.ir import Acc, Buffer, Const, Kernel, Load, Op, Reduce
from engine.program.dtypes import DType
F32 = DType.F32
g, r = Var("g0", 3), Var("r0", 4)
row = Op("mul", (Load(0, add(scale(var(g), 4), var(r)), 12, F32), Const(Scalar(0.5, F32), F32)), F32)
k = Kernel((Buffer((3, 4), F32), Buffer((3,), F32)), (3,), (g,), Reduce("sum", (r,), row),
           (Op("add", (Acc(F32), Load(1, var(g), 3, F32)), F32),))
sys.stdout.buffer.write(pickle.dumps(k))
"""


def test_a_kernel_pickled_in_another_process_evaluates_the_same() -> None:
    """Expressions cache their hash; one made under another string-hash seed (a recording made elsewhere) must
    still match the same expression made here, or the evaluator's tables miss it."""
    env = {**os.environ, "PYTHONHASHSEED": "1"}
    made = subprocess.run([sys.executable, "-c", PICKLE_A_KERNEL], env=env, capture_output=True, check=True).stdout
    check = (f"import json, pickle, numpy as np\nfrom engine.devices.evaluate import evaluate\nk = pickle.loads({made!r})\n"
             "x, b = np.arange(12, dtype=np.float32).reshape(3, 4), np.float32([1, 2, 3])\n"
             "print(json.dumps(evaluate(k, [x, b])[0].tolist()))")
    out = subprocess.run([sys.executable, "-c", check], env={**env, "PYTHONHASHSEED": "2"}, capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr[-600:]
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert json.loads(out.stdout) == (x.sum(1) * 0.5 + np.float32([1, 2, 3])).tolist()

"""The reference interpreter against direct numpy, one small concrete case per primitive and per op.

``CASES`` has an entry for every name in ``engine.program.opset.OPS`` and
``PRIMITIVE_CASES`` one for every primitive: a new op or primitive without a
numpy case fails ``test_op_matches_numpy`` / ``test_primitive_matches_numpy``.
"""

from __future__ import annotations

import math
import tracemalloc
import zlib
from collections.abc import Callable

import numpy as np
import pytest
from numpy_math import np_gelu, np_sigmoid, np_softmax

import engine
from engine import DType, Init, Tensor, from_tensors
from engine.program.opset import OPS
from engine.program.primitives import PRIMITIVE_OPS, PrimGraph
from engine.program.reference import evaluate

Case = dict[str, tuple[Tensor, np.ndarray]]  # output name -> (builder tensor, expected value)

F16, F32, F64, I32, I64, BOOL = DType.F16, DType.F32, DType.F64, DType.I32, DType.I64, DType.BOOL
_BY_NUMPY = {d.numpy: d for d in DType}


# -- helpers ---------------------------------------------------------------------------


def inp(
    name: str, shape: tuple[int, ...], dtype: DType = F32, low: float = -1.0, high: float = 1.0
) -> tuple[Tensor, np.ndarray]:
    """An input with inline values (seeded from its name) and those values as a numpy array of its dtype."""
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    if dtype == BOOL:
        data = rng.random(shape) > 0.5
    elif dtype.is_int:
        data = rng.integers(int(low), int(high) + 1, shape)
    else:
        data = rng.uniform(low, high, shape)
    return given(name, data, dtype)


def given(name: str, data: object, dtype: DType = F32) -> tuple[Tensor, np.ndarray]:
    """An input holding exactly ``data`` (rounded to ``dtype``)."""
    array = np.asarray(data).astype(dtype.numpy)
    init = Init("values", {"values": array.tolist()}) if array.size else Init("zeros")  # [] loses an empty shape
    return Tensor.input(name, array.shape, dtype, init), array


def f64(a: np.ndarray) -> np.ndarray:
    return a.astype(np.float64)


def check(case: Case) -> None:
    """Run the outputs of ``case`` through the reference and compare them with the expected values."""
    program = from_tensors({name: t for name, (t, _) in case.items()})
    got = engine.run_reference(program)
    assert set(got) == set(case)
    for name, (t, want) in case.items():
        want = np.asarray(want)
        out = got[name]
        assert out.dtype == t.dtype.numpy, (name, out.dtype, t.dtype)
        assert out.shape == t.shape == want.shape, (name, out.shape, t.shape, want.shape)
        if t.dtype.is_float:
            rtol, atol = t.dtype.tolerance
            np.testing.assert_allclose(f64(out), want, rtol=rtol, atol=atol, equal_nan=True, err_msg=name)
        else:
            np.testing.assert_array_equal(out, want.astype(t.dtype.numpy), err_msg=name)








def np_conv2d(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, stride: int, padding: int) -> np.ndarray:
    """An explicit loop over output positions."""
    n, _c, h, wd = x.shape
    o, _c, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    oh, ow = (h + 2 * padding - kh) // stride + 1, (wd + 2 * padding - kw) // stride + 1
    out = np.zeros((n, o, oh, ow))
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, :, i * stride : i * stride + kh, j * stride : j * stride + kw]
            out[:, :, i, j] = np.einsum("nckl,ockl->no", patch, w)
    return out if b is None else out + b[None, :, None, None]


def np_conv2d_strides(x: np.ndarray, w: np.ndarray, strides: tuple[int, int]) -> np.ndarray:
    """np_conv2d with stride 1 and unpadded, subsampled along each axis."""
    return np_conv2d(x, w, None, 1, 0)[:, :, :: strides[0], :: strides[1]]


def np_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float | None) -> np.ndarray:
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    return np_softmax(q @ np.swapaxes(k, -1, -2) * scale) @ v


def np_int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C division: truncate toward zero; x / 0 is 0."""
    a, b = np.broadcast_arrays(a.astype(np.int64), b.astype(np.int64))
    out = np.zeros(a.shape, np.int64)
    for idx in np.ndindex(a.shape):
        if b[idx]:
            q = abs(int(a[idx])) // abs(int(b[idx]))
            out[idx] = q if (a[idx] < 0) == (b[idx] < 0) else -q
    return out


# -- one case per op --------------------------------------------------------------------


def case_const() -> Case:
    x, xv = inp("x", (2, 3))
    c = x.const(2.5)
    ci = x._apply("const", (), {"value": 7, "dtype": I32, "shape": (2, 3)})
    cb = x._apply("const", (), {"value": True, "dtype": BOOL, "shape": (4,)})
    assert c.shape == () and c.dtype == F32 and ci.dtype == I32
    return {
        "c": (c, np.asarray(2.5)),
        "ci": (ci, np.full((2, 3), 7)),
        "cb": (cb, np.ones(4, bool)),
        "f16": (x.const(0.1, F16), np.asarray(np.float16(0.1), np.float64)),
        "x_plus_c": (x + c, f64(xv) + 2.5),
    }


def case_reshape() -> Case:
    x, xv = inp("x", (2, 3, 4))
    return {
        "flat": (x.reshape(24), f64(xv).reshape(24)),
        "infer": (x.reshape(4, -1), f64(xv).reshape(4, -1)),
        "tuple": (x.reshape((3, 1, 8)), f64(xv).reshape(3, 1, 8)),
        "after_permute": (x.permute(2, 0, 1).reshape(4, 6), f64(xv).transpose(2, 0, 1).reshape(4, 6)),
    }


def case_permute() -> Case:
    x, xv = inp("x", (2, 3, 4))
    return {
        "p": (x.permute(2, 0, 1), f64(xv).transpose(2, 0, 1)),
        "negative": (x.permute(-1, -3, -2), f64(xv).transpose(2, 0, 1)),
        "identity": (x.permute(0, 1, 2) * 1, f64(xv)),
    }


def case_transpose() -> Case:
    x, xv = inp("x", (2, 3, 4))
    return {
        "default": (x.transpose(), np.swapaxes(f64(xv), -2, -1)),
        "dims": (x.transpose(0, 2), np.swapaxes(f64(xv), 0, 2)),
        "T": (x.T, np.swapaxes(f64(xv), -1, -2)),
    }


def case_expand() -> Case:
    x, xv = inp("x", (3, 1))
    return {
        "grow": (x.expand(3, 4), np.broadcast_to(f64(xv), (3, 4))),
        "rank": (x.expand(2, 3, 5), np.broadcast_to(f64(xv), (2, 3, 5))),
        "same": (x.expand(3, 1) + 0, f64(xv)),
    }


def case_pad() -> Case:
    x, xv = inp("x", (3, 4))
    xi, xiv = inp("xi", (2, 2), I32, -5, 5)
    xb, xbv = inp("xb", (2,), BOOL)
    z, zv = inp("z", (3,))
    return {
        "grow": (x.pad(((1, 2), (0, 1))), np.pad(f64(xv), ((1, 2), (0, 1)))),
        "value": (x.pad(((0, 0), (2, 0)), value=-3.5), np.pad(f64(xv), ((0, 0), (2, 0)), constant_values=-3.5)),
        "shrink": (x.pad(((-1, 0), (-1, -2))), f64(xv)[1:, 1:2]),
        "mixed": (x.pad(((-2, 1), (1, -3)), value=9.0), np.pad(f64(xv)[2:, :1], ((0, 1), (1, 0)), constant_values=9)),
        "empty": (x.pad(((0, -3), (0, 0))), np.zeros((0, 4))),
        # an axis shrunk past its far end on one side and grown on the other: all padding
        "overshrink_lo": (z.pad(((-4, 2),), value=7.0), np.full(1, 7.0)),
        "overshrink_hi": (z.pad(((2, -4),), value=5.0), np.full(1, 5.0)),
        "shrink_both": (z.pad(((-1, -1),)), f64(zv)[1:2]),
        "int": (xi.pad(((1, 0), (0, 1)), value=4), np.pad(xiv, ((1, 0), (0, 1)), constant_values=4)),
        "bool": (xb.pad(((1, 1),), value=1), np.pad(xbv, (1, 1), constant_values=True)),
    }


def case_cast() -> Case:
    x, xv = given("x", [[-2.7, -0.5, 0.0], [0.5, 1.9, 3.0]])
    b, bv = inp("b", (2, 3), BOOL)
    i, iv = inp("i", (4,), I32, -100, 100)
    return {
        "to_i32": (x.cast(I32), np.array([[-2, 0, 0], [0, 1, 3]])),  # truncation toward zero
        "to_bool": (x.cast("bool"), xv != 0),
        "bool_to_f32": (b.cast(F32), bv.astype(np.float64)),
        "i32_to_f16": (i.cast(F16), iv.astype(np.float64)),
        "i32_to_i64": (i.cast(I64), iv),
        "f16": (x.cast(F16), f64(xv.astype(np.float16))),
    }


def case_sum() -> Case:
    x, xv = inp("x", (2, 3, 4))
    b, bv = inp("b", (3, 5), BOOL)
    i, iv = inp("i", (3, 5), I32, -9, 9)
    assert b.sum(1).dtype == I32
    return {
        "all": (x.sum(), f64(xv).sum()),
        "axis": (x.sum(1), f64(xv).sum(1)),
        "axes": (x.sum((0, -1)), f64(xv).sum((0, 2))),
        "keepdim": (x.sum((0, 2), keepdim=True), f64(xv).sum((0, 2), keepdims=True)),
        "keepdim_all": (x.sum(keepdim=True), f64(xv).sum(keepdims=True)),
        "none": (x.sum(()), f64(xv)),
        "bool_counts": (b.sum(1), bv.sum(1)),
        "int": (i.sum(0), iv.sum(0)),
    }


def case_max() -> Case:
    x, xv = inp("x", (2, 3, 4))
    i, iv = inp("i", (3, 5), I32, -9, 9)
    return {
        "all": (x.max(), f64(xv).max()),
        "axis": (x.max(-1), f64(xv).max(-1)),
        "keepdim": (x.max((0, 1), keepdim=True), f64(xv).max((0, 1), keepdims=True)),
        "int": (i.max(1), iv.max(1)),
    }


def case_mean() -> Case:
    x, xv = inp("x", (2, 3, 4))
    i, iv = inp("i", (3, 5), I32, -9, 9)
    assert i.mean().dtype == F32
    return {
        "all": (x.mean(), f64(xv).mean()),
        "axes": (x.mean((0, 2)), f64(xv).mean((0, 2))),
        "keepdim": (x.mean(1, keepdim=True), f64(xv).mean(1, keepdims=True)),
        "int": (i.mean(1), iv.mean(1)),
    }


def case_var() -> Case:
    x, xv = inp("x", (3, 4, 5))
    return {
        "population": (x.var(-1), f64(xv).var(-1)),
        "sample": (x.var((0, 2), correction=1), f64(xv).var((0, 2), ddof=1)),
        "keepdim": (x.var(1, keepdim=True, correction=2), f64(xv).var(1, keepdims=True, ddof=2)),
        "all": (x.var(correction=1), f64(xv).var(ddof=1)),
        "no_dof": (x.var(0, correction=3), np.full((4, 5), np.nan)),  # count - correction <= 0
    }


def case_matmul() -> Case:
    a, av = inp("a", (3, 4))
    b, bv = inp("b", (4, 5))
    ba, bav = inp("ba", (2, 1, 3, 4))
    bb, bbv = inp("bb", (5, 4, 2))
    h1, h1v = inp("h1", (8, 16), F16)
    h2, h2v = inp("h2", (16, 4), F16)
    i1, i1v = inp("i1", (2, 3), I32, -5, 5)
    i2, i2v = inp("i2", (3, 2), I32, -5, 5)
    return {
        "2d": (a @ b, f64(av) @ f64(bv)),
        "batched": (ba @ bb, f64(bav) @ f64(bbv)),
        "transposed": (b.T @ a.T, f64(bv).T @ f64(av).T),
        "f16": (h1 @ h2, f64(h1v) @ f64(h2v)),
        "mixed": (a @ b.cast(F16), f64(av) @ f64(bv.astype(np.float16))),  # promoted to f32
        "int": (i1 @ i2, i1v.astype(np.int64) @ i2v),
    }


def case_softmax() -> Case:
    x, xv = inp("x", (3, 5), low=-4, high=4)
    h, hv = inp("h", (2, 7), F16, -3, 3)
    i, iv = inp("i", (2, 3), I32, -3, 3)
    return {
        "last": (x.softmax(), np_softmax(f64(xv))),
        "axis0": (x.softmax(0), np_softmax(f64(xv), 0)),
        "f16": (h.softmax(-1), np_softmax(f64(hv))),
        "int": (i.softmax(), np_softmax(f64(iv))),
        "stable": ((x * 100).softmax(), np_softmax(f64(xv) * 100)),
    }


def case_log_softmax() -> Case:
    x, xv = inp("x", (3, 5), low=-4, high=4)
    return {
        "last": (x.log_softmax(), np.log(np_softmax(f64(xv)))),
        "axis0": (x.log_softmax(0), np.log(np_softmax(f64(xv), 0))),
    }


def case_layernorm() -> Case:
    x, xv = inp("x", (2, 3, 8), low=-3, high=3)
    w, wv = inp("w", (8,))
    b, bv = inp("b", (8,))
    h, hv = inp("h", (4, 16), F16, -2, 2)
    xv = f64(xv)
    mu, var = xv.mean(-1, keepdims=True), xv.var(-1, keepdims=True)
    norm = (xv - mu) / np.sqrt(var + 1e-5)
    mu0, var0 = xv.mean(0, keepdims=True), xv.var(0, keepdims=True)
    hv = f64(hv)
    return {
        "weight_bias": (x.layernorm(w, b), norm * f64(wv) + f64(bv)),
        "weight": (x.layernorm(w), norm * f64(wv)),
        "plain": (x.layernorm(), norm),
        "eps": (x.layernorm(eps=0.5), (xv - mu) / np.sqrt(var + 0.5)),
        "axis0": (x.layernorm(axis=0), (xv - mu0) / np.sqrt(var0 + 1e-5)),
        "f16": (h.layernorm(), (hv - hv.mean(-1, keepdims=True)) / np.sqrt(hv.var(-1, keepdims=True) + 1e-5)),
    }


def case_rmsnorm() -> Case:
    x, xv = inp("x", (3, 8), low=-3, high=3)
    w, wv = inp("w", (8,))
    xv = f64(xv)
    rms = np.sqrt((xv * xv).mean(-1, keepdims=True) + 1e-6)
    return {
        "weight": (x.rmsnorm(w), xv / rms * f64(wv)),
        "plain": (x.rmsnorm(), xv / rms),
        "axis0": (x.rmsnorm(axis=0, eps=0.1), xv / np.sqrt((xv * xv).mean(0, keepdims=True) + 0.1)),
    }


def case_conv2d() -> Case:
    x, xv = inp("x", (2, 3, 7, 6))
    w, wv = inp("w", (4, 3, 3, 2))
    b, bv = inp("b", (4,))
    w1, w1v = inp("w1", (2, 3, 1, 1))
    xv, wv, bv = f64(xv), f64(wv), f64(bv)
    out: Case = {}
    for stride in (1, 2, 3):
        for padding in (0, 1, 2):
            out[f"s{stride}p{padding}"] = (
                x.conv2d(w, b, stride=stride, padding=padding),
                np_conv2d(xv, wv, bv, stride, padding),
            )
    out["no_bias"] = (x.conv2d(w), np_conv2d(xv, wv, None, 1, 0))
    out["pointwise_stride4"] = (x.conv2d(w1, stride=4), np_conv2d(xv, f64(w1v), None, 4, 0))
    wf, wfv = inp("wf", (1, 3, 7, 6))
    out["full_kernel"] = (x.conv2d(wf), np_conv2d(xv, f64(wfv), None, 1, 0))
    wd = np.zeros((4, 3, 5, 3))  # a dilated kernel is a sparse kernel of the dilated size
    wd[:, :, ::2, ::2] = wv
    out["dilated"] = (x.conv2d(w, b, stride=2, padding=1, dilation=2), np_conv2d(xv, wd, bv, 2, 1))
    wr = np.zeros((4, 3, 3, 4))  # stride (1, 2), dilation (1, 3): the kernel is sparse along the width only
    wr[:, :, :, ::3] = wv
    out["rectangular"] = (x.conv2d(w, stride=(1, 2), dilation=(1, 3)), np_conv2d_strides(xv, wr, (1, 2)))
    xg, xgv = inp("xg", (2, 4, 5, 5))
    wg, wgv = inp("wg", (6, 2, 3, 3))
    groups = [np_conv2d(f64(xgv[:, 2 * g : 2 * g + 2]), f64(wgv[3 * g : 3 * g + 3]), None, 1, 1) for g in range(2)]
    out["groups"] = (xg.conv2d(wg, padding=1, groups=2), np.concatenate(groups, 1))
    wdw, wdwv = inp("wdw", (4, 1, 3, 3))
    depthwise = [np_conv2d(f64(xgv[:, g : g + 1]), f64(wdwv[g : g + 1]), None, 2, 0) for g in range(4)]
    out["depthwise"] = (xg.conv2d(wdw, stride=2, groups=4), np.concatenate(depthwise, 1))
    return out


def case_attention() -> Case:
    q, qv = inp("q", (2, 4, 8))
    k, kv = inp("k", (2, 6, 8))
    v, vv = inp("v", (2, 6, 3))
    q2, q2v = inp("q2", (5, 8))
    return {
        "default_scale": (q.attention(k, v), np_attention(f64(qv), f64(kv), f64(vv), None)),
        "scale": (q.attention(k, v, scale=0.7), np_attention(f64(qv), f64(kv), f64(vv), 0.7)),
        "broadcast_q": (q2.attention(k, v), np_attention(f64(q2v), f64(kv), f64(vv), None)),
    }


def case_minimum() -> Case:
    a, av = inp("a", (3, 4))
    b, bv = inp("b", (4,))
    i, iv = inp("i", (5,), I32, -9, 9)
    return {
        "broadcast": (a.minimum(b), np.minimum(f64(av), f64(bv))),
        "scalar": (a.minimum(0.25), np.minimum(f64(av), 0.25)),
        "int": (i.minimum(2), np.minimum(iv, 2)),
    }


def case_exp() -> Case:
    x, xv = inp("x", (3, 4), low=-5, high=5)
    h, hv = inp("h", (6,), F16, -3, 3)
    i, iv = inp("i", (4,), I32, -3, 3)
    return {"f32": (x.exp(), np.exp(f64(xv))), "f16": (h.exp(), np.exp(f64(hv))), "int": (i.exp(), np.exp(f64(iv)))}


def case_log() -> Case:
    x, xv = inp("x", (3, 4), low=0.01, high=10)
    h, hv = inp("h", (6,), F16, 0.1, 5)
    return {
        "f32": (x.log(), np.log(f64(xv))),
        "f16": (h.log(), np.log(f64(hv))),
        "zero_negative": (given("z", [0.0, -1.0])[0].log(), np.array([-np.inf, np.nan])),
    }


def case_abs() -> Case:
    x, xv = inp("x", (3, 4))
    i, iv = inp("i", (5,), I32, -9, 9)
    return {"f32": (x.abs(), np.abs(f64(xv))), "int": (i.abs(), np.abs(iv))}


def case_sigmoid() -> Case:
    x, xv = inp("x", (3, 4), low=-8, high=8)
    h, hv = inp("h", (6,), F16, -4, 4)
    return {"f32": (x.sigmoid(), np_sigmoid(f64(xv))), "f16": (h.sigmoid(), np_sigmoid(f64(hv)))}


def case_tanh() -> Case:
    x, xv = inp("x", (3, 4), low=-4, high=4)
    e, ev = given("e", [-100.0, -1e-3, 0.0, 1e-3, 100.0])
    return {"f32": (x.tanh(), np.tanh(f64(xv))), "edges": (e.tanh(), np.tanh(f64(ev)))}


def case_gelu() -> Case:
    x, xv = inp("x", (3, 4), low=-4, high=4)
    return {"f32": (x.gelu(), np_gelu(f64(xv)))}


def case_silu() -> Case:
    x, xv = inp("x", (3, 4), low=-6, high=6)
    return {"f32": (x.silu(), f64(xv) * np_sigmoid(f64(xv)))}


def case_neg() -> Case:
    x, xv = inp("x", (3, 4))
    i, iv = inp("i", (5,), I32, -9, 9)
    return {"f32": (-x, -f64(xv)), "int": (-i, -iv)}


def case_relu() -> Case:
    x, xv = inp("x", (3, 4))
    i, iv = inp("i", (5,), I32, -9, 9)
    return {"f32": (x.relu(), np.maximum(f64(xv), 0)), "int": (i.relu(), np.maximum(iv, 0))}


def case_exp2() -> Case:
    x, xv = inp("x", (3, 4), low=-5, high=5)
    i, iv = inp("i", (4,), I32, -3, 3)
    return {"f32": (x.exp2(), np.exp2(f64(xv))), "int": (i.exp2(), np.exp2(f64(iv)))}


def case_log2() -> Case:
    x, xv = inp("x", (3, 4), low=0.01, high=10)
    return {"f32": (x.log2(), np.log2(f64(xv)))}


def case_sin() -> Case:
    x, xv = inp("x", (3, 4), low=-6, high=6)
    return {"f32": (x.sin(), np.sin(f64(xv)))}


def case_cos() -> Case:
    x, xv = inp("x", (3, 4), low=-6, high=6)
    h, hv = inp("h", (5,), F16, -3, 3)
    return {"f32": (x.cos(), np.cos(f64(xv))), "f16": (h.cos(), np.cos(f64(hv)))}


def case_sqrt() -> Case:
    x, xv = inp("x", (3, 4), low=0, high=10)
    i, iv = inp("i", (4,), I32, 0, 50)
    return {"f32": (x.sqrt(), np.sqrt(f64(xv))), "int": (i.sqrt(), np.sqrt(f64(iv)))}


def case_recip() -> Case:
    x, xv = inp("x", (3, 4), low=0.5, high=4)
    z, _ = given("z", [0.0, -2.0])
    return {"f32": (x.recip(), 1 / f64(xv)), "zero": (z.recip(), np.array([np.inf, -0.5]))}


def case_not() -> Case:
    b, bv = inp("b", (3, 4), BOOL)
    return {"not": (b.logical_not(), ~bv)}


def case_add() -> Case:
    a, av = inp("a", (2, 3, 4))
    b, bv = inp("b", (3, 1))
    i, iv = inp("i", (3, 4), I32, -9, 9)
    p, pv = inp("p", (3,), BOOL)
    h, hv = inp("h", (4,), F16)
    assert (p + p).dtype == I32 and (i + 0.5).dtype == F32 and (i + h).dtype == F16
    return {
        "broadcast": (a + b, f64(av) + f64(bv)),
        "scalar": (a + 2, f64(av) + 2),
        "rscalar": (1.5 + a, 1.5 + f64(av)),
        "int": (i + 3, iv + 3),
        "int_float_scalar": (i + 0.5, iv + 0.5),
        "bool": (p + p, pv.astype(np.int64) * 2),
        "promote": (i + h, iv + f64(hv)),
    }


def case_sub() -> Case:
    a, av = inp("a", (2, 3, 4))
    b, bv = inp("b", (4,))
    i, iv = inp("i", (3, 4), I32, -9, 9)
    return {
        "broadcast": (a - b, f64(av) - f64(bv)),
        "rscalar": (1 - a, 1 - f64(av)),
        "reverse_broadcast": (b - a, f64(bv) - f64(av)),
        "int": (i - 7, iv - 7),
    }


def case_mul() -> Case:
    a, av = inp("a", (2, 3, 4))
    b, bv = inp("b", (2, 1, 4))
    i, iv = inp("i", (3, 4), I32, -9, 9)
    return {
        "broadcast": (a * b, f64(av) * f64(bv)),
        "rscalar": (3 * a, 3 * f64(av)),
        "int": (i * i, iv * iv),
    }


def case_div() -> Case:
    a, av = inp("a", (3, 4))
    b, bv = inp("b", (4,), low=0.5, high=2)
    n, nv = given("n", [7, -7, 7, -7, 0, 5, -1, 9], I32)
    d, dv = given("d", [2, 2, -2, -2, 3, 0, 3, 9], I32)
    z, _ = given("z", [1.0, -1.0, 0.0])
    return {
        "float": (a / b, f64(av) / f64(bv)),
        "rscalar": (1 / b, 1 / f64(bv)),
        "int_trunc": (n / d, np.array([3, -3, -3, 3, 0, 0, 0, 1])),  # toward zero; x / 0 -> 0
        "int_trunc_loop": (n / d, np_int_div(nv, dv)),
        "int_scalar": (n / 2, np_int_div(nv, np.array(2))),
        "int_by_float": (n / 2.0, f64(nv) / 2),
        "by_zero": (z / 0.0, np.array([np.inf, -np.inf, np.nan])),
    }


def case_pow() -> Case:
    a, av = inp("a", (3, 4), low=0.1, high=3)
    e, ev = inp("e", (4,), low=-2, high=2)
    base, basev = given("base", [2, -2, 1, -1, 0, 3, -1, 5], I32)
    ex, exv = given("ex", [3, 3, -2, -3, 2, 0, -4, -1], I32)
    return {
        "float": (a**e, f64(av) ** f64(ev)),
        "scalar": (a**2, f64(av) ** 2),
        "rscalar": (2**e, 2 ** f64(ev)),
        "int": (base**ex, np.array([8, -8, 1, -1, 0, 1, 1, 0])),  # a negative exponent: 0 except for +-1
        "int_pos": (base**2, basev.astype(np.int64) ** 2),
        "neg_base_frac": (given("nb", [-2.0])[0] ** 0.5, np.array([np.nan])),
        "int_exp_nonneg": (base ** ex.maximum(0), basev.astype(np.int64) ** np.maximum(exv, 0)),
    }


def case_maximum() -> Case:
    a, av = inp("a", (3, 4))
    b, bv = inp("b", (3, 1))
    i, iv = inp("i", (5,), I32, -9, 9)
    return {
        "broadcast": (a.maximum(b), np.maximum(f64(av), f64(bv))),
        "scalar": (a.maximum(0.1), np.maximum(f64(av), 0.1)),
        "int": (i.maximum(-2), np.maximum(iv, -2)),
    }


def _compare_case(method: str, fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Case:
    a, av = given(f"a_{method}", [[1.0, 2.0, 3.0], [3.0, 2.0, 1.0]])
    b, bv = given(f"b_{method}", [2.0, 2.0, 2.0])
    i, iv = given(f"i_{method}", [1, 2, 3], I32)
    p, pv = given(f"p_{method}", [True, False, True])
    q, qv = given(f"q_{method}", [True, True, False])
    out = {
        "float": (getattr(a, method)(b), fn(av, bv)),
        "scalar": (getattr(a, method)(2), fn(av, 2)),
        "int_float": (getattr(i, method)(b), fn(iv, bv)),
        "bool": (getattr(p, method)(q), fn(pv, qv)),
    }
    assert all(t.dtype == BOOL for t, _ in out.values())
    return out


def case_cmplt() -> Case:
    return _compare_case("cmplt", np.less)


def case_cmpgt() -> Case:
    return _compare_case("cmpgt", np.greater)


def case_eq() -> Case:
    return _compare_case("eq", np.equal)


def case_noteq() -> Case:
    return _compare_case("noteq", np.not_equal)


def case_and() -> Case:
    p, pv = inp("p", (3, 4), BOOL)
    q, qv = inp("q", (4,), BOOL)
    return {"and": (p.logical_and(q), pv & qv), "scalar": (p.logical_and(True), pv)}


def case_or() -> Case:
    p, pv = inp("p", (3, 4), BOOL)
    q, qv = inp("q", (3, 1), BOOL)
    return {"or": (p.logical_or(q), pv | qv), "scalar": (p.logical_or(False), pv)}


def case_concat() -> Case:
    a, av = inp("a", (2, 3))
    b, bv = inp("b", (2, 1), I32, -5, 5)
    p, pv = inp("p", (1, 3), BOOL)
    q, qv = inp("q", (2, 3), BOOL)
    return {"promoted": (a.concat(b, a, axis=-1), np.concatenate([av, bv.astype(np.float32), av], -1)),
            "bool_rows": (p.concat(q), np.concatenate([pv, qv])), "one": (a.concat(axis=1), av),
            "inf": (a.concat(a.const(-math.inf).expand(2, 1), axis=1), np.concatenate([av, np.full((2, 1), -np.inf)], 1))}


def case_slice() -> Case:
    x, xv = inp("x", (5, 7, 3))
    return {"steps": (x.slice([4, -6], [0, 100], axes=[2, 1], steps=[1, 2]), xv[:, -6:100:2, 4:0]),
            "leading": (x.slice([1, 2], [-1, 7]), xv[1:-1, 2:7]),
            "stride3": (x.slice([1], [7], axes=[1], steps=[3]), xv[:, 1:7:3]),
            "negative_axis": (x.slice([-2], [3], axes=[-1]), xv[..., -2:3])}


def case_gather() -> Case:
    x, xv = inp("x", (4, 3, 2))
    i, iv = given("i", [[0, 3], [-1, 2], [1, -4]], I64)
    b, bv = inp("bools", (5,), BOOL)
    n, nv = inp("ints", (5,), I32, -9, 9)
    j, _ = given("j", 4, I32)
    inf, infv = given("table", [[1.0, -np.inf], [np.inf, 2.0]])
    k, kv = given("k", [1, 0, 1], I32)
    small, smallv = given("small", [[0, 2], [-1, -3]], I64)
    return {"rows": (x.gather(i), np.take(xv, iv, 0)), "axis1": (x.gather(small, axis=1), np.take(xv, smallv, 1)),
            "last_scalar": (x.gather(given("s", 1, I64)[0], axis=-1), xv[..., 1]),
            "bool": (b.gather(j), bv[4]), "int": (n.gather(k), nv[kv]), "infinite": (inf.gather(k), infv[kv])}


def case_where() -> Case:
    c, cv = inp("c", (3, 1), BOOL)
    a, av = given("a", [[1.0, np.inf, -np.inf, -0.0]])  # a NaN in the branch not taken gives NaN (documented)
    b, bv = inp("b", (3, 4))
    ia, iav = inp("ia", (3, 4), I32, -9, 9)
    p, pv = inp("p", (4,), BOOL)
    return {"float": (c.where(a, b), np.where(cv, av, bv)), "inf_other": (c.where(b, a), np.where(cv, bv, av)),
            "int_float": (c.where(ia, b), np.where(cv, iav, bv)), "bool": (c.where(p, p.logical_not()), np.where(cv, pv, ~pv))}


def case_erf() -> Case:
    from scipy.special import erf

    x, xv = given("x", [-np.inf, -3.0, -0.5, 0.0, 1e-4, 0.7, 2.5, 6.0, np.inf])
    i, iv = given("i", [-1, 0, 2], I32)
    return {"f32": (x.erf(), erf(f64(xv))), "int": (i.erf(), erf(iv))}


def np_pool(x: np.ndarray, reduce, kernel, stride, padding, dilation, fill) -> np.ndarray:
    """An explicit loop over output positions of the last two axes."""
    xp = np.pad(x, [(0, 0)] * (x.ndim - 2) + [tuple(p) for p in padding], constant_values=fill)
    span = [(k - 1) * d + 1 for k, d in zip(kernel, dilation)]
    out_shape = [(xp.shape[x.ndim - 2 + i] - span[i]) // stride[i] + 1 for i in range(2)]
    out = np.zeros(x.shape[:-2] + tuple(out_shape))
    for i in range(out_shape[0]):
        for j in range(out_shape[1]):
            h, w = i * stride[0], j * stride[1]
            window = xp[..., h : h + span[0] : dilation[0], w : w + span[1] : dilation[1]]
            out[..., i, j] = reduce(window.reshape(window.shape[:-2] + (-1,)), axis=-1)
    return out


def case_maxpool2d() -> Case:
    x, xv = inp("x", (2, 3, 7, 6))
    i, iv = inp("i", (1, 5, 5), I32, -9, 9)
    pad = ((1, 0), (2, 1))
    return {"k2": (x.maxpool2d((2, 2)), np_pool(f64(xv), np.max, (2, 2), (2, 2), ((0, 0), (0, 0)), (1, 1), 0)),
            "padded": (x.maxpool2d((3, 2), (2, 1), pad, (1, 2)), np_pool(f64(xv), np.max, (3, 2), (2, 1), pad, (1, 2), -np.inf)),
            "int": (i.maxpool2d((3, 3), (1, 1), ((1, 1), (1, 1))),
                    np_pool(iv, np.max, (3, 3), (1, 1), ((1, 1), (1, 1)), (1, 1), np.iinfo(np.int32).min))}


def case_avgpool2d() -> Case:
    x, xv = inp("x", (2, 3, 7, 6))
    pad = ((1, 1), (0, 1))
    count = np_pool(np.ones((7, 6)), np.sum, (3, 2), (2, 2), pad, (1, 1), 0)
    return {"k3": (x.avgpool2d((3, 3), (1, 2)), np_pool(f64(xv), np.mean, (3, 3), (1, 2), ((0, 0), (0, 0)), (1, 1), 0)),
            "excluding_pad": (x.avgpool2d((3, 2), (2, 2), pad), np_pool(f64(xv), np.sum, (3, 2), (2, 2), pad, (1, 1), 0) / count),
            "including_pad": (x.avgpool2d((3, 2), (2, 2), pad, count_include_pad=True),
                              np_pool(f64(xv), np.mean, (3, 2), (2, 2), pad, (1, 1), 0)),
            "dilated": (x.avgpool2d((2, 2), (1, 1), dilation=(3, 2)),
                        np_pool(f64(xv), np.mean, (2, 2), (1, 1), ((0, 0), (0, 0)), (3, 2), 0))}


CASES: dict[str, Callable[[], Case]] = {
    name.removeprefix("case_"): fn for name, fn in dict(globals()).items() if name.startswith("case_")
}


def test_cases_cover_the_op_set():
    assert sorted(set(OPS) - set(CASES)) == [], "ops without a numpy case"
    assert sorted(set(CASES) - set(OPS)) == [], "numpy cases for ops that do not exist"


@pytest.mark.parametrize("op", sorted(OPS))
def test_op_matches_numpy(op):
    if op not in CASES:
        pytest.fail(f"op {op!r} has no numpy case: add case_{op}() to tests/test_reference.py")
    case = CASES[op]()
    program = from_tensors({name: t for name, (t, _) in case.items()})
    assert any(n.op == op for n in program.nodes), f"the case for {op!r} does not use it"
    check(case)


# -- one case per primitive, on hand-built primitive graphs ------------------------------------


def prim(op: str, *arrays: np.ndarray, param: object = None, dtype: DType | None = None) -> np.ndarray:
    """Evaluate one primitive applied to leaves holding ``arrays``; checks the result's shape and dtype."""
    g = PrimGraph()
    leaves = tuple(g.leaf(f"x{i}", a.shape, _BY_NUMPY[a.dtype]) for i, a in enumerate(arrays))
    out = g.emit(op, leaves, param, dtype)
    g.outputs = {"y": out}
    got = evaluate(g, {f"x{i}": a for i, a in enumerate(arrays)})["y"]
    node = g.nodes[out]
    assert got.shape == node.shape and got.dtype == node.dtype.numpy, (op, got.shape, node.shape, got.dtype)
    return got


def _f32(*shape: int, low: float = -1.0, high: float = 1.0, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(low, high, shape).astype(np.float32)


def _close(got: np.ndarray, want: np.ndarray, dtype: DType = F32) -> None:
    rtol, atol = dtype.tolerance
    np.testing.assert_allclose(f64(got), want, rtol=rtol, atol=atol, equal_nan=True)


_UNARY_NUMPY = {
    "neg": (np.negative, (-1, 1)),
    "relu": (lambda x: np.maximum(x, 0), (-1, 1)),
    "exp2": (np.exp2, (-4, 4)),
    "log2": (np.log2, (0.01, 8)),
    "sin": (np.sin, (-6, 6)),
    "cos": (np.cos, (-6, 6)),
    "sqrt": (np.sqrt, (0, 9)),
    "recip": (lambda x: 1 / x, (0.5, 4)),
}
_BINARY_NUMPY = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "max": np.maximum,
    "cmplt": np.less, "cmpgt": np.greater, "eq": np.equal, "noteq": np.not_equal,
}  # fmt: skip


def _prim_unary(op: str) -> Callable[[], None]:
    def run() -> None:
        fn, (low, high) = _UNARY_NUMPY[op]
        x = _f32(3, 4, low=low, high=high)
        _close(prim(op, x), fn(f64(x)))
        h = x.astype(np.float16)
        _close(prim(op, h), fn(f64(h)), F16)

    return run


def _prim_binary(op: str) -> Callable[[], None]:
    def run() -> None:
        fn = _BINARY_NUMPY[op]
        a, b = _f32(3, 4, seed=1), _f32(3, 4, seed=2)
        b[0, 0] = a[0, 0]  # one equal pair, for the comparisons
        if op == "div":
            b = np.where(np.abs(b) < 0.25, 0.5, b).astype(np.float32)
        got = prim(op, a, b)
        if got.dtype == np.bool_:
            np.testing.assert_array_equal(got, fn(a, b))
        else:
            _close(got, fn(f64(a), f64(b)))
        ia, ib = np.array([5, -5, 3, 0], np.int32), np.array([-2, 3, 3, 4], np.int32)
        want = np_int_div(ia, ib) if op == "div" else fn(ia.astype(np.int64), ib)
        np.testing.assert_array_equal(prim(op, ia, ib), want)

    return run


def prim_const() -> None:
    g = PrimGraph()
    c = g.emit("const", (), 2.5, F16)
    g.outputs = {"c": c, "e": g.emit("expand", (g.emit("reshape", (c,), (1, 1)),), (2, 3))}
    out = evaluate(g, {})
    assert out["c"].shape == () and out["c"].dtype == np.float16 and out["c"] == 2.5
    np.testing.assert_array_equal(out["e"], np.full((2, 3), 2.5, np.float16))


def prim_leaf() -> None:
    x = _f32(2, 3)
    g = PrimGraph()
    g.outputs = {"x": g.leaf("x", (2, 3), F32)}
    out = evaluate(g, {"x": x})["x"]
    np.testing.assert_array_equal(out, x)
    out[0, 0] = 99  # the output is a copy, not the input
    assert x[0, 0] != 99


def prim_expand() -> None:
    x = _f32(3, 1, 1)
    np.testing.assert_array_equal(prim("expand", x, param=(3, 4, 2)), np.broadcast_to(x, (3, 4, 2)))


def prim_permute() -> None:
    x = _f32(2, 3, 4)
    np.testing.assert_array_equal(prim("permute", x, param=(1, 2, 0)), x.transpose(1, 2, 0))


def prim_reshape() -> None:
    x = _f32(2, 3, 4)
    np.testing.assert_array_equal(prim("reshape", x, param=(4, 6)), x.reshape(4, 6))
    np.testing.assert_array_equal(prim("reshape", x, param=(24,)), x.reshape(24))


def prim_pad() -> None:
    x = _f32(3, 4)
    grown = np.pad(x, ((1, 0), (0, 2)), constant_values=0.5)
    np.testing.assert_array_equal(prim("pad", x, param=(((1, 0), (0, 2)), 0.5)), grown)
    np.testing.assert_array_equal(prim("pad", x, param=(((-1, -1), (-3, 0)), 0.0)), x[1:2, 3:])
    np.testing.assert_array_equal(prim("pad", x, param=(((-4, 2), (1, -5)), 3.0)), np.full((1, 0), 3.0))
    np.testing.assert_array_equal(prim("pad", x, param=(((-5, 3), (0, 0)), 3.0)), np.full((1, 4), 3.0))
    np.testing.assert_array_equal(prim("pad", x, param=(((0, 0), (6, -8)), 3.0)), np.full((3, 2), 3.0))


def prim_reduce_sum() -> None:
    x = _f32(2, 3, 4)
    _close(prim("reduce_sum", x, param=(0, 2)), f64(x).sum((0, 2)))
    _close(prim("reduce_sum", x, param=(0, 1, 2)), f64(x).sum())
    # f16 is accumulated in float32: 3000 ones sum to 3000, not to a float16 plateau
    assert prim("reduce_sum", np.ones(3000, np.float16), param=(0,)) == 3000
    big = np.full(4, 2**30, np.int32)
    np.testing.assert_array_equal(prim("reduce_sum", big, param=(0,)), np.int32(0))  # wraps like int32


def prim_reduce_max() -> None:
    x = _f32(2, 3, 4)
    np.testing.assert_array_equal(prim("reduce_max", x, param=(1,)), x.max(1))
    h = x.astype(np.float16)
    np.testing.assert_array_equal(prim("reduce_max", h, param=(0, 2)), h.max((0, 2)))


def prim_cast() -> None:
    x = np.array([-1.5, -0.0, 0.4, 2.9], np.float32)
    np.testing.assert_array_equal(prim("cast", x, param=I32), [-1, 0, 0, 2])
    np.testing.assert_array_equal(prim("cast", x, param=BOOL), [True, False, True, True])
    np.testing.assert_array_equal(prim("cast", x, param=F16), x.astype(np.float16))


def prim_not() -> None:
    x = np.array([True, False])
    np.testing.assert_array_equal(prim("not", x), [False, True])


def prim_pow() -> None:
    a, e = _f32(3, 4, low=0.1, high=3, seed=3), _f32(3, 4, low=-2, high=2, seed=4)
    _close(prim("pow", a, e), f64(a) ** f64(e))
    base, ex = np.array([2, -2, 1, -1, 0, 3, -1, 5], np.int32), np.array([3, 3, -2, -3, 2, 0, -4, -1], np.int32)
    np.testing.assert_array_equal(prim("pow", base, ex), [8, -8, 1, -1, 0, 1, 1, 0])


def prim_and() -> None:
    p, q = np.array([True, True, False, False]), np.array([True, False, True, False])
    np.testing.assert_array_equal(prim("and", p, q), p & q)


def prim_or() -> None:
    p, q = np.array([True, True, False, False]), np.array([True, False, True, False])
    np.testing.assert_array_equal(prim("or", p, q), p | q)


PRIMITIVE_CASES: dict[str, Callable[[], None]] = {
    **{op: _prim_unary(op) for op in _UNARY_NUMPY},
    **{op: _prim_binary(op) for op in _BINARY_NUMPY},
    **{name.removeprefix("prim_"): fn for name, fn in dict(globals()).items() if name.startswith("prim_")},
}


def test_primitive_cases_cover_the_primitives():
    assert sorted(set(PRIMITIVE_OPS) - set(PRIMITIVE_CASES)) == [], "primitives without a numpy case"
    assert sorted(set(PRIMITIVE_CASES) - set(PRIMITIVE_OPS)) == [], "numpy cases for primitives that do not exist"


@pytest.mark.parametrize("op", PRIMITIVE_OPS)
def test_primitive_matches_numpy(op):
    if op not in PRIMITIVE_CASES:
        pytest.fail(f"primitive {op!r} has no numpy case in tests/test_reference.py")
    PRIMITIVE_CASES[op]()


# -- the contraction path of reduce_sum(mul(...)) --------------------------------------------


def test_contraction_of_axes_broadcast_in_both_operands():
    """sum(a * b) where an axis is broadcast in both operands: reduced (a factor) or kept (broadcast)."""
    x, xv = inp("x", (3, 1))
    y, yv = inp("y", (3, 1))
    xe, ye = x.expand(3, 4), y.expand(3, 4)
    prod = f64(xv) * f64(yv)
    check({
        "reduce_broadcast_axis": ((xe * ye).sum(1), np.broadcast_to(prod, (3, 4)).sum(1)),
        "keep_broadcast_axis": ((xe * ye).sum(0), np.broadcast_to(prod, (3, 4)).sum(0)),
        "all": ((xe * ye).sum(), prod.sum() * 4),
        "const_times_const": ((x.const(2.0).expand(2, 3) * x.const(3.0).expand(2, 3)).sum(1), np.full(2, 18.0)),
    })  # fmt: skip


def test_contraction_matches_the_materialised_product():
    a, av = inp("a", (2, 3, 4))
    b, bv = inp("b", (3, 1))
    c = a * b.expand(3, 4)
    check({
        "contracted": (c.sum((0, 2)), (f64(av) * f64(bv)).sum((0, 2))),
        "materialised": (c, f64(av) * f64(bv)),  # an output: formed, and still summed correctly below
        "sum_of_output": (c.sum(1), (f64(av) * f64(bv)).sum(1)),
    })  # fmt: skip


def test_large_matmul_does_not_materialise_the_product():
    """2048^3: the [m, n, k] product would be 32 GiB; the contraction keeps the peak near the operands."""
    n = 2048
    a = Tensor.input("a", (n, n), init=Init.uniform(seed=1))
    b = Tensor.input("b", (n, n), init=Init.uniform(seed=2))
    program = from_tensors({"y": a @ b})
    graph = program.lower()
    assert any(node.op == "mul" and node.shape == (n, n, n) for node in graph.nodes)
    values = program.input_values()
    tracemalloc.start()
    try:
        got = evaluate(graph, values)["y"]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 200 * 2**20, f"peak {peak / 2**20:.0f} MiB"
    rows = slice(0, 64)
    want = f64(values["a"][rows]) @ f64(values["b"])
    np.testing.assert_allclose(got[rows], want, rtol=1e-4, atol=1e-3)


def test_f16_is_rounded_after_every_op():
    """float16 is computed in float32 but stored as float16 after each op, as a device would."""
    x, _ = given("x", [2048.0], F16)
    y = (x + 1) + 1  # 2049 is not a float16: each + 1 rounds back to 2048
    check({"y": (y, np.array([2048.0]))})


def test_contraction_with_an_empty_axis():
    x, _ = inp("x", (1, 3))
    y, _ = inp("y", (0, 3))
    xe = x.expand(0, 3)
    check({
        "kept_empty": ((xe * y).sum(1), np.zeros(0)),
        "reduced_empty": ((xe * y).sum(0), np.zeros(3)),
        "both_broadcast": ((xe * xe).sum(0), np.zeros(3)),
        "matmul_empty_k": (y.T @ y, np.zeros((3, 3))),
        "matmul_empty_m": (y @ y.T, np.zeros((0, 0))),
    })  # fmt: skip

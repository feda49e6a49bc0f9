"""Every bundled sample loads, is what the builder script writes, and computes the math it claims."""

from __future__ import annotations

import math

import numpy as np
import pytest
from numpy_math import np_gelu, np_softmax

import engine
import sample_graphs
from sample_graphs.build import LARGE, SAMPLES, SMALL, build


def _layernorm(x, w, b, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(x.var(-1, keepdims=True) + eps) * w + b


def _conv2d(x, w, pad):
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    kh, kw = w.shape[2:]
    windows = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(2, 3))  # N C OH OW KH KW
    return np.einsum("ncijkl,ockl->noij", windows, w)


def _attention(v, heads):
    x = v["x"]
    s, d = x.shape

    def split(t):
        return t.reshape(s, heads, d // heads).transpose(1, 0, 2)

    q, k, val = split(x @ v["wq"]), split(x @ v["wk"]), split(x @ v["wv"])
    p = np_softmax(q @ k.transpose(0, 2, 1) / np.sqrt(d // heads))
    return {"y": (p @ val).transpose(1, 0, 2).reshape(s, d) @ v["wo"] + x}


def _rmsnorm(x, g, eps=1e-6):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * g


NUMPY = {
    "mlp": lambda v: {"y": np.maximum(v["x"] @ v["w1"] + v["b1"], 0) @ v["w2"] + v["b2"]},
    "softmax": lambda v: {"y": np_softmax(v["x"])},
    "layernorm": lambda v: {"y": _layernorm(v["x"], v["gamma"], v["beta"])},
    "attention": lambda v: _attention(v, heads=2 if v["x"].shape[0] == SMALL.seq else LARGE.heads),
    "transpose_fusion": lambda v: {"y": (v["b"] @ v["a"]).T},
    "conv_relu": lambda v: {"y": np.maximum(_conv2d(v["x"], v["w"], 1) + v["bias"][:, None, None], 0)},
    "residual_mlp": lambda v: {
        "y": v["x"] + np.maximum(_layernorm(v["x"], v["ln_w"], v["ln_b"]) @ v["w1"], 0) @ v["w2"]
    },
    "reductions": lambda v: {
        "sum_then_max": v["x"].sum(2).max(1),
        "mean_0_2": v["x"].mean((0, 2)),
        "max_minus_mean": v["x"].max((1, 2)) - v["x"].mean((1, 2)),
    },
    "elementwise": lambda v: {"y": np.maximum(v["x"] * 2 + 1, 0) * v["x"] - np.exp(-v["x"])},
    "gelu_ffn": lambda v: {"y": np_gelu(v["x"] @ v["w1"] + v["b1"]) @ v["w2"] + v["b2"]},
    "matmul": lambda v: {"y": v["a"] @ v["b"]},
    "sum": lambda v: {"y": v["x"].sum()},
    "swiglu_mlp": lambda v: {
        "y": v["x"]
        + (
            (lambda n: (lambda g: g / (1 + np.exp(-g)))(n @ v["w_gate"]) * (n @ v["w_up"]))(_rmsnorm(v["x"], v["g"]))
            @ v["w_down"]
        )
    },
}


def test_there_are_at_least_ten_workloads_each_in_two_sizes():
    assert len(SAMPLES) >= 10
    assert set(NUMPY) == set(SAMPLES)
    assert sample_graphs.names() == sorted(n + s for n in SAMPLES for s in ("", ".small"))


def test_committed_files_are_what_the_builder_writes(tmp_path):
    for written in build(tmp_path):
        committed = sample_graphs.path(written.name.removesuffix(".json"))
        stale = f"{committed.name} is stale: run python -m sample_graphs.build"
        assert committed.read_text() == written.read_text(), stale


@pytest.mark.parametrize("name", sample_graphs.names())
def test_sample_matches_direct_numpy(name):
    program = engine.load(sample_graphs.path(name))
    assert engine.loads(program.dumps()) == program
    values = {k: v.astype(np.float64) for k, v in program.input_values().items()}
    expected = NUMPY[name.removesuffix(".small")](values)
    got = engine.run_reference(program)
    assert set(got) == set(expected) == set(program.outputs)
    for out, want in expected.items():
        assert got[out].shape == np.shape(want)
        assert got[out].dtype == np.float32
        scale = max(1.0, float(np.abs(want).max()))
        np.testing.assert_allclose(got[out], want, rtol=1e-3, atol=1e-4 * scale, err_msg=f"{name}:{out}")


@pytest.mark.parametrize("name", list(SAMPLES))
def test_large_variants_have_sizes_worth_timing(name):
    program = engine.load(sample_graphs.path(name))
    assert program.parameter_bytes() >= 4 << 20
    assert max(math.prod(shape) for shape, _ in program.types().values()) >= 1 << 20

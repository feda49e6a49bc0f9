"""Writes the bundled sample graphs from the builder API: ``python -m sample_graphs.build``.

Each workload is written twice: ``NAME.json`` at a size worth timing and
``NAME.small.json`` small enough for tests.  Weights use scaled normal inits so
activations stay in a sensible range.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from engine import Init, Program, Tensor, from_tensors
from engine.fileio import write_atomic


@dataclass(frozen=True)
class Size:
    """The dimensions one variant of the samples uses."""

    batch: int
    width: int
    hidden: int
    seq: int
    heads: int
    square: int
    image: int
    channels: int


LARGE = Size(batch=512, width=1024, hidden=4096, seq=1024, heads=8, square=4096, image=64, channels=32)
SMALL = Size(batch=8, width=16, hidden=32, seq=8, heads=2, square=16, image=8, channels=3)


def _weight(name: str, fan_in: int, *shape: int) -> Tensor:
    return Tensor.input(name, shape, init=Init.normal(seed=_seed(name), std=1 / math.sqrt(fan_in)))


def _seed(name: str) -> int:
    return sum(ord(c) * 31**i for i, c in enumerate(name)) % 10_000


def _data(name: str, *shape: int) -> Tensor:
    return Tensor.input(name, shape, init=Init.normal(seed=_seed(name)))


def _feed_forward(s: Size, activation: Callable[[Tensor], Tensor]) -> Tensor:
    """activation(x @ w1 + b1) @ w2 + b2."""
    x = _data("x", s.batch, s.width)
    h = activation(x @ _weight("w1", s.width, s.width, s.hidden) + _weight("b1", 1, s.hidden)).named("h")
    return (h @ _weight("w2", s.hidden, s.hidden, s.width) + _weight("b2", 1, s.width)).named("y")


def mlp(s: Size) -> Program:
    y = _feed_forward(s, Tensor.relu)
    return from_tensors([y], "mlp", "two-layer perceptron: relu(x @ w1 + b1) @ w2 + b2")


def softmax(s: Size) -> Program:
    y = _data("x", s.square, s.square).softmax(-1).named("y")
    return from_tensors([y], "softmax", "softmax over the last axis")


def layernorm(s: Size) -> Program:
    x = _data("x", s.square, s.square)
    y = x.layernorm(_weight("gamma", 1, s.square), _weight("beta", 1, s.square)).named("y")
    return from_tensors([y], "layernorm", "layer normalisation over the last axis, with weight and bias")


def attention(s: Size) -> Program:
    d, h = s.width, s.heads
    x = _data("x", s.seq, d)

    def heads(t: Tensor) -> Tensor:
        return t.reshape(s.seq, h, d // h).permute(1, 0, 2)

    q = heads(x @ _weight("wq", d, d, d)).named("q")
    k = heads(x @ _weight("wk", d, d, d)).named("k")
    v = heads(x @ _weight("wv", d, d, d)).named("v")
    a = q.attention(k, v).permute(1, 0, 2).reshape(s.seq, d).named("attn")
    y = (a @ _weight("wo", d, d, d) + x).named("y")
    about = "multi-head self-attention block: QKV projections, softmax, output projection, residual"
    return from_tensors([y], "attention", about)


def transpose_fusion(s: Size) -> Program:
    n = s.width
    a = _data("a", n, n // 2)
    b = _data("b", 2 * n, n)
    y = (a.T @ b.T).named("y")
    return from_tensors([y], "transpose_fusion", "T(A) @ T(B), which equals T(B @ A)")


def conv_relu(s: Size) -> Program:
    x = _data("x", 8 if s is LARGE else 2, s.channels, s.image, s.image)
    w = _weight("w", s.channels * 9, 2 * s.channels, s.channels, 3, 3)
    y = x.conv2d(w, _weight("bias", 1, 2 * s.channels), stride=1, padding=1).relu().named("y")
    return from_tensors([y], "conv_relu", "3x3 convolution (padding 1) with bias, then relu")


def residual_mlp(s: Size) -> Program:
    x = _data("x", s.batch, s.width)
    n = x.layernorm(_weight("ln_w", 1, s.width), _weight("ln_b", 1, s.width)).named("norm")
    h = (n @ _weight("w1", s.width, s.width, s.hidden)).relu()
    y = (x + h @ _weight("w2", s.hidden, s.hidden, s.width)).named("y")
    return from_tensors([y], "residual_mlp", "pre-norm residual block: x + relu(layernorm(x) @ w1) @ w2")


def reductions(s: Size) -> Program:
    x = _data("x", s.heads * 8, s.seq, s.width)
    row_max = x.sum(2).max(1).named("sum_then_max")
    means = x.mean((0, 2)).named("mean_0_2")
    spread = (x.max((1, 2)) - x.mean((1, 2))).named("max_minus_mean")
    return from_tensors([row_max, means, spread], "reductions", "a chain of sum, max and mean over several axes")


def elementwise(s: Size) -> Program:
    x = _data("x", s.square, s.square)
    y = ((x * 2 + 1).relu() * x - (-x).exp()).named("y")
    return from_tensors([y], "elementwise", "relu(x * 2 + 1) * x - exp(-x)")


def gelu_ffn(s: Size) -> Program:
    y = _feed_forward(s, Tensor.gelu)
    return from_tensors([y], "gelu_ffn", "transformer feed-forward: gelu(x @ w1 + b1) @ w2 + b2")


def matmul(s: Size) -> Program:
    n = s.width
    y = (_data("a", n, n) @ _data("b", n, n)).named("y")
    return from_tensors([y], "matmul", "square matrix product")


def total(s: Size) -> Program:
    y = _data("x", s.square, s.square).sum().named("y")
    return from_tensors([y], "sum", "sum of every element")


def swiglu_mlp(s: Size) -> Program:
    x = _data("x", s.batch, s.width)
    n = x.rmsnorm(_weight("g", 1, s.width)).named("norm")
    gate = (n @ _weight("w_gate", s.width, s.width, s.hidden)).silu()
    up = n @ _weight("w_up", s.width, s.width, s.hidden)
    y = (x + (gate * up) @ _weight("w_down", s.hidden, s.hidden, s.width)).named("y")
    return from_tensors([y], "swiglu_mlp", "LLaMA-style block: x + (silu(rmsnorm(x) @ wg) * (rmsnorm(x) @ wu)) @ wd")


SAMPLES: dict[str, Callable[[Size], Program]] = {
    "mlp": mlp,
    "softmax": softmax,
    "layernorm": layernorm,
    "attention": attention,
    "transpose_fusion": transpose_fusion,
    "conv_relu": conv_relu,
    "residual_mlp": residual_mlp,
    "reductions": reductions,
    "elementwise": elementwise,
    "gelu_ffn": gelu_ffn,
    "matmul": matmul,
    "sum": total,
    "swiglu_mlp": swiglu_mlp,
}


def build(out_dir: Path) -> list[Path]:
    """Write every sample (both sizes) into ``out_dir``; returns the files written."""
    written = []
    for name, make in SAMPLES.items():
        for suffix, size in (("", LARGE), (".small", SMALL)):
            target = out_dir / f"{name}{suffix}.json"
            write_atomic(target, make(size).dumps())
            written.append(target)
    return written


if __name__ == "__main__":
    for p in build(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent):
        print(p)

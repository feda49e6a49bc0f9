"""Random programs built with the builder API, each with an independent numpy value built alongside.

The strategy ``programs()`` grows a graph step by step from random inputs
(rank 0 to 4, dims 1 to 4): elementwise unary and binary ops with broadcasting
and scalars, comparisons and logic, reductions, movement ops, casts, matmul,
softmax, normalisation, attention and conv2d.  Each step computes the same math
in float64 (int64, bool) numpy, so the properties can check that

(a) the graph.json text of a program loads back to an equal Program,
(b) the reference interpreter agrees with the numpy value within the tolerance of
    the loosest dtype in the program (NaN positions equal),
(c) lowering yields only primitives, each with the shape and dtype the primitive
    rules infer.

Values are kept well-conditioned so that the float64 numpy value is a fair
ground truth: inputs are uniform in [-1, 1]; log, sqrt and division see
``abs(x) + c``; exp only small arguments; anything larger than 4 is squashed
with tanh; comparisons only operands that differ clearly.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy_math import np_gelu, np_sigmoid, np_softmax

import engine
from engine import DType, Init, Program, Tensor, from_tensors
from engine.program.primitives import PRIMITIVE_OPS
from engine.program.primitives import infer as infer_primitive

F16, F32, F64, I32, I64, BOOL = DType.F16, DType.F32, DType.F64, DType.I32, DType.I64, DType.BOOL
LIMIT = 4.0  # float values above this are squashed with tanh
INT_LIMIT = 1000  # integer values are clamped to this


@dataclass(frozen=True)
class Val:
    """A builder tensor and its numpy value (float64, int64 or bool)."""

    t: Tensor
    v: np.ndarray

    def __post_init__(self) -> None:
        assert self.t.shape == self.v.shape, (self.t, self.v.shape)


@dataclass
class Built:
    program: Program
    expected: dict[str, np.ndarray]
    ops: list[str] = field(default_factory=list)

    def tolerance(self) -> tuple[float, float]:
        """The (rtol, atol) of the loosest dtype anywhere in the program."""
        dtypes = {i.dtype for i in self.program.inputs} | {n.dtype for n in self.program.nodes}
        return max((d.tolerance for d in dtypes), default=(0.0, 0.0))

    def __repr__(self) -> str:
        return f"Built(ops={self.ops})\n{self.program.dumps()}"


# -- numpy helpers -------------------------------------------------------------------------


def finite_max(v: np.ndarray) -> float:
    """The largest finite |value| (0 for none)."""
    if v.dtype == np.bool_:
        return 1.0
    f = np.abs(v[np.isfinite(v)]) if v.dtype.kind == "f" else np.abs(v)
    return float(f.max()) if f.size else 0.0


def round_to(v: np.ndarray, dtype: DType) -> np.ndarray:
    """``v`` converted to ``dtype`` and back to its canonical numpy form."""
    if dtype == BOOL:
        return v.astype(bool)
    if dtype.is_int:
        return v.astype(dtype.numpy).astype(np.int64)
    return v.astype(dtype.numpy).astype(np.float64)


def canonical(v: np.ndarray) -> np.ndarray:
    if v.dtype == np.bool_:
        return v
    if v.dtype.kind in "iu":
        return v.astype(np.int64)
    return v.astype(np.float64)


def np_pad(v: np.ndarray, padding: tuple[tuple[int, int], ...], value: object) -> np.ndarray:
    """out[i] = v[i - lo] where that index exists, else ``value``."""
    shape = tuple(d + lo + hi for d, (lo, hi) in zip(v.shape, padding))
    out = np.full(shape, value, v.dtype)
    dst, src = [], []
    for d, n, (lo, _hi) in zip(v.shape, shape, padding):
        start = max(-lo, 0)  # first source index that lands in the output
        length = max(0, min(d - start, n - max(lo, 0)))
        src.append(slice(start, start + length))
        dst.append(slice(max(lo, 0), max(lo, 0) + length))
    out[tuple(dst)] = v[tuple(src)]
    return out


def np_int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C integer division: truncate toward zero, x / 0 = 0."""
    a, b = np.broadcast_arrays(a, b)
    safe = np.where(b == 0, 1, b)
    q = np.abs(a) // np.abs(safe)
    return np.where(b == 0, 0, np.where((a < 0) == (safe < 0), q, -q))








def np_conv2d(x: np.ndarray, w: np.ndarray, stride: int, padding: int) -> np.ndarray:
    x = np.pad(x, ((0, 0), (0, 0), (padding, padding), (padding, padding)))
    kh, kw = w.shape[2:]
    win = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(2, 3))[:, :, ::stride, ::stride]
    return np.einsum("ncijkl,ockl->noij", win, w)


def broadcastable(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    return all(x == y or 1 in (x, y) for x, y in zip(reversed(a), reversed(b))) and max(len(a), len(b)) <= 4


# -- the graph builder ---------------------------------------------------------------------

dims = st.integers(1, 4)


class Builder:
    """Draws ops onto a growing pool of values; ``steps`` names what was applied, for failure reports."""

    def __init__(self, draw: Callable) -> None:
        self.draw = draw
        self.pool: list[Val] = []
        self.inputs = 0
        self.steps: list[str] = []

    # -- inputs and operands ------------------------------------------------------------
    def shape(self, rank: int | None = None) -> tuple[int, ...]:
        rank = self.draw(st.integers(0, 4)) if rank is None else rank
        return tuple(self.draw(st.lists(dims, min_size=rank, max_size=rank)))

    def input(self, shape: tuple[int, ...], dtype: DType) -> Val:
        name = f"in{self.inputs}"
        self.inputs += 1
        seed = self.draw(st.integers(0, 2**16))
        init = Init.uniform(seed, -10.0, 10.0) if dtype.is_int else Init.uniform(seed)
        if not shape:  # a random init of rank 0 comes back with shape [1] (init.py); a constant one does not
            values = st.booleans() if dtype == BOOL else st.integers(-9, 9) if dtype.is_int else st.floats(-1, 1)
            value = self.draw(values)
            init = Init("full", {"value": value})
        value = init.materialize(shape, dtype)
        val = Val(Tensor.input(name, shape, dtype, init), canonical(value))
        self.pool.append(val)
        return val

    def broadcast_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """A random shape that broadcasts with ``shape`` (rank at most 4)."""
        rank = self.draw(st.integers(0, 4))
        out = []
        for i in range(1, rank + 1):
            if i > len(shape) or shape[-i] == 1:
                out.append(self.draw(dims))
            else:
                out.append(self.draw(st.sampled_from((shape[-i], 1))))
        return tuple(reversed(out))

    def operand(self, x: Val, kinds: tuple[str, ...]) -> Val | float | int | bool:
        """A second operand for ``x``: a scalar, a value from the pool or a new input of a broadcastable shape."""
        choice = self.draw(st.sampled_from(("scalar", "pool", "input", "input")))
        if choice == "scalar":
            if x.t.dtype == BOOL:
                return self.draw(st.booleans())
            if x.t.dtype.is_int and self.draw(st.booleans()):
                return self.draw(st.integers(-3, 3))
            return self.draw(st.sampled_from((-1.5, -0.5, 0.25, 0.5, 2.0)))
        if choice == "pool":
            fits = [p for p in self.pool if broadcastable(p.t.shape, x.t.shape) and self.kind(p.t.dtype) in kinds]
            if fits:
                return self.draw(st.sampled_from(fits))
        dtype = x.t.dtype if x.t.dtype == BOOL else self.draw(st.sampled_from((x.t.dtype, x.t.dtype, F32, I32, F16)))
        if self.kind(dtype) not in kinds:
            dtype = x.t.dtype
        return self.input(self.broadcast_shape(x.t.shape), dtype)

    @staticmethod
    def kind(dtype: DType) -> str:
        return "bool" if dtype == BOOL else "int" if dtype.is_int else "float"

    def push(self, t: Tensor, v: np.ndarray, step: str) -> Val:
        val = Val(t, canonical(v) if t.dtype != BOOL else v.astype(bool))
        assert val.v.dtype.kind == {"bool": "b", "int": "i", "float": "f"}[self.kind(t.dtype)], (step, t, val.v.dtype)
        self.steps.append(step)
        self.pool.append(val)
        return val

    def squash(self, x: Val) -> Val:
        """Keep values small: tanh on floats above LIMIT, clamp integers to INT_LIMIT."""
        if x.t.dtype.is_float and finite_max(x.v) > LIMIT:
            return self.push(x.t.tanh(), np.tanh(x.v), "squash tanh")
        if x.t.dtype.is_int and finite_max(x.v) > INT_LIMIT:
            t = x.t.maximum(-INT_LIMIT).minimum(INT_LIMIT)
            return self.push(t, np.clip(x.v, -INT_LIMIT, INT_LIMIT), "squash clamp")
        return x

    # -- ops ----------------------------------------------------------------------------------
    def unary(self, x: Val) -> Val:
        if x.t.dtype == BOOL:
            return self.push(x.t.logical_not(), ~x.v, "not")
        big = finite_max(x.v)
        ops: dict[str, tuple[Callable[[Tensor], Tensor], Callable[[np.ndarray], np.ndarray]]] = {
            "neg": (lambda t: -t, np.negative),
            "relu": (lambda t: t.relu(), lambda v: np.maximum(v, 0)),
            "abs": (lambda t: t.abs(), np.abs),
            "sin": (lambda t: t.sin(), np.sin),
            "cos": (lambda t: t.cos(), np.cos),
            "tanh": (lambda t: t.tanh(), np.tanh),
            "sigmoid": (lambda t: t.sigmoid(), np_sigmoid),
            "gelu": (lambda t: t.gelu(), np_gelu),
            "silu": (lambda t: t.silu(), lambda v: v * np_sigmoid(v)),
            "log": (lambda t: (t.abs() + 0.5).log(), lambda v: np.log(np.abs(v) + 0.5)),
            "log2": (lambda t: (t.abs() + 0.5).log2(), lambda v: np.log2(np.abs(v) + 0.5)),
            "sqrt": (lambda t: (t.abs() + 0.25).sqrt(), lambda v: np.sqrt(np.abs(v) + 0.25)),
            "recip": (lambda t: (t.abs() + 1).recip(), lambda v: 1 / (np.abs(v) + 1)),
            "rsub": (lambda t: 1 - t, lambda v: 1 - v),
            "scale": (lambda t: t * 0.5, lambda v: v * 0.5),
            "square": (lambda t: t * t, lambda v: v * v),
            "pow2": (lambda t: (t.abs() + 0.5) ** 2, lambda v: (np.abs(v) + 0.5) ** 2),
        }
        if big <= 1.5:
            ops["exp"] = (lambda t: t.exp(), np.exp)
        if big <= 2:
            ops["exp2"] = (lambda t: t.exp2(), np.exp2)
        if x.t.dtype.is_float:
            if big <= 2:
                ops["rpow"] = (lambda t: 2**t, lambda v: 2.0**v)
            ops["rdiv"] = (lambda t: 1 / (t.abs() + 1), lambda v: 1 / (np.abs(v) + 1))
        name = self.draw(st.sampled_from(sorted(ops)))
        build, fn = ops[name]
        return self.push(build(x.t), fn(x.v), name)

    def binary(self, x: Val) -> Val:
        if x.t.dtype == BOOL:
            y = self.operand(x, ("bool",))
            yv = y.v if isinstance(y, Val) else np.asarray(y)
            yt = y.t if isinstance(y, Val) else y
            if self.draw(st.booleans()):
                return self.push(x.t.logical_and(yt), x.v & yv, "and")
            return self.push(x.t.logical_or(yt), x.v | yv, "or")
        y = self.operand(x, ("int", "float"))
        yt, yv = (y.t, y.v) if isinstance(y, Val) else (y, np.asarray(y))
        ints = x.t.dtype.is_int and (yt.dtype.is_int if isinstance(yt, Tensor) else isinstance(yt, int))
        name = self.draw(st.sampled_from(("add", "sub", "rsub", "mul", "div", "pow", "maximum", "minimum", "compare")))
        if name == "mul" and ints and finite_max(x.v) * finite_max(yv) >= 2**20:
            name = "add"
        if name == "pow" and finite_max(yv) > 2:
            name = "sub"
        if name == "compare":
            return self.compare(x, yt, yv, exact=ints)
        xt, xv = x.t, x.v
        if name == "add":
            return self.push(xt + yt, xv + yv, "add")
        if name == "sub":
            return self.push(xt - yt, xv - yv, "sub")
        if name == "rsub":
            return self.push(yt - xt, yv - xv, "rsub")
        if name == "mul":
            return self.push(xt * yt, xv * yv, "mul")
        if name == "maximum":
            return self.push(xt.maximum(yt), np.maximum(xv, yv), "maximum")
        if name == "minimum":
            return self.push(xt.minimum(yt), np.minimum(xv, yv), "minimum")
        if name == "pow":
            return self.push((xt.abs() + 0.5) ** yt, (np.abs(xv) + 0.5) ** yv, "pow")
        if ints:  # C division: truncation toward zero, x / 0 = 0
            return self.push(xt / yt, np_int_div(xv, yv), "int div")
        denominator = yt.abs() + 1 if isinstance(yt, Tensor) else abs(yt) + 1
        return self.push(xt / denominator, xv / (np.abs(yv) + 1), "div")

    def dot(self, x: Val) -> Val:
        """sum(x * y) over random axes: the reference contracts it without forming the product."""
        if x.t.dtype == BOOL:
            return self.cast(x)
        if self.draw(st.booleans()):  # an explicitly broadcast operand, so an axis may be broadcast in both
            x = self.movement(x, "expand")
        y = self.operand(x, ("int", "float"))
        if not isinstance(y, Val):
            y = self.input(self.broadcast_shape(x.t.shape), x.t.dtype)
        if x.t.dtype.is_int and y.t.dtype.is_int and finite_max(x.v) * finite_max(y.v) >= 2**20:
            y = self.push(y.t.cast(F32), y.v.astype(np.float64), "cast f32 for dot")
        prod, prod_v = x.t * y.t, x.v * y.v
        ndim = prod.ndim
        axes = tuple(self.draw(st.lists(st.integers(0, ndim - 1), unique=True, min_size=1, max_size=ndim))) if ndim else ()
        return self.push(prod.sum(axes), prod_v.sum(axes), f"dot {axes}")

    def compare(self, x: Val, yt: Tensor | float | int, yv: np.ndarray, exact: bool) -> Val:
        """A comparison; of floats only where the operands differ clearly (a flip would not be a bug)."""
        gap = np.abs(np.subtract(x.v, yv, dtype=np.float64))
        gap = gap[np.isfinite(gap)]
        if not exact and gap.size and gap.min() < 0.05:
            return self.push(x.t.maximum(yt), np.maximum(x.v, yv), "maximum (for compare)")
        name = self.draw(st.sampled_from(("cmplt", "cmpgt", "eq", "noteq")))
        fn = {"cmplt": np.less, "cmpgt": np.greater, "eq": np.equal, "noteq": np.not_equal}[name]
        return self.push(getattr(x.t, name)(yt), fn(x.v, yv), name)

    def reduce(self, x: Val) -> Val:
        ndim = x.t.ndim
        how = self.draw(st.sampled_from(("none", "int", "list")))
        if how == "none" or ndim == 0:
            axes, np_axes = None, None
        elif how == "int":
            axes = self.draw(st.integers(-ndim, ndim - 1))
            np_axes = axes
        else:
            chosen = self.draw(st.lists(st.integers(0, ndim - 1), unique=True, max_size=ndim))
            axes = [a - ndim if self.draw(st.booleans()) else a for a in chosen]
            np_axes = tuple(chosen)
        reduced = range(ndim) if np_axes is None else {a % ndim for a in np.atleast_1d(np_axes).tolist()}
        keepdim = self.draw(st.booleans())
        name = self.draw(st.sampled_from(("sum", "max", "mean", "var") if x.t.dtype != BOOL else ("sum", "max")))
        v = x.v.astype(np.int64) if x.t.dtype == BOOL and name == "sum" else x.v
        if name == "var":
            correction = self.draw(st.integers(0, 2))
            count = math.prod(x.v.shape[a] for a in reduced)
            if count - correction > 0:
                want = np.var(v, axis=np_axes, ddof=correction, keepdims=keepdim)
            else:  # no degrees of freedom left: NaN
                want = np.full(np.sum(v, axis=np_axes, keepdims=keepdim).shape, np.nan)
            return self.push(x.t.var(axes, keepdim, correction), want, f"var{correction}")
        fn = {"sum": np.sum, "max": np.max, "mean": np.mean}[name]
        return self.push(getattr(x.t, name)(axes, keepdim), fn(v, axis=np_axes, keepdims=keepdim), name)

    def movement(self, x: Val, name: str | None = None) -> Val:
        shape, ndim = x.t.shape, x.t.ndim
        names = ["reshape", "expand", "pad"] + (["permute"] if ndim >= 1 else []) + (["transpose"] if ndim >= 2 else [])
        name = name or self.draw(st.sampled_from(names))
        if name == "reshape":
            target = self.factor(math.prod(shape))
            arg = list(target)
            if target and self.draw(st.booleans()):
                arg[self.draw(st.integers(0, len(arg) - 1))] = -1
            return self.push(x.t.reshape(*arg), x.v.reshape(target), f"reshape {arg}")
        if name == "permute":
            axes = self.draw(st.permutations(range(ndim)))
            shown = [a - ndim if self.draw(st.booleans()) else a for a in axes]
            return self.push(x.t.permute(*shown), np.transpose(x.v, axes), f"permute {shown}")
        if name == "transpose":
            d0, d1 = self.draw(st.integers(-ndim, ndim - 1)), self.draw(st.integers(-ndim, ndim - 1))
            return self.push(x.t.transpose(d0, d1), np.swapaxes(x.v, d0, d1), f"transpose {d0} {d1}")
        if name == "expand":
            lead = self.shape(self.draw(st.integers(0, 4 - ndim)))
            target = lead + tuple(self.draw(dims) if d == 1 else d for d in shape)
            return self.push(x.t.expand(*target), np.broadcast_to(x.v, target), f"expand {target}")
        padding = []
        for d in shape:
            lo, hi = self.draw(st.integers(-3, 2)), self.draw(st.integers(-3, 2))
            padding.append((lo, max(hi, 1 - d - lo)))  # keep every axis non-empty
        padding = tuple(padding)
        if x.t.dtype == BOOL:
            value, fill = self.draw(st.sampled_from(((0.0, False), (1, True), (True, True))))
        elif x.t.dtype.is_int:
            value = fill = self.draw(st.integers(-3, 3))
        else:
            value = fill = self.draw(st.sampled_from((0.0, 1.0, -0.5)))
        return self.push(x.t.pad(padding, value), np_pad(x.v, padding, fill), f"pad {padding} {value}")

    def factor(self, numel: int) -> tuple[int, ...]:
        """A random shape of rank <= 4 with ``numel`` elements."""
        primes, n, p = [], numel, 2
        while n > 1:
            while n % p == 0:
                primes.append(p)
                n //= p
            p += 1
        rank = self.draw(st.integers(1 if primes else 0, 4))
        out = [1] * rank
        for prime in primes:
            out[self.draw(st.integers(0, rank - 1))] *= prime
        return tuple(out)

    def cast(self, x: Val) -> Val:
        if x.t.dtype.is_float:
            targets = (F16, F32, F64)
        elif x.t.dtype == BOOL:
            targets = (F32, I32, F16)
        else:
            targets = (F32, F64, I64, I32)
        dtype = self.draw(st.sampled_from(targets))
        return self.push(x.t.cast(dtype), round_to(x.v, dtype), f"cast {dtype}")

    def matmul(self, x: Val) -> Val:
        if x.t.dtype == BOOL:
            return self.cast(x)
        if x.t.ndim < 2:
            x = self.push(x.t.reshape(1, -1), x.v.reshape(1, -1), "reshape for matmul")
        dtype = x.t.dtype if x.t.dtype.is_int else self.draw(st.sampled_from((x.t.dtype, F32)))
        batch = self.broadcast_shape(x.t.shape[:-2])[-2:]  # the result has rank <= 4
        if self.draw(st.booleans()):
            w = self.input(batch + (x.t.shape[-1], self.draw(dims)), dtype)
            return self.push(x.t @ w.t, np.matmul(x.v, w.v), "matmul")
        w = self.input(batch + (self.draw(dims), x.t.shape[-2]), dtype)
        return self.push(w.t @ x.t, np.matmul(w.v, x.v), "rmatmul")

    def nn(self, x: Val) -> Val:
        if x.t.dtype == BOOL:
            return self.cast(x)
        if x.t.ndim == 0:
            x = self.push(x.t.reshape(1), x.v.reshape(1), "reshape for nn")
        ndim = x.t.ndim
        name = self.draw(st.sampled_from(("softmax", "log_softmax", "layernorm", "rmsnorm", "attention", "conv2d")))
        v = x.v.astype(np.float64)
        if name in ("softmax", "log_softmax"):
            axis = self.draw(st.integers(-ndim, ndim - 1))
            s = np_softmax(v, axis)
            t = x.t.softmax(axis) if name == "softmax" else x.t.log_softmax(axis)
            return self.push(t, s if name == "softmax" else np.log(s), f"{name} {axis}")
        if name in ("layernorm", "rmsnorm"):
            weighted = self.draw(st.booleans())
            axis = -1 if weighted else self.draw(st.integers(-ndim, ndim - 1))
            weight = self.input((x.t.shape[-1],), x.t.dtype if x.t.dtype.is_float else F32) if weighted else None
            eps = self.draw(st.sampled_from((1e-5, 0.1, 0.5)))
            if name == "layernorm":
                bias = self.input((x.t.shape[-1],), F32) if weighted and self.draw(st.booleans()) else None
                d = v - v.mean(axis, keepdims=True)
                spread = (d * d).mean(axis, keepdims=True)
                if spread.min() < 0.05:  # ill-conditioned: normalising rounding noise
                    eps = 0.5
                want = d / np.sqrt(spread + eps)
                t = x.t.layernorm(weight.t if weight else None, bias.t if bias else None, axis=axis, eps=eps)
            else:
                bias = None
                ms = (v * v).mean(axis, keepdims=True)
                if ms.min() < 0.05:
                    eps = 0.5
                want = v / np.sqrt(ms + eps)
                t = x.t.rmsnorm(weight.t if weight else None, axis=axis, eps=eps)
            want = want * weight.v if weight else want
            want = want + bias.v if bias else want
            return self.push(t, want, f"{name} axis={axis} eps={eps} weight={weighted} bias={bias is not None}")
        if name == "attention":
            if ndim < 2:
                x = self.push(x.t.reshape(1, -1), x.v.reshape(1, -1), "reshape for attention")
                v = x.v.astype(np.float64)
            dtype = x.t.dtype if x.t.dtype.is_float else F32
            seq, dv = self.draw(dims), self.draw(dims)
            k = self.input(x.t.shape[:-2] + (seq, x.t.shape[-1]), dtype)
            val = self.input((seq, dv), dtype)
            scale = self.draw(st.sampled_from((None, 0.5, 1.0)))
            scores = v @ np.swapaxes(k.v, -1, -2) * (1 / math.sqrt(v.shape[-1]) if scale is None else scale)
            return self.push(x.t.attention(k.t, val.t, scale), np_softmax(scores, -1) @ val.v, f"attention {scale}")
        if ndim != 4:
            x = self.push(x.t.reshape(1, 1, 1, -1), x.v.reshape(1, 1, 1, -1), "reshape for conv2d")
            v = x.v.astype(np.float64)
        (_n, c, h, wd), padding = x.t.shape, self.draw(st.integers(0, 1))
        kh, kw = self.draw(st.integers(1, h + 2 * padding)), self.draw(st.integers(1, wd + 2 * padding))
        stride = self.draw(st.integers(1, 3))
        w = self.input((self.draw(dims), c, kh, kw), x.t.dtype if x.t.dtype.is_float else F32)
        want = np_conv2d(v, w.v, stride, padding)
        if self.draw(st.booleans()):
            b = self.input((w.t.shape[0],), w.t.dtype)
            t = x.t.conv2d(w.t, b.t, stride=stride, padding=padding)
            want = want + b.v[:, None, None]
        else:
            t = x.t.conv2d(w.t, stride=stride, padding=padding)
        return self.push(t, want, f"conv2d k={kh}x{kw} stride={stride} padding={padding}")


STEPS = ("unary", "unary", "binary", "binary", "reduce", "dot", "movement", "movement", "cast", "matmul", "nn")


@st.composite
def programs(draw: Callable, max_steps: int = 12) -> Built:
    b = Builder(draw)
    dtype = draw(st.sampled_from((F32, F32, F32, F32, F64, F16, I32, BOOL)))
    x = b.input(b.shape(), dtype)
    with np.errstate(all="ignore"):
        for _ in range(draw(st.integers(2, max_steps))):
            if draw(st.integers(0, 3)) == 0:  # now and then, continue from an earlier value
                x = draw(st.sampled_from(b.pool))
            x = b.squash(getattr(b, draw(st.sampled_from(STEPS)))(x))
    computed = [p for p in b.pool if p.t.op != "input"]  # every step computes at least one value
    outputs = [computed[-1]]
    for p in draw(st.lists(st.sampled_from(computed), max_size=2)):
        if all(p.t is not q.t for q in outputs):
            outputs.append(p)
    named = {f"out{i}": p for i, p in enumerate(outputs)}
    program = from_tensors({n: p.t for n, p in named.items()}, name="random", description=" -> ".join(b.steps))
    return Built(program, {n: p.v for n, p in named.items()}, b.steps)


# -- properties ------------------------------------------------------------------------------


def check_against_numpy(built: Built) -> None:
    got = engine.run_reference(built.program)
    rtol, atol = built.tolerance()
    types = built.program.types()
    for name, want in built.expected.items():
        out = got[name]
        shape, dtype = types[name]
        assert out.shape == shape == want.shape, (name, out.shape, shape, want.shape)
        assert out.dtype == dtype.numpy, (name, out.dtype, dtype)
        if dtype.is_float:
            np.testing.assert_allclose(out.astype(np.float64), want, rtol=rtol, atol=atol, equal_nan=True, err_msg=name)
        else:
            np.testing.assert_array_equal(out, want.astype(dtype.numpy), err_msg=name)


def check_lowering(program: Program) -> None:
    graph = program.lower()
    types = program.types()
    assert set(graph.outputs) == set(program.outputs)
    for i, node in enumerate(graph.nodes):
        assert node.op in PRIMITIVE_OPS, node.op
        assert all(0 <= a < i for a in node.args), (i, node)
        if node.op == "leaf":
            assert not node.args and (node.shape, node.dtype) == types[node.param]
            continue
        inferred = infer_primitive(node.op, [graph.nodes[a] for a in node.args], node.param, node.dtype)
        assert inferred == (node.shape, node.dtype), (i, node, inferred)
    for name, index in graph.outputs.items():
        assert (graph.nodes[index].shape, graph.nodes[index].dtype) == types[name]


@settings(max_examples=200, deadline=None, derandomize=True)
@given(programs())
def test_reference_matches_numpy(built: Built):
    check_against_numpy(built)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(programs())
def test_json_round_trip(built: Built):
    text = built.program.dumps()
    loaded = engine.loads(text)
    assert loaded == built.program
    assert loaded.dumps() == text


@settings(max_examples=200, deadline=None, derandomize=True)
@given(programs())
def test_lowering_yields_well_typed_primitives(built: Built):
    check_lowering(built.program)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(programs(max_steps=20))
def test_long_chains(built: Built):
    """Fewer, longer programs: all three properties at once."""
    assert engine.loads(built.program.dumps()) == built.program
    check_lowering(built.program)
    check_against_numpy(built)

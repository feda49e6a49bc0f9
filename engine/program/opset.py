"""The op set of graph.json and the Tensor API, and how each op lowers to primitives.

Each op is an ``OpSpec``: its arity, its typed attributes, and a ``lower``
function ``lower(em, *args, **attrs)`` written with Tensor methods on lowering
handles (composite ops) or with ``em.emit`` (ops that map onto one primitive).
``lower`` is also where user mistakes are caught: it raises a located
``GraphError`` subclass, so validation and lowering cannot disagree.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from engine import units
from engine.errors import DTypeError, GraphError, ShapeError
from engine.program import attrs as attr_types
from engine.program.attrs import Attr
from engine.program.dtypes import DType, promote
from engine.program.primitives import UNARY_OPS, Shape


@dataclass(frozen=True)
class OpSpec:
    """One op: ``arity`` is (fewest, most) tensor arguments."""

    name: str
    lower: Callable[..., Any]
    arity: tuple[int, int]
    attrs: Mapping[str, Attr] = field(default_factory=dict)
    summary: str = ""

    def complete(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """Parse the given attributes and add defaults; errors are located at ``attrs.NAME``."""
        for name in given:
            if name not in self.attrs:
                known = ", ".join(self.attrs) or "none"
                raise GraphError(f"op {self.name!r} has no attribute {name!r} (its attributes: {known})", f"attrs.{name}")
        out = {}
        for name, attr in self.attrs.items():
            if name in given:
                try:
                    out[name] = attr.parse(given[name])
                except GraphError as e:
                    raise e.within(f"attrs.{name}") from None
            elif attr.required:
                raise GraphError(f"op {self.name!r} needs the attribute {name!r}", "attrs")
            else:
                out[name] = attr.default
        return out


# -- shape helpers -------------------------------------------------------------------


def normalize_axis(axis: int, ndim: int, attr: str) -> int:
    """``axis`` as a non-negative index, or a ShapeError located at ``attrs.ATTR``."""
    if not -ndim <= axis < ndim:
        raise ShapeError(f"axis {axis} is out of range for a tensor of rank {ndim}", f"attrs.{attr}")
    return axis % ndim


def normalize_axes(axes: tuple[int, ...] | None, ndim: int, attr: str = "axes") -> tuple[int, ...]:
    """Sorted, non-negative, distinct axes (``None`` means all)."""
    if axes is None:
        return tuple(range(ndim))
    out = tuple(sorted({normalize_axis(a, ndim, attr) for a in axes}))
    if len(out) != len(axes):
        raise ShapeError(f"axes {list(axes)} name the same axis twice", f"attrs.{attr}")
    return out


def broadcast_shapes(a: Shape, b: Shape) -> Shape:
    """numpy's broadcasting of two shapes, or a ShapeError naming both."""
    rank = max(len(a), len(b))
    pa, pb = (1,) * (rank - len(a)) + a, (1,) * (rank - len(b)) + b
    out = []
    for x, y in zip(pa, pb):
        if x != y and 1 not in (x, y):
            raise ShapeError(f"shapes {units.shape(a)} and {units.shape(b)} cannot be broadcast together")
        out.append(y if x == 1 else x)
    return tuple(out)


def _float(x):
    return x if x.dtype.is_float else x.cast(DType.F32)


def _wide(x):
    """``x`` in the dtype its sums accumulate in: f32 for f16 (as torch does: 1000 halves of 100 overflow f16
    before a mean scales them, and so does ``d * d`` of one outlier), f32 for integers and bool, else its own."""
    return x.cast(DType.F32) if x.dtype in (DType.F16, DType.BOOL) or x.dtype.is_int else x


def _narrow(y, dtype: DType):
    """A result computed by ``_wide`` back in f16 when that was the input's dtype."""
    return y.cast(DType.F16) if dtype == DType.F16 else y


def _int_bounds(dtype: DType) -> tuple[int, int]:
    """The smallest and largest value of an integer dtype."""
    half = 2 ** (8 * dtype.itemsize - 1)
    return -half, half - 1


def _forbid_bool(op: str, *xs) -> None:
    if any(x.dtype == DType.BOOL for x in xs):
        raise DTypeError(f"{op} does not accept bool tensors (cast to i32 or f32 first)")


# -- elementwise ---------------------------------------------------------------------

_FLOAT_ONLY = {"exp2", "log2", "sin", "cos", "sqrt", "recip"}


def _lower_prim_unary(op: str) -> Callable[..., Any]:
    def lower(em, x):
        if op == "not":
            if x.dtype != DType.BOOL:
                raise DTypeError(f"not needs a bool tensor, got {x.dtype}")
        else:
            _forbid_bool(op, x)
        if op in _FLOAT_ONLY:
            x = _float(x)
        return em.emit(op, (x,))

    return lower


def _lower_binary(prim: str, kind: str) -> Callable[..., Any]:
    def lower(em, a, b):
        shape = broadcast_shapes(a.shape, b.shape)
        a, b = a.expand(shape), b.expand(shape)
        dtype = promote(a.dtype, b.dtype)
        if kind == "logic" and dtype != DType.BOOL:
            raise DTypeError(f"{prim} needs bool tensors, got {a.dtype} and {b.dtype}")
        if kind == "arith" and dtype == DType.BOOL:
            dtype = DType.I32
        return em.emit(prim, (a.cast(dtype), b.cast(dtype)))

    return lower


def _lower_minimum(em, a, b):
    """-max(-a, -b) for floats; integers select by comparison, as negating the smallest integer wraps to itself."""
    _forbid_bool("minimum", a, b)
    if not promote(a.dtype, b.dtype).is_int:
        return -((-a).maximum(-b))
    take_a = a.cmplt(b)
    return a * take_a.cast(a.dtype) + b * take_a.logical_not().cast(b.dtype)


def _float_composite(op: str, lower: Callable[..., Any]) -> Callable[..., Any]:
    """A float-only composite: integers compute in f32, bool is refused as by the primitives it lowers to."""
    def checked(em, x):
        _forbid_bool(op, x)
        return lower(em, x)

    return checked


def _lower_exp(em, x):
    return (_float(x) * (1 / math.log(2))).exp2()


def _lower_log(em, x):
    return _float(x).log2() * math.log(2)


def _lower_abs(em, x):
    """relu(x) + relu(-x) for floats (+0 for -0); max(x, -x) for integers, which keeps abs(INT_MIN) = INT_MIN
    as numpy, torch and C do."""
    _forbid_bool("abs", x)
    return x.maximum(-x) if x.dtype.is_int else x.relu() + (-x).relu()


def _lower_sigmoid(em, x):
    return ((-_float(x)).exp() + 1).recip()


TANH_SERIES = 0.05
"""Below this |x|, tanh is its Taylor series: ``2 * sigmoid(2x) - 1`` cancels to 0 near zero (tanh(1e-8) = 0)."""
_TANH_TAYLOR = (1.0, -1 / 3, 2 / 15, -17 / 315, 62 / 2835)  # error < 1e-15 relative below TANH_SERIES


def _lower_tanh(em, x):
    """``2 * sigmoid(2x) - 1``, blended with the Taylor series near zero to keep relative accuracy.

    The blend is by a 0/1 mask, so the series sees x clamped to the small range (finite there, so
    ``series * 0`` is 0 for big or infinite x), and the sigmoid form is finite wherever the mask is 1.
    """
    x = _float(x)
    small = x.abs().cmplt(TANH_SERIES).cast(x.dtype)
    c = x.minimum(TANH_SERIES).maximum(-TANH_SERIES)
    c2 = c * c
    poly = x.const(_TANH_TAYLOR[-1], x.dtype)
    for coefficient in reversed(_TANH_TAYLOR[:-1]):
        poly = poly * c2 + coefficient
    return (c * poly) * small + ((x * 2).sigmoid() * 2 - 1) * (1 - small)


def _lower_gelu(em, x):
    """The tanh approximation of GELU (as in GPT-2 and PyTorch's approximate='tanh'), as ``x * sigmoid(2u)``:
    ``0.5 * (1 + tanh(u))`` is that sigmoid, which keeps relative accuracy in the negative tail where
    ``1 + tanh(u)`` cancels."""
    x = _float(x)
    return x * ((x + x * x * x * 0.044715) * (2 * math.sqrt(2 / math.pi))).sigmoid()


def _lower_silu(em, x):
    return _float(x) * x.sigmoid()


# -- movement and constants -----------------------------------------------------------


def _lower_const(em, value, dtype, shape):
    if any(d < 0 for d in shape):
        raise ShapeError(f"const shape {units.shape(shape)} has a negative dimension", "attrs.shape")
    if dtype == DType.BOOL and not isinstance(value, bool):
        raise DTypeError(f"a bool const needs true or false, got {value!r}", "attrs.value")
    if dtype.is_int and isinstance(value, float) and not value.is_integer():
        raise DTypeError(f"an {dtype} const needs an integer value, got {value!r}", "attrs.value")
    try:
        c = em.const(value, dtype)
    except DTypeError as e:
        raise e.within("attrs.value") from None
    return c.expand(shape) if shape else c


def _lower_reshape(em, x, shape):
    numel = math.prod(x.shape)
    if shape.count(-1) > 1:
        raise ShapeError(f"reshape to {units.shape(shape)}: at most one dimension may be -1", "attrs.shape")
    if -1 in shape:
        known = math.prod(d for d in shape if d != -1)
        if known == 0 or numel % known:
            raise ShapeError(f"cannot reshape {units.shape(x.shape)} ({numel} elements) to {units.shape(shape)}", "attrs.shape")
        shape = tuple(numel // known if d == -1 else d for d in shape)
    if math.prod(shape) != numel:
        raise ShapeError(
            f"cannot reshape {units.shape(x.shape)} ({numel} elements) to {units.shape(shape)} ({math.prod(shape)} elements)",
            "attrs.shape",
        )
    return x if shape == x.shape else em.emit("reshape", (x,), shape)


def _lower_permute(em, x, axes):
    normalized = tuple(normalize_axis(a, x.ndim, "axes") for a in axes)
    if sorted(normalized) != list(range(x.ndim)):
        raise ShapeError(f"axes {list(axes)} are not a permutation of the {x.ndim} axes of {units.shape(x.shape)}", "attrs.axes")
    return em.emit("permute", (x,), normalized)


def _lower_transpose(em, x, dim0, dim1):
    if x.ndim < 2:
        raise ShapeError(f"transpose needs a tensor of rank >= 2, got shape {units.shape(x.shape)}")
    order = list(range(x.ndim))
    i, j = normalize_axis(dim0, x.ndim, "dim0"), normalize_axis(dim1, x.ndim, "dim1")
    order[i], order[j] = order[j], order[i]
    return x.permute(*order)


def _lower_expand(em, x, shape):
    if any(d < 0 for d in shape):
        raise ShapeError(f"cannot expand {units.shape(x.shape)} to {units.shape(shape)}: sizes must be >= 0", "attrs.shape")
    if len(shape) < x.ndim:
        raise ShapeError(f"cannot expand {units.shape(x.shape)} to {units.shape(shape)}: the target has fewer axes", "attrs.shape")
    padded = (1,) * (len(shape) - x.ndim) + x.shape
    for axis, (have, want) in enumerate(zip(padded, shape)):
        if have not in (1, want):
            raise ShapeError(
                f"cannot expand {units.shape(x.shape)} to {units.shape(shape)}: axis {axis} has size {have}, not 1 or {want}",
                "attrs.shape",
            )
    if shape == x.shape:
        return x
    x = x.reshape(padded)
    return x if shape == padded else em.emit("expand", (x,), shape)


def _lower_pad(em, x, padding, value):
    if len(padding) != x.ndim:
        raise ShapeError(f"padding has {len(padding)} pairs for a tensor of rank {x.ndim}", "attrs.padding")
    shape = tuple(d + lo + hi for d, (lo, hi) in zip(x.shape, padding))
    if any(d < 0 for d in shape):
        raise ShapeError(f"padding {[list(p) for p in padding]} shrinks {units.shape(x.shape)} below zero", "attrs.padding")
    if x.dtype.is_int:
        low, high = _int_bounds(x.dtype)
        if (isinstance(value, float) and not value.is_integer()) or not low <= value <= high:
            raise DTypeError(f"pad value {value!r} does not fit dtype {x.dtype}", "attrs.value")
    try:
        fill = bool(value) if x.dtype == DType.BOOL else x.dtype.scalar(int(value) if x.dtype.is_int else float(value))
    except (OverflowError, DTypeError):
        raise DTypeError(f"pad value {value!r} does not fit dtype {x.dtype}", "attrs.value") from None
    return x if all(p == (0, 0) for p in padding) else em.emit("pad", (x,), (padding, fill))


def _lower_cast(em, x, dtype):
    return x if x.dtype == dtype else em.emit("cast", (x,), dtype)


# -- reductions ----------------------------------------------------------------------


def _keep(x, reduced, axes):
    """Reshape a reduced tensor so the reduced axes come back with size 1."""
    return reduced.reshape(tuple(1 if i in axes else d for i, d in enumerate(x.shape)))


def _lower_reduce(prim: str) -> Callable[..., Any]:
    def lower(em, x, axes, keepdim):
        axes = normalize_axes(axes, x.ndim)
        if prim == "reduce_sum" and x.dtype == DType.BOOL:
            x = x.cast(DType.I32)
        if prim == "reduce_max" and any(x.shape[a] == 0 for a in axes):
            raise ShapeError(f"max over an empty axis of {units.shape(x.shape)} has no value", "attrs.axes")
        if not axes:
            return x
        if prim == "reduce_sum" and x.dtype == DType.F16:  # accumulated in f32 (see _wide)
            return x.cast(DType.F32).sum(axes, keepdim).cast(DType.F16)
        out = em.emit(prim, (x,), axes)
        return _keep(x, out, axes) if keepdim else out

    return lower


def _lower_mean(em, x, axes, keepdim):
    """The sum times 1/count; integers are summed exactly in i64 (an f32 sum of large i64 values rounds),
    f16 in f32; the mean of integers is f32."""
    axes = normalize_axes(axes, x.ndim)
    count = math.prod(x.shape[a] for a in axes)
    scale = 1 / count if count else math.nan
    if x.dtype.is_int or x.dtype == DType.BOOL:
        return x.cast(DType.I64).sum(axes, keepdim).cast(DType.F32) * scale
    return _narrow(_wide(x).sum(axes, keepdim) * scale, x.dtype)


def _lower_var(em, x, axes, keepdim, correction):
    axes = normalize_axes(axes, x.ndim)
    count = math.prod(x.shape[a] for a in axes) - correction
    w = _wide(x)
    d = w - w.mean(axes, keepdim=True)
    return _narrow((d * d).sum(axes, keepdim) * (1 / count if count > 0 else math.nan), x.dtype)


# -- neural-network ops ----------------------------------------------------------------


def _lower_matmul(em, a, b):
    """numpy's matmul: a rank-1 ``a`` is a row [1, K] and a rank-1 ``b`` a column [K, 1], whose added axis the
    result drops again."""
    if a.ndim == 0 or b.ndim == 0:
        raise ShapeError(f"matmul needs tensors of rank >= 1, got {units.shape(a.shape)} @ {units.shape(b.shape)}")
    if a.ndim == 1 or b.ndim == 1:
        row, column = a.ndim == 1, b.ndim == 1
        if a.shape[-1] != b.shape[0 if column else -2]:
            raise ShapeError(f"matmul inner dimensions differ: {units.shape(a.shape)} @ {units.shape(b.shape)}")
        out = _lower_matmul(em, a.reshape(1, *a.shape) if row else a, b.reshape(*b.shape, 1) if column else b)
        drop = {out.ndim - 2} if row else set()
        drop |= {out.ndim - 1} if column else set()
        return out.reshape(tuple(d for i, d in enumerate(out.shape) if i not in drop))
    (m, k), (k2, n) = a.shape[-2:], b.shape[-2:]
    if k != k2:
        raise ShapeError(
            f"matmul inner dimensions differ: {units.shape(a.shape)} @ {units.shape(b.shape)} ({k} != {k2})"
        )
    _forbid_bool("matmul", a, b)
    try:
        batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ShapeError:
        raise ShapeError(f"matmul batch dimensions do not broadcast: {units.shape(a.shape)} @ {units.shape(b.shape)}") from None
    dtype = promote(a.dtype, b.dtype)
    wide = DType.F32 if dtype == DType.F16 else dtype  # f16 products are exact in f32, and summed there
    a = a.cast(wide).expand(batch + (m, k)).reshape(batch + (m, 1, k)).expand(batch + (m, n, k))
    b = b.cast(wide).expand(batch + (k, n)).transpose().reshape(batch + (1, n, k)).expand(batch + (m, n, k))
    return _narrow((a * b).sum(-1), dtype)


def _lower_softmax(em, x, axis):
    axis = normalize_axis(axis, x.ndim, "axis")
    e = (_float(x) - x.max(axis, keepdim=True)).exp()
    return e / e.sum(axis, keepdim=True)


def _lower_log_softmax(em, x, axis):
    axis = normalize_axis(axis, x.ndim, "axis")
    shifted = _float(x) - x.max(axis, keepdim=True)
    return shifted - shifted.exp().sum(axis, keepdim=True).log()


def _affine(y, weight, bias):
    if weight is not None:
        y = y * weight
    return y if bias is None else y + bias


def _lower_layernorm(em, x, weight=None, bias=None, *, axis, eps):
    """Normalised in f32 for f16 input (``d * d`` of an outlier overflows f16), then the affine part."""
    axis = normalize_axis(axis, x.ndim, "axis")
    w = _wide(x)
    d = w - w.mean(axis, keepdim=True)
    y = d * ((d * d).mean(axis, keepdim=True) + eps).sqrt().recip()
    return _affine(_narrow(y, x.dtype), weight, bias)


def _lower_rmsnorm(em, x, weight=None, *, axis, eps):
    axis = normalize_axis(axis, x.ndim, "axis")
    w = _wide(x)
    return _affine(_narrow(w * ((w * w).mean(axis, keepdim=True) + eps).sqrt().recip(), x.dtype), weight, None)


def _windows(x, axis: int, k: int, stride: int):
    """Replace axis ``axis`` (size L) by two axes (k, OL): ``out[.., j, o, ..] = x[.., o*stride + j, ..]``.

    Movement ops only (tinygrad's pooling trick): repeat the axis k times, pad
    the flattened copies by one element each so row j starts j places later,
    then keep every ``stride``-th column.
    """
    pre, size, post = x.shape[:axis], x.shape[axis], x.shape[axis + 1 :]
    out = (size - k) // stride + 1
    none = ((0, 0),) * len(pre)
    after = ((0, 0),) * len(post)
    x = x.reshape(pre + (1, size) + post).expand(pre + (k, size) + post).reshape(pre + (k * size,) + post)
    x = x.pad(none + ((0, k),) + after).reshape(pre + (k, size + 1) + post)
    x = x.pad(none + ((0, 0), (0, out * stride - size - 1)) + after)
    x = x.reshape(pre + (k, out, stride) + post).pad(none + ((0, 0), (0, 0), (0, 1 - stride)) + after)
    return x.reshape(pre + (k, out) + post)


def _every(x, axis: int, step: int):
    """Keep every ``step``-th element along ``axis`` (from the first): pad to a multiple, split, keep column 0."""
    if step == 1:
        return x
    pre, size, post = x.shape[:axis], x.shape[axis], x.shape[axis + 1 :]
    count = -(-size // step)
    none, after = ((0, 0),) * len(pre), ((0, 0),) * len(post)
    x = x.pad(none + ((0, count * step - size),) + after).reshape(pre + (count, step) + post)
    return x.pad(none + ((0, 0), (0, 1 - step)) + after).reshape(pre + (count,) + post)


def _dilated_windows(x, axis: int, k: int, stride: int, dilation: int):
    """``_windows`` whose k taps are ``dilation`` apart: windows of the span, then every dilation-th tap."""
    if dilation == 1:
        return _windows(x, axis, k, stride)
    return _every(_windows(x, axis, (k - 1) * dilation + 1, stride), axis, dilation)


def _pair(v: int | tuple[int, int]) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else v


def _lower_conv2d(em, x, w, bias=None, *, stride, padding, dilation, groups):
    if x.ndim != 4 or w.ndim != 4:
        raise ShapeError(f"conv2d needs x [N, C, H, W] and weight [O, C, KH, KW], got {units.shape(x.shape)} and {units.shape(w.shape)}")
    (sh, sw), (dh, dw) = _pair(stride), _pair(dilation)
    if min(sh, sw) < 1:
        raise ShapeError(f"stride must be >= 1, got {stride}", "attrs.stride")
    if padding < 0:
        raise ShapeError(f"padding must be >= 0, got {padding}", "attrs.padding")
    if min(dh, dw) < 1:
        raise ShapeError(f"dilation must be >= 1, got {dilation}", "attrs.dilation")
    (n, c, h, wd), (o, cg, kh, kw) = x.shape, w.shape
    if groups < 1 or c % groups or o % groups:
        raise ShapeError(f"groups={groups} must be >= 1 and divide the {c} input and {o} output channels", "attrs.groups")
    if c != cg * groups:
        raise ShapeError(f"conv2d channels differ: x {units.shape(x.shape)} has {c}, weight {units.shape(w.shape)} has {cg}"
                         + (f" per group ({groups} groups)" if groups > 1 else ""))
    span_h, span_w = (kh - 1) * dh + 1, (kw - 1) * dw + 1
    if h + 2 * padding < span_h or wd + 2 * padding < span_w:
        raise ShapeError(f"conv2d kernel {span_h}x{span_w} is larger than the padded input {h + 2 * padding}x{wd + 2 * padding}")
    if bias is not None and bias.shape != (o,):
        raise ShapeError(f"conv2d bias must have shape [{o}], got {units.shape(bias.shape)}")
    _forbid_bool("conv2d", x, w)
    dtype = promote(x.dtype, w.dtype)
    wide = DType.F32 if dtype == DType.F16 else dtype  # as in matmul
    x = x.cast(wide).pad(((0, 0), (0, 0), (padding, padding), (padding, padding)))
    win = _dilated_windows(_dilated_windows(x, 2, kh, sh, dh), 4, kw, sw, dw)  # [N, C, KH, OH, KW, OW]
    oh, ow = win.shape[3], win.shape[5]
    if groups == 1:
        full = (n, o, oh, ow, c, kh, kw)
        patches = win.permute(0, 3, 5, 1, 2, 4).reshape(n, 1, oh, ow, c, kh, kw).expand(full)
        kernel = w.cast(wide).reshape(1, o, 1, 1, c, kh, kw).expand(full)
        out = (patches * kernel).sum((4, 5, 6))
    else:  # an extra group axis: output channel g*og+j reads input channels g*cg .. (g+1)*cg
        og = o // groups
        full = (n, groups, og, oh, ow, cg, kh, kw)
        patches = win.permute(0, 3, 5, 1, 2, 4).reshape(n, 1, oh, ow, groups, cg, kh, kw)
        patches = patches.permute(0, 4, 1, 2, 3, 5, 6, 7).expand(full)
        kernel = w.cast(wide).reshape(1, groups, og, 1, 1, cg, kh, kw).expand(full)
        out = (patches * kernel).sum((5, 6, 7)).reshape(n, o, oh, ow)
    out = _narrow(out, dtype)
    return out if bias is None else out + bias.reshape(1, o, 1, 1)


def _lower_attention(em, q, k, v, *, scale):
    if min(q.ndim, k.ndim, v.ndim) < 2:
        raise ShapeError(f"attention needs q, k, v of rank >= 2, got {units.shape(q.shape)}, {units.shape(k.shape)}, {units.shape(v.shape)}")
    if q.shape[-1] != k.shape[-1]:
        raise ShapeError(f"attention: q {units.shape(q.shape)} and k {units.shape(k.shape)} differ in the last axis")
    if k.shape[-2] != v.shape[-2]:
        raise ShapeError(f"attention: k {units.shape(k.shape)} and v {units.shape(v.shape)} differ in the sequence axis (-2)")
    try:
        broadcast_shapes(broadcast_shapes(q.shape[:-2], k.shape[:-2]), v.shape[:-2])
    except ShapeError:
        raise ShapeError(
            f"attention: the batch axes of q {units.shape(q.shape)}, k {units.shape(k.shape)} and v {units.shape(v.shape)} do not broadcast"
        ) from None
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    return ((q @ k.transpose()) * scale).softmax(-1) @ v


# -- ops for imported models: joining, slicing, indexing, selection, erf, pooling ------------


def _lower_concat(em, *xs, axis):
    """Each part padded with zeros to the full length at its offset, then added (or-ed for bool)."""
    first = xs[0]
    axis = normalize_axis(axis, first.ndim, "axis")
    for k, x in enumerate(xs[1:], 1):
        if x.ndim != first.ndim or any(a != b for i, (a, b) in enumerate(zip(x.shape, first.shape)) if i != axis):
            raise ShapeError(f"concat along axis {axis}: args[{k}] has shape {units.shape(x.shape)}, args[0] {units.shape(first.shape)} "
                             "(all other axes must agree)")
    dtype = functools.reduce(promote, (x.dtype for x in xs))
    total = sum(x.shape[axis] for x in xs)
    out, offset = None, 0
    for x in xs:
        size = x.shape[axis]
        part = x.cast(dtype).pad(tuple((offset, total - offset - size) if i == axis else (0, 0) for i in range(x.ndim)))
        out = part if out is None else (out.logical_or(part) if dtype == DType.BOOL else out + part)
        offset += size
    return out


def _lower_slice(em, x, starts, ends, axes, steps):
    """Python slicing per axis (positive steps): shrink with a negative pad, then keep every step-th element."""
    axes = tuple(range(len(starts))) if axes is None else axes
    steps = (1,) * len(starts) if steps is None else steps
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ShapeError(f"slice: starts, ends, axes and steps differ in length ({len(starts)}, {len(ends)}, "
                         f"{len(axes)}, {len(steps)})", "attrs")
    seen = set()
    for axis, start, end, step in zip(axes, starts, ends, steps):
        a = normalize_axis(axis, x.ndim, "axes")
        if a in seen:
            raise ShapeError(f"slice names axis {a} twice", "attrs.axes")
        seen.add(a)
        if step < 1:
            raise ShapeError(f"slice steps must be >= 1, got {step}", "attrs.steps")
        size = x.shape[a]
        lo, hi, _ = slice(start, end, step).indices(size)
        count = len(range(lo, hi, step))
        keep = ((-lo, (count - 1) * step + 1 + lo - size) if count else (-size, 0))
        x = _every(x.pad(tuple(keep if i == a else (0, 0) for i in range(x.ndim))), a, step if count else 1)
    return x


def _arange(em, n: int):
    """[0, 1, .., n-1] as i32 from movement ops and a sum (there is no iota primitive):
    window j of n ones behind n-1 zeros holds o+1 ones at position o."""
    ones = em.const(1, DType.I32).reshape(1).expand(n).pad(((n - 1, 0),))
    return _windows(ones, 0, n, 1).sum(0) - 1


def _select(c, x):
    """``x`` where the bool ``c`` holds, else 0, without 0 * inf = NaN for floats:
    clamp the positive and negative parts of x to a bound that is +inf where c holds and 0 elsewhere."""
    if x.dtype == DType.BOOL:
        return c.logical_and(x)
    if not x.dtype.is_float:
        return x * c.cast(x.dtype)
    bound = (1 - c.cast(x.dtype)).recip() - 1  # recip(0) = inf where c holds, recip(1) - 1 = 0 elsewhere

    def clamp(part):  # min(part, bound), from maximum: part >= 0
        return -((-part).maximum(-bound))

    return clamp(x.relu()) - clamp((-x).relu())


def _lower_where(em, c, a, b):
    if c.dtype != DType.BOOL:
        raise DTypeError(f"where needs a bool condition, got {c.dtype}")
    shape = broadcast_shapes(broadcast_shapes(c.shape, a.shape), b.shape)
    dtype = promote(a.dtype, b.dtype)
    c, a, b = c.expand(shape), a.cast(dtype).expand(shape), b.cast(dtype).expand(shape)
    picked, other = _select(c, a), _select(c.logical_not(), b)
    return picked.logical_or(other) if dtype == DType.BOOL else picked + other


def _lower_gather(em, x, indices, *, axis):
    """``take(x, indices, axis)``: a one-hot of the indices against an arange, selected and summed over the axis.

    Negative indices count from the end; an index out of range selects nothing (0).
    """
    if not indices.dtype.is_int:
        raise DTypeError(f"gather needs integer indices, got {indices.dtype}")
    axis = normalize_axis(axis, x.ndim, "axis")
    n, pre, post = x.shape[axis], x.shape[:axis], x.shape[axis + 1 :]
    if n == 0:
        raise ShapeError(f"gather from axis {axis} of {units.shape(x.shape)}, which is empty", "attrs.axis")
    idx = indices.cast(DType.I32)
    idx = idx + idx.cmplt(0).cast(DType.I32) * n
    ni = idx.ndim
    hot = idx.reshape(idx.shape + (1,)).eq(_arange(em, n))  # [*I, n]
    full = pre + idx.shape + (n,) + post
    hot = hot.reshape((1,) * len(pre) + idx.shape + (n,) + (1,) * len(post)).expand(full)
    data = x.reshape(pre + (1,) * ni + (n,) + post).expand(full)
    picked = _select(hot, data)
    return (picked.cast(DType.I32) if x.dtype == DType.BOOL else picked).sum(len(pre) + ni).cast(x.dtype)


def _lower_erf(em, x):
    """Abramowitz and Stegun 7.1.26 (absolute error < 1.5e-7): odd, from |x| and the sign of x."""
    x = _float(x)
    a = x.abs()
    t = (a * 0.3275911 + 1).recip()
    poly = ((((t * 1.061405429 - 1.453152027) * t + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t
    sign = x.cmpgt(0).cast(x.dtype) - x.cmplt(0).cast(x.dtype)
    return sign * (1 - poly * (-(a * a)).exp())


def _pool_windows(x, kernel, stride, padding, dilation, fill, op: str):
    """Pad the last two axes with ``fill`` and cut them into windows: [.., KH, OH, KW, OW]."""
    if x.ndim < 3:
        raise ShapeError(f"{op} needs a tensor [.., H, W] of rank >= 3, got {units.shape(x.shape)}")
    for name, v in (("kernel", kernel), ("stride", stride), ("dilation", dilation)):
        if v is not None and (len(v) != 2 or min(v) < 1):
            raise ShapeError(f"{name} must be two integers >= 1, got {list(v)}", f"attrs.{name}")
    if len(padding) != 2 or any(p < 0 for pair in padding for p in pair):
        raise ShapeError(f"padding must be two [before, after] pairs >= 0, got {[list(p) for p in padding]}", "attrs.padding")
    stride = kernel if stride is None else stride
    lead = ((0, 0),) * (x.ndim - 2)
    x = x.pad(lead + padding, fill)
    for i, axis in enumerate((x.ndim - 2, x.ndim - 1)):
        span = (kernel[i] - 1) * dilation[i] + 1
        if x.shape[axis + i] < span:
            raise ShapeError(f"{op} window {span} is larger than the padded input axis of size {x.shape[axis + i]}")
        x = _dilated_windows(x, axis + i, kernel[i], stride[i], dilation[i])
    return x


def _lower_maxpool2d(em, x, kernel, stride, padding, dilation):
    _forbid_bool("maxpool2d", x)
    low = -math.inf if x.dtype.is_float else _int_bounds(x.dtype)[0]
    win = _pool_windows(x, kernel, stride, padding, dilation, low, "maxpool2d")
    return win.max((-4, -2))


def _lower_avgpool2d(em, x, kernel, stride, padding, dilation, count_include_pad):
    x = _float(x)
    total = _pool_windows(x, kernel, stride, padding, dilation, 0.0, "avgpool2d").sum((-4, -2))
    if count_include_pad or all(p == (0, 0) for p in padding):
        return total * (1 / (kernel[0] * kernel[1]))
    ones = x.const(1.0, x.dtype).reshape(1, 1, 1).expand((1,) + x.shape[-2:])
    return total / _pool_windows(ones, kernel, stride, padding, dilation, 0.0, "avgpool2d").sum((-4, -2))


# -- the registry ----------------------------------------------------------------------

_REDUCE_ATTRS = {"axes": Attr(attr_types.parse_axes, None), "keepdim": Attr(attr_types.parse_bool, False)}
_AXIS = {"axis": Attr(attr_types.parse_int, -1)}


def _optional_float(v: object) -> float | None:
    return None if v is None else attr_types.parse_float(v)


def _int_or_pair(v: object) -> int | tuple[int, int]:
    """One integer for both spatial axes, or [height, width] (kept as one integer when they agree)."""
    if isinstance(v, list | tuple):
        pair = attr_types.parse_ints(v)
        if len(pair) != 2:
            raise GraphError(f"expected an integer or two integers [height, width], got {list(v)}")
        return pair[0] if pair[0] == pair[1] else pair
    return attr_types.parse_int(v)


def _optional_ints(v: object) -> tuple[int, ...] | None:
    return None if v is None else attr_types.parse_ints(v)


_POOL_ATTRS = {"kernel": Attr(attr_types.parse_ints), "stride": Attr(_optional_ints, None),
               "padding": Attr(attr_types.parse_padding, ((0, 0), (0, 0))), "dilation": Attr(attr_types.parse_ints, (1, 1))}


def _specs() -> dict[str, OpSpec]:
    specs = [
        OpSpec("const", _lower_const, (0, 0), {
            "value": Attr(attr_types.parse_scalar), "dtype": Attr(attr_types.parse_dtype, DType.F32), "shape": Attr(attr_types.parse_shape, ()),
        }, "a constant, broadcast to shape"),
        OpSpec("reshape", _lower_reshape, (1, 1), {"shape": Attr(attr_types.parse_shape)}, "same elements, new shape (one -1 allowed)"),
        OpSpec("permute", _lower_permute, (1, 1), {"axes": Attr(attr_types.parse_ints)}, "reorder axes"),
        OpSpec("transpose", _lower_transpose, (1, 1), {"dim0": Attr(attr_types.parse_int, -2), "dim1": Attr(attr_types.parse_int, -1)},
               "swap two axes"),
        OpSpec("expand", _lower_expand, (1, 1), {"shape": Attr(attr_types.parse_shape)}, "broadcast to shape (numpy rules)"),
        OpSpec("pad", _lower_pad, (1, 1), {"padding": Attr(attr_types.parse_padding), "value": Attr(attr_types.parse_scalar, 0.0)},
               "pad (or, with negative amounts, shrink) each axis"),
        OpSpec("cast", _lower_cast, (1, 1), {"dtype": Attr(attr_types.parse_dtype)}, "convert element type"),
        OpSpec("sum", _lower_reduce("reduce_sum"), (1, 1), _REDUCE_ATTRS, "sum over axes"),
        OpSpec("max", _lower_reduce("reduce_max"), (1, 1), _REDUCE_ATTRS, "maximum over axes"),
        OpSpec("mean", _lower_mean, (1, 1), _REDUCE_ATTRS, "mean over axes"),
        OpSpec("var", _lower_var, (1, 1), {**_REDUCE_ATTRS, "correction": Attr(attr_types.parse_int, 0)}, "variance over axes"),
        OpSpec("matmul", _lower_matmul, (2, 2), {}, "batched, broadcasting matrix product (rank-1 operands as numpy)"),
        OpSpec("softmax", _lower_softmax, (1, 1), _AXIS, "softmax along an axis"),
        OpSpec("log_softmax", _lower_log_softmax, (1, 1), _AXIS, "log of softmax along an axis"),
        OpSpec("layernorm", _lower_layernorm, (1, 3), {**_AXIS, "eps": Attr(attr_types.parse_float, 1e-5)},
               "layer normalisation: args x, optional weight, optional bias"),
        OpSpec("rmsnorm", _lower_rmsnorm, (1, 2), {**_AXIS, "eps": Attr(attr_types.parse_float, 1e-6)},
               "RMS normalisation: args x, optional weight"),
        OpSpec("conv2d", _lower_conv2d, (2, 3), {"stride": Attr(_int_or_pair, 1), "padding": Attr(attr_types.parse_int, 0),
                                                 "dilation": Attr(_int_or_pair, 1), "groups": Attr(attr_types.parse_int, 1)},
               "2-D convolution: args x [N,C,H,W], weight [O,C/groups,KH,KW], optional bias [O]"),
        OpSpec("attention", _lower_attention, (3, 3), {"scale": Attr(_optional_float, None)},
               "scaled dot-product attention softmax(q @ k^T * scale) @ v"),
        OpSpec("concat", _lower_concat, (1, 1024), {"axis": Attr(attr_types.parse_int, 0)}, "join tensors along an axis"),
        OpSpec("slice", _lower_slice, (1, 1), {"starts": Attr(attr_types.parse_ints), "ends": Attr(attr_types.parse_ints),
                                               "axes": Attr(_optional_ints, None), "steps": Attr(_optional_ints, None)},
               "python slicing start:end:step of the listed axes (default 0, 1, ..); steps >= 1"),
        OpSpec("gather", _lower_gather, (2, 2), {"axis": Attr(attr_types.parse_int, 0)},
               "take(x, indices, axis): args x, integer indices (negative count from the end)"),
        OpSpec("where", _lower_where, (3, 3), {}, "elementwise select: args bool condition, value if true, value if false"),
        OpSpec("erf", _lower_erf, (1, 1), {}, "the error function (absolute error < 1.5e-7)"),
        OpSpec("maxpool2d", _lower_maxpool2d, (1, 1), _POOL_ATTRS,
               "max over windows of the last two axes; stride defaults to the kernel, padding is [[top, bottom], [left, right]]"),
        OpSpec("avgpool2d", _lower_avgpool2d, (1, 1), {**_POOL_ATTRS, "count_include_pad": Attr(attr_types.parse_bool, False)},
               "mean over windows of the last two axes (padding counted only with count_include_pad)"),
        OpSpec("minimum", _lower_minimum, (2, 2), {}, "elementwise minimum (broadcasting)"),
        OpSpec("exp", _float_composite("exp", _lower_exp), (1, 1), {}, "e ** x"),
        OpSpec("log", _float_composite("log", _lower_log), (1, 1), {}, "natural logarithm"),
        OpSpec("abs", _lower_abs, (1, 1), {}, "absolute value"),
        OpSpec("sigmoid", _float_composite("sigmoid", _lower_sigmoid), (1, 1), {}, "1 / (1 + e ** -x)"),
        OpSpec("tanh", _float_composite("tanh", _lower_tanh), (1, 1), {}, "hyperbolic tangent"),
        OpSpec("gelu", _float_composite("gelu", _lower_gelu), (1, 1), {}, "GELU, tanh approximation"),
        OpSpec("silu", _float_composite("silu", _lower_silu), (1, 1), {}, "x * sigmoid(x)"),
    ]
    specs += [OpSpec(op, _lower_prim_unary(op), (1, 1), {}, f"primitive {op}") for op in UNARY_OPS]
    binaries = {"add": "arith", "sub": "arith", "mul": "arith", "div": "arith", "pow": "arith", "maximum": "arith",
                "cmplt": "compare", "cmpgt": "compare", "eq": "compare", "noteq": "compare",
                "and": "logic", "or": "logic"}
    specs += [
        OpSpec(op, _lower_binary("max" if op == "maximum" else op, kind), (2, 2), {}, f"elementwise {op} (broadcasting)")
        for op, kind in binaries.items()
    ]
    return {s.name: s for s in specs}


OPS: Mapping[str, OpSpec] = _specs()

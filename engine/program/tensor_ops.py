"""The tensor method surface shared by the lazy builder Tensor and lowering handles.

Every method records one op of the op set (``engine.program.opset``) through
``_apply``; subclasses decide what recording means: the builder keeps the op as
written, the lowering handle expands it into primitives on the spot.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Self

from engine.program.dtypes import DType, scalar_dtype

Scalar = bool | int | float


def _shape_arg(shape: tuple[Any, ...]) -> tuple[int, ...]:
    """Accept both ``reshape(2, 3)`` and ``reshape((2, 3))``."""
    if len(shape) == 1 and isinstance(shape[0], Sequence):
        return tuple(shape[0])
    return tuple(shape)


class TensorOps:
    """Mixin: subclasses provide ``shape``, ``dtype`` and ``_apply``."""

    shape: tuple[int, ...]
    dtype: DType

    def _apply(self, op: str, args: tuple[Self, ...], attrs: dict[str, Any]) -> Self:
        raise NotImplementedError

    @property
    def ndim(self) -> int:
        return len(self.shape)

    # -- constants and binary ops ------------------------------------------------
    def const(self, value: Scalar, dtype: DType | str | None = None) -> Self:
        """A scalar constant (shape ``()``) recorded beside this tensor."""
        dtype = DType.parse(dtype) if isinstance(dtype, str) else dtype
        return self._apply("const", (), {"value": value, "dtype": dtype or scalar_dtype(value)})

    def _lift(self, other: Self | Scalar) -> Self:
        if isinstance(other, TensorOps):
            return other
        # A Python scalar is weak: it takes this tensor's dtype, unless that would lose it
        # (a float beside an integer tensor, a number beside a boolean one).
        if self.dtype == DType.BOOL or (isinstance(other, float) and not self.dtype.is_float):
            return self.const(other, scalar_dtype(other))
        return self.const(other, self.dtype)

    def _binary(self, op: str, other: Self | Scalar, reverse: bool = False) -> Self:
        a, b = self, self._lift(other)
        return self._apply(op, (b, a) if reverse else (a, b), {})

    def __add__(self, o): return self._binary("add", o)
    def __radd__(self, o): return self._binary("add", o, True)
    def __sub__(self, o): return self._binary("sub", o)
    def __rsub__(self, o): return self._binary("sub", o, True)
    def __mul__(self, o): return self._binary("mul", o)
    def __rmul__(self, o): return self._binary("mul", o, True)
    def __truediv__(self, o): return self._binary("div", o)
    def __rtruediv__(self, o): return self._binary("div", o, True)
    def __pow__(self, o): return self._binary("pow", o)
    def __rpow__(self, o): return self._binary("pow", o, True)
    def __matmul__(self, o): return self._apply("matmul", (self, o), {})
    def __neg__(self): return self._apply("neg", (self,), {})

    def maximum(self, o: Self | Scalar) -> Self: return self._binary("maximum", o)
    def minimum(self, o: Self | Scalar) -> Self: return self._binary("minimum", o)
    def cmplt(self, o: Self | Scalar) -> Self: return self._binary("cmplt", o)
    def cmpgt(self, o: Self | Scalar) -> Self: return self._binary("cmpgt", o)
    def eq(self, o: Self | Scalar) -> Self: return self._binary("eq", o)
    def noteq(self, o: Self | Scalar) -> Self: return self._binary("noteq", o)
    def logical_and(self, o: Self | Scalar) -> Self: return self._binary("and", o)
    def logical_or(self, o: Self | Scalar) -> Self: return self._binary("or", o)

    # -- unary ops -----------------------------------------------------------------
    def _unary(self, op: str) -> Self:
        return self._apply(op, (self,), {})

    def relu(self) -> Self: return self._unary("relu")
    def exp2(self) -> Self: return self._unary("exp2")
    def log2(self) -> Self: return self._unary("log2")
    def sin(self) -> Self: return self._unary("sin")
    def cos(self) -> Self: return self._unary("cos")
    def sqrt(self) -> Self: return self._unary("sqrt")
    def recip(self) -> Self: return self._unary("recip")
    def logical_not(self) -> Self: return self._unary("not")
    def exp(self) -> Self: return self._unary("exp")
    def log(self) -> Self: return self._unary("log")
    def abs(self) -> Self: return self._unary("abs")
    def sigmoid(self) -> Self: return self._unary("sigmoid")
    def tanh(self) -> Self: return self._unary("tanh")
    def gelu(self) -> Self: return self._unary("gelu")
    def silu(self) -> Self: return self._unary("silu")

    # -- movement ------------------------------------------------------------------
    def reshape(self, *shape: int) -> Self:
        return self._apply("reshape", (self,), {"shape": _shape_arg(shape)})

    def permute(self, *axes: int) -> Self:
        return self._apply("permute", (self,), {"axes": _shape_arg(axes)})

    def transpose(self, dim0: int = -2, dim1: int = -1) -> Self:
        return self._apply("transpose", (self,), {"dim0": dim0, "dim1": dim1})

    @property
    def T(self) -> Self:  # noqa: N802 - the conventional name
        return self.transpose()

    def expand(self, *shape: int) -> Self:
        return self._apply("expand", (self,), {"shape": _shape_arg(shape)})

    def pad(self, padding: Sequence[tuple[int, int]], value: float = 0.0) -> Self:
        return self._apply("pad", (self,), {"padding": tuple(tuple(p) for p in padding), "value": value})

    def cast(self, dtype: DType | str) -> Self:
        return self._apply("cast", (self,), {"dtype": DType.parse(dtype) if isinstance(dtype, str) else dtype})

    # -- reductions ----------------------------------------------------------------
    def _reduce(self, op: str, axes: int | Sequence[int] | None, keepdim: bool, **extra: Any) -> Self:
        axes = (axes,) if isinstance(axes, int) else (None if axes is None else tuple(axes))
        return self._apply(op, (self,), {"axes": axes, "keepdim": keepdim, **extra})

    def sum(self, axes: int | Sequence[int] | None = None, keepdim: bool = False) -> Self:
        return self._reduce("sum", axes, keepdim)

    def max(self, axes: int | Sequence[int] | None = None, keepdim: bool = False) -> Self:
        return self._reduce("max", axes, keepdim)

    def mean(self, axes: int | Sequence[int] | None = None, keepdim: bool = False) -> Self:
        return self._reduce("mean", axes, keepdim)

    def var(self, axes: int | Sequence[int] | None = None, keepdim: bool = False, correction: int = 0) -> Self:
        return self._reduce("var", axes, keepdim, correction=correction)

    # -- neural-network ops --------------------------------------------------------
    def softmax(self, axis: int = -1) -> Self:
        return self._apply("softmax", (self,), {"axis": axis})

    def log_softmax(self, axis: int = -1) -> Self:
        return self._apply("log_softmax", (self,), {"axis": axis})

    def layernorm(self, weight: Self | None = None, bias: Self | None = None, axis: int = -1, eps: float = 1e-5) -> Self:
        args = tuple(t for t in (self, weight, bias) if t is not None)
        return self._apply("layernorm", args, {"axis": axis, "eps": eps})

    def rmsnorm(self, weight: Self | None = None, axis: int = -1, eps: float = 1e-6) -> Self:
        args = tuple(t for t in (self, weight) if t is not None)
        return self._apply("rmsnorm", args, {"axis": axis, "eps": eps})

    def conv2d(self, weight: Self, bias: Self | None = None, stride: int | tuple[int, int] = 1, padding: int = 0,
               dilation: int | tuple[int, int] = 1, groups: int = 1) -> Self:
        args = tuple(t for t in (self, weight, bias) if t is not None)
        return self._apply("conv2d", args, {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups})

    def attention(self, key: Self, value: Self, scale: float | None = None) -> Self:
        return self._apply("attention", (self, key, value), {"scale": scale})

    # -- joining, slicing, indexing, selection, pooling -------------------------------
    def concat(self, *others: Self, axis: int = 0) -> Self:
        return self._apply("concat", (self, *others), {"axis": axis})

    def slice(self, starts: Sequence[int], ends: Sequence[int], axes: Sequence[int] | None = None,
              steps: Sequence[int] | None = None) -> Self:
        return self._apply("slice", (self,), {"starts": tuple(starts), "ends": tuple(ends),
                                              "axes": None if axes is None else tuple(axes),
                                              "steps": None if steps is None else tuple(steps)})

    def gather(self, indices: Self, axis: int = 0) -> Self:
        return self._apply("gather", (self, indices), {"axis": axis})

    def where(self, if_true: Self, if_false: Self) -> Self:
        """``self`` is the bool condition."""
        return self._apply("where", (self, if_true, if_false), {})

    def erf(self) -> Self: return self._unary("erf")

    def _pool(self, op: str, kernel: Sequence[int], stride: Sequence[int] | None,
              padding: Sequence[tuple[int, int]], dilation: Sequence[int], **extra: Any) -> Self:
        return self._apply(op, (self,), {"kernel": tuple(kernel), "stride": None if stride is None else tuple(stride),
                                         "padding": tuple(tuple(p) for p in padding), "dilation": tuple(dilation), **extra})

    def maxpool2d(self, kernel: Sequence[int], stride: Sequence[int] | None = None,
                  padding: Sequence[tuple[int, int]] = ((0, 0), (0, 0)), dilation: Sequence[int] = (1, 1)) -> Self:
        return self._pool("maxpool2d", kernel, stride, padding, dilation)

    def avgpool2d(self, kernel: Sequence[int], stride: Sequence[int] | None = None,
                  padding: Sequence[tuple[int, int]] = ((0, 0), (0, 0)), dilation: Sequence[int] = (1, 1),
                  count_include_pad: bool = False) -> Self:
        return self._pool("avgpool2d", kernel, stride, padding, dilation, count_include_pad=count_include_pad)

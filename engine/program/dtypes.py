"""Tensor element types, their numpy equivalents and promotion."""

from __future__ import annotations

import math
from enum import Enum

import numpy as np

from engine.errors import DTypeError


class DType(Enum):
    """Element type of a tensor; ``value`` is the name used in graph.json."""

    BOOL = "bool"
    I32 = "i32"
    I64 = "i64"
    F16 = "f16"
    F32 = "f32"
    F64 = "f64"

    @property
    def numpy(self) -> np.dtype:
        return _NUMPY[self]

    @property
    def is_float(self) -> bool:
        return self in (DType.F16, DType.F32, DType.F64)

    @property
    def is_int(self) -> bool:
        return self in (DType.I32, DType.I64)

    @property
    def itemsize(self) -> int:
        return self.numpy.itemsize

    @property
    def tolerance(self) -> tuple[float, float]:
        """(rtol, atol) for comparing results of this dtype with the reference."""
        return _TOLERANCE[self]

    def scalar(self, value: bool | int | float) -> bool | int | float:
        """``value`` as this dtype holds it (floats rounded); a DTypeError when it does not fit: an integer out
        of range, or a finite number that would round to infinity (1e39 in f32, 70000 in f16)."""
        try:
            with np.errstate(over="raise"):
                exact = self.numpy.type(value).item()
        except (OverflowError, ValueError, FloatingPointError):
            exact = None
        if exact is None or (self.is_float and math.isfinite(value) and not math.isfinite(exact)):
            raise DTypeError(f"constant {value!r} does not fit dtype {self}")
        return exact

    @staticmethod
    def parse(name: object) -> DType:
        """The dtype called ``name`` in graph.json; raises DTypeError naming the choices."""
        for dtype in DType:
            if dtype.value == name:
                return dtype
        choices = ", ".join(d.value for d in DType)
        raise DTypeError(f"unknown dtype {name!r} (expected one of {choices})")

    def __str__(self) -> str:
        return self.value


_NUMPY = {
    DType.BOOL: np.dtype("bool"),
    DType.I32: np.dtype("int32"),
    DType.I64: np.dtype("int64"),
    DType.F16: np.dtype("float16"),
    DType.F32: np.dtype("float32"),
    DType.F64: np.dtype("float64"),
}

_TOLERANCE = {
    DType.BOOL: (0.0, 0.0),
    DType.I32: (0.0, 0.0),
    DType.I64: (0.0, 0.0),
    DType.F16: (2e-2, 2e-2),
    DType.F32: (2e-4, 2e-5),
    DType.F64: (1e-9, 1e-12),
}

# Promotion order: the result of mixing two dtypes is the later one in this list.
_ORDER = [DType.BOOL, DType.I32, DType.I64, DType.F16, DType.F32, DType.F64]


def promote(a: DType, b: DType) -> DType:
    """The dtype both operands of a binary op are cast to."""
    return max(a, b, key=_ORDER.index)


def scalar_dtype(value: bool | int | float) -> DType:
    """The weakest dtype that holds a Python scalar (bool, int -> i32, float -> f32)."""
    if isinstance(value, bool):
        return DType.BOOL
    if isinstance(value, int):
        return DType.I32
    return DType.F32

"""Checking arrays given for program inputs before anything reads them.

Kernels index their buffers by the shapes the program declares, so an array of
another shape would be read past its end (a crash on native code) or computed on
garbage; every entry point that takes input arrays calls ``check_inputs`` first.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from engine import units
from engine.errors import InputError
from engine.program.dtypes import DType
from engine.program.primitives import Shape


def check_input(name: str, value: object, shape: Shape, dtype: DType) -> np.ndarray:
    """``value`` as a C-contiguous array of ``dtype``, or an InputError at ``inputs.NAME``.

    The shape must match exactly.  The dtype may differ only where numpy casts
    within a kind (f64 data for an f32 input, i32 for i64, bool for an integer),
    and integers must fit: a cast that wraps would compute on other numbers.
    """
    where = f"inputs.{name}"
    array = np.asarray(value)
    if array.shape != tuple(shape):
        raise InputError(f"input {name!r} has shape {units.shape(array.shape)}, the program declares {units.shape(shape)}", where)
    want = dtype.numpy
    if array.dtype != want:
        if not np.can_cast(array.dtype, want, "same_kind") or array.dtype.kind not in "biuf":
            raise InputError(f"input {name!r} has dtype {array.dtype}, the program declares {dtype} ({want})", where)
        if dtype.is_int and array.size:
            info = np.iinfo(want)
            if array.min() < info.min or array.max() > info.max:
                raise InputError(f"input {name!r} has values outside the range of {dtype}", where)
    return np.asarray(array, want, order="C")  # (ascontiguousarray would make a 0-d array 1-d)


def check_inputs(declared: Mapping[str, tuple[Shape, DType]], given: Mapping[str, object]) -> dict[str, np.ndarray]:
    """Every declared input, checked by ``check_input``; one missing is an InputError.  Extra names are ignored
    (a plan reads only the inputs its outputs need)."""
    out = {}
    for name, (shape, dtype) in declared.items():
        if name not in given:
            raise InputError(f"no array given for input {name!r} ({dtype}{units.shape(shape)})", f"inputs.{name}")
        out[name] = check_input(name, given[name], shape, dtype)
    return out

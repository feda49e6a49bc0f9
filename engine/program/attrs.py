"""Typed attributes of ops: parsing JSON/Python values into canonical, hashable forms."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from engine.errors import GraphError, ShapeError
from engine.program.dtypes import DType

REQUIRED = object()


def _is_int(v: object) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _fail(expected: str, value: object) -> GraphError:
    shown = repr(value)
    return GraphError(f"expected {expected}, got {shown if len(shown) < 60 else shown[:57] + '...'}")


def parse_int(v: object) -> int:
    if not _is_int(v):
        raise _fail("an integer", v)
    return v


def parse_float(v: object) -> float:
    if not _is_number(v):
        raise _fail("a number", v)
    return float(v)


def parse_bool(v: object) -> bool:
    if not isinstance(v, bool):
        raise _fail("true or false", v)
    return v


SPECIAL_FLOATS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}
"""The graph.json spelling of the floats standard JSON cannot write (its NaN and Infinity are not JSON)."""


def decode_specials(v: Any) -> Any:
    """``v`` (a scalar or nested lists) with the strings of SPECIAL_FLOATS as floats."""
    if isinstance(v, list):
        return [decode_specials(x) for x in v]
    return SPECIAL_FLOATS.get(v, v) if isinstance(v, str) else v


def encode_specials(v: Any) -> Any:
    """``v`` (a scalar or nested lists/tuples) with non-finite floats as the strings of SPECIAL_FLOATS."""
    if isinstance(v, list | tuple):
        return [encode_specials(x) for x in v]
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else "inf" if v > 0 else "-inf"
    return v


def parse_scalar(v: object) -> bool | int | float:
    v = decode_specials(v)
    if not isinstance(v, bool | int | float):
        raise _fail('a number, a boolean, or one of "nan", "inf", "-inf"', v)
    return v


def parse_ints(v: object) -> tuple[int, ...]:
    if not isinstance(v, list | tuple) or not all(_is_int(x) for x in v):
        raise _fail("a list of integers", v)
    return tuple(v)


def parse_axes(v: object) -> tuple[int, ...] | None:
    """``null`` (all axes), one axis, or a list of axes."""
    if v is None:
        return None
    if _is_int(v):
        return (v,)
    return parse_ints(v)


def parse_shape(v: object) -> tuple[int, ...]:
    dims = parse_ints(v)
    if any(d < -1 for d in dims):
        raise ShapeError(f"dimensions must be >= 0 (or -1 to infer one), got {list(dims)}")
    return dims


def parse_padding(v: object) -> tuple[tuple[int, int], ...]:
    if not isinstance(v, list | tuple) or not all(
        isinstance(p, list | tuple) and len(p) == 2 and all(_is_int(x) for x in p) for p in v
    ):
        raise _fail("a list of [before, after] integer pairs", v)
    return tuple((lo, hi) for lo, hi in v)


def parse_dtype(v: object) -> DType:
    return v if isinstance(v, DType) else DType.parse(v)


@dataclass(frozen=True)
class Attr:
    """One attribute of an op: how to parse it and its default (REQUIRED if none)."""

    parse: Callable[[object], Any]
    default: Any = REQUIRED

    @property
    def required(self) -> bool:
        return self.default is REQUIRED


def to_json_value(v: Any) -> Any:
    """The graph.json form of a canonical attribute value."""
    if isinstance(v, DType):
        return v.value
    if isinstance(v, tuple):
        return [to_json_value(x) for x in v]
    return encode_specials(v)

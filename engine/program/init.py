"""How an input's initial value is produced: random, constant, a range, inline values or a .npy file."""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engine.errors import InitError
from engine.program.attrs import decode_specials, encode_specials
from engine.program.dtypes import DType

# kind -> {parameter: default}; a default of None means the parameter is required.
_KINDS: dict[str, dict[str, Any]] = {
    "normal": {"seed": None, "mean": 0.0, "std": 1.0},
    "uniform": {"seed": None, "low": -1.0, "high": 1.0},
    "zeros": {},
    "ones": {},
    "full": {"value": None},
    "arange": {"start": 0.0, "step": 1.0},
    "values": {"values": None},
    "npy": {"path": None},
}


@dataclass(frozen=True)
class Init:
    """An initial-value spec: ``kind`` plus its parameters (see docs/graph-format.md)."""

    kind: str
    params: Mapping[str, Any] = field(default_factory=dict)

    @staticmethod
    def normal(seed: int, mean: float = 0.0, std: float = 1.0) -> Init:
        return Init("normal", {"seed": seed, "mean": mean, "std": std})

    @staticmethod
    def uniform(seed: int, low: float = -1.0, high: float = 1.0) -> Init:
        return Init("uniform", {"seed": seed, "low": low, "high": high})

    @staticmethod
    def for_name(name: str) -> Init:
        """The default: standard normal, seeded from the input's name so it is stable."""
        return Init.normal(zlib.crc32(name.encode()))

    def materialize(self, shape: tuple[int, ...], dtype: DType) -> np.ndarray:
        """The input's value as an array of ``shape`` and ``dtype``."""
        p, np_dtype = self.params, dtype.numpy
        if self.kind == "normal":
            data = np.random.default_rng(p["seed"]).normal(p["mean"], p["std"], shape)
        elif self.kind == "uniform":
            data = np.random.default_rng(p["seed"]).uniform(p["low"], p["high"], shape)
        elif self.kind in ("zeros", "ones", "full"):
            return np.full(shape, {"zeros": 0, "ones": 1}.get(self.kind, p.get("value")), np_dtype)
        elif self.kind == "arange":
            data = (p["start"] + p["step"] * np.arange(math.prod(shape), dtype=np.float64)).reshape(shape)
        elif self.kind == "values":
            data = np.asarray(p["values"]).reshape(shape)  # [] stands for every empty shape
        else:
            data = _load_npy(Path(p["path"]), shape, dtype)
        if dtype == DType.BOOL and self.kind in ("normal", "uniform", "arange"):
            return data > 0
        return np.array(data, dtype=np_dtype, order="C")

    def to_json(self, base_dir: Path | None) -> Any:
        """The graph.json form; a .npy path is written relative to ``base_dir`` when it lies below it."""
        if self.kind in ("zeros", "ones"):
            return self.kind
        params = {k: encode_specials(v) if k in ("value", "values") else v for k, v in self.params.items()}
        if self.kind == "npy" and base_dir is not None:
            path = Path(params["path"])
            params["path"] = str(path.relative_to(base_dir)) if path.is_relative_to(base_dir) else str(path)
        return {"kind": self.kind, **params}


def _number(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _expected(dtype: DType) -> str:
    """The values an integer or bool dtype holds, for messages."""
    if dtype == DType.BOOL:
        return "booleans or finite numbers expected"
    info = np.iinfo(dtype.numpy)
    return f"integers from {info.min} to {info.max} expected"


def _fits(data: np.ndarray, dtype: DType) -> bool:
    """Whether numbers convert to the integer ``dtype`` exactly, to bool when finite, to a float dtype without
    a finite number becoming infinite (as for constants: 1e39 does not fit f32)."""
    if dtype.is_float:
        with np.errstate(over="ignore"):
            return data.size == 0 or bool(np.all(np.isfinite(data.astype(dtype.numpy)) | ~np.isfinite(data)))
    if dtype == DType.BOOL:
        return data.dtype.kind != "f" or bool(np.all(np.isfinite(data)))
    if data.size == 0 or data.dtype == np.bool_:
        return True
    if data.dtype.kind == "f" and not np.all(np.isfinite(data) & (data == np.trunc(data))):
        return False
    info = np.iinfo(dtype.numpy)
    return bool(info.min <= data.min() and data.max() <= info.max)


def parse_init(spec: object, shape: tuple[int, ...], dtype: DType, base_dir: Path, npy_anywhere: bool = False) -> Init:
    """Validate a graph.json ``init`` value against its input's shape and dtype.

    A .npy path must stay inside ``base_dir`` (the graph's folder) unless ``npy_anywhere``: a shared
    graph.json must not read, or probe for, other files of the machine.
    Raises InitError located relative to the ``init`` key (e.g. ``path``).
    """
    if isinstance(spec, str):
        spec = {"kind": spec}
    if not isinstance(spec, dict):
        raise InitError(f"expected a string or an object with a 'kind', got {spec!r}")
    kind = spec.get("kind")
    if not isinstance(kind, str) or kind not in _KINDS:
        raise InitError(f"unknown init kind {kind!r} (expected one of {', '.join(_KINDS)})", "kind")
    allowed = _KINDS[kind]
    params: dict[str, Any] = {}
    for key, value in spec.items():
        if key == "kind":
            continue
        if key not in allowed:
            raise InitError(f"init kind {kind!r} has no parameter {key!r} (its parameters: {', '.join(allowed) or 'none'})", key)
        params[key] = decode_specials(value) if key in ("value", "values") else value
    for key, default in allowed.items():
        if key not in params:
            if default is None:
                raise InitError(f"init kind {kind!r} needs the parameter {key!r}")
            params[key] = default
    _check_params(kind, params, shape, dtype, base_dir, npy_anywhere)
    return Init(kind, params)


MAX_PARAMETER = 1e300
"""The largest magnitude of a random or range parameter (beyond it the values overflow to infinity)."""


def _check_params(kind: str, params: dict[str, Any], shape: tuple[int, ...], dtype: DType, base_dir: Path,
                  npy_anywhere: bool) -> None:
    for key, value in params.items():
        if key == "seed" and (not isinstance(value, int) or isinstance(value, bool) or value < 0 or value >= 2**128):
            raise InitError(f"seed must be a non-negative integer below 2**128, got {_short(value)}", key)
        if key in ("mean", "std", "low", "high", "value", "start", "step") and not (_number(value) or isinstance(value, bool)):
            raise InitError(f"{key} must be a number, got {_short(value)}", key)
        if key in ("mean", "std", "low", "high", "start", "step") and not abs(value) <= MAX_PARAMETER:
            raise InitError(f"{key} must be finite and at most {MAX_PARAMETER:g} in magnitude, got {_short(value)}", key)
    if kind == "normal" and params["std"] < 0:
        raise InitError(f"std must be >= 0, got {params['std']}", "std")
    if kind == "normal":
        params["std"] += 0.0  # -0.0 is 0 (numpy refuses a negative sign)
    if kind == "full" and isinstance(params["value"], int) and not abs(params["value"]) <= MAX_PARAMETER:
        raise InitError(f"value {_short(params['value'])} is beyond any float or integer dtype", "value")
    if kind == "uniform" and not params["low"] <= params["high"]:
        raise InitError(f"low must be <= high, got low {params['low']} and high {params['high']}", "low")
    if kind == "full" and not _fits(np.asarray(params["value"]), dtype):
        raise InitError(f"value {params['value']!r} does not fit dtype {dtype}", "value")
    if kind == "values":
        try:
            data = np.asarray(params["values"])
        except ValueError:
            raise InitError("values are ragged: every row must have the same length", "values") from None
        if data.dtype == object or not (np.issubdtype(data.dtype, np.number) or data.dtype == np.bool_):
            raise InitError("values must be numbers or booleans in nested lists", "values")
        if data.shape != shape and not data.size == math.prod(shape) == 0:
            raise InitError(f"values have shape {list(data.shape)}, but the input's shape is {list(shape)}", "values")
        if not _fits(data, dtype):
            raise InitError(f"values do not fit dtype {dtype} ({_expected(dtype)})", "values")
    if kind == "npy":
        params["path"] = str(_check_npy(params["path"], shape, dtype, base_dir, npy_anywhere))


def _short(value: object) -> str:
    """``value`` for a message, cut short (an integer of thousands of digits cannot even be printed whole)."""
    if isinstance(value, int) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    return repr(value)[:60]


def _check_npy(path: object, shape: tuple[int, ...], dtype: DType, base_dir: Path, npy_anywhere: bool) -> Path:
    if not isinstance(path, str) or not path or "\0" in path:
        raise InitError(f"path must be a file name, got {_short(path)}", "path")
    try:
        full = (base_dir / path).resolve()
        inside = full.is_relative_to(base_dir.resolve())
        if not inside and not npy_anywhere:  # said before looking: no probing for files outside
            raise InitError(f"{path} is outside the graph's folder {base_dir} (zyx-explore --npy-anywhere allows it)",
                            "path")
        found = full.is_file()
    except (OSError, RuntimeError) as e:  # a name too long, a symlink loop, an unreadable folder
        raise InitError(f"{path} cannot be opened ({getattr(e, 'strerror', None) or e})", "path") from None
    if not found:
        raise InitError(f"file not found: {full}", "path")
    _load_npy(full, shape, dtype)
    return full


def _load_npy(full: Path, shape: tuple[int, ...], dtype: DType) -> np.ndarray:
    """The array of the .npy file ``full``, memory-mapped, checked against the input (again when the program
    runs: the file may have been replaced since it was loaded); InitError at ``path`` if it does not fit."""
    try:
        data = np.load(full, mmap_mode="r", allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise InitError(f"{full} is not a readable .npy file ({e or 'empty file'})", "path") from None
    if not isinstance(data, np.ndarray):
        data.close()
        raise InitError(f"{full} is an .npz archive, not a .npy file", "path")
    if data.shape != shape:
        raise InitError(f"{full} holds shape {list(data.shape)}, but the input's shape is {list(shape)}", "path")
    if not np.can_cast(data.dtype, dtype.numpy, casting="same_kind"):
        raise InitError(f"{full} holds dtype {data.dtype}, which does not convert to {dtype}", "path")
    if data.dtype.kind in "iu" and not _fits(data, dtype):  # as inline values: no silent wrap-around
        raise InitError(f"{full} holds values that do not fit dtype {dtype} ({_expected(dtype)})", "path")
    return data

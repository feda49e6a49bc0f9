"""Seconds, bytes, shapes and counts as text: the one place every pane, report and graph label formats them.

Three significant digits, fixed notation (never ``1e+03``): a value that rounds up to the next unit is shown in
that unit (999.6 ns is ``1.00 µs``), and negatives carry a plain minus (``-2.00 ms``, never ``+-``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

SECOND_UNITS = (("ns", 1e-9), ("µs", 1e-6), ("ms", 1e-3), ("s", 1.0))
BYTE_UNITS = (("B", 1), ("KiB", 1024), ("MiB", 1024**2), ("GiB", 1024**3), ("TiB", 1024**4))


def _digits(value: float) -> str:
    """``value`` (>= 0) with 3 significant digits in fixed notation: 1.00, 12.3, 123, 1234."""
    if value == 0:
        return "0"
    decimals = max(0, 2 - math.floor(math.log10(value)))
    return f"{value:.{decimals}f}"


def _scaled(value: float, units: tuple[tuple[str, float], ...]) -> str:
    """``value`` (>= 0, finite) in the largest unit it reaches once rounded to 3 significant digits."""
    index = max((i for i, (_, size) in enumerate(units) if value >= size), default=0)
    name, scale = units[index]
    if index == len(units) - 1 and value / scale >= 1000:  # past the largest unit: whole numbers, no exponent
        return f"{value / scale:.0f} {name}"
    rounded = float(f"{value / scale:.3g}")
    if rounded >= 1000 and index + 1 < len(units):  # 999.6 ns rounds to 1000 ns: 1.00 µs
        name, scale = units[index + 1]
        rounded = float(f"{value / scale:.3g}")
    return f"{_digits(rounded)} {name}"


def seconds(s: float | None, signed: bool = False) -> str:
    """``s`` seconds as ``1.23 ms``; ``signed``: a ``+`` before positives (a delta); None: empty, NaN: ``?``."""
    if s is None:
        return ""
    if math.isnan(s):
        return "?"
    sign = "-" if s < 0 else "+" if signed and s > 0 else ""
    if math.isinf(s):
        return f"{sign}inf"
    if s == 0:
        return "0 s"
    return sign + _scaled(abs(s), SECOND_UNITS)


def nbytes(n: float) -> str:
    """``n`` bytes as ``512 B``, ``1.50 KiB``, ``2.00 GiB`` (binary units)."""
    sign = "-" if n < 0 else ""
    n = abs(n)
    if n < 1024:
        return f"{sign}{n:.0f} B"
    return sign + _scaled(float(n), BYTE_UNITS)


def shape(dims: Iterable[int]) -> str:
    """``[2, 3]``; a scalar is ``[]``."""
    return "[" + ", ".join(map(str, dims)) + "]"


def plural(n: int, noun: str, many: str | None = None) -> str:
    """``1 step``, ``2 steps``, ``0 steps``; ``many``: the plural when it is not ``noun + 's'`` (copy, copies)."""
    return f"{n} {noun if n == 1 else many or noun + 's'}"


def short_devices(names: Iterable[str]) -> dict[str, str]:
    """A short name for each device (and its memory pool) in tables and labels: host devices keep theirs (numpy,
    blas, native), OpenCL devices, whose full names run to 60 characters, become ``cl0``, ``cl1``... in
    discovery order; ``device_legend`` says which is which, once."""
    out = {"host": "host"}
    for name in names:
        out[name] = f"cl{sum(v.startswith('cl') for v in out.values())}" if name.startswith("opencl:") else name
    return out


def device_legend(short: dict[str, str]) -> str:
    """``cl0 = opencl:pthread-skylake-avx512-Intel(R) Xeon(R) Processor``, one entry per renamed device."""
    return "   ".join(f"{s} = {name}" for name, s in short.items() if s != name)

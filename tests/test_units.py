"""engine.units at its edges: rounding across units, signs, infinities, plurals."""

from __future__ import annotations

import math

import pytest

from engine import units


@pytest.mark.parametrize(("s", "text"), [
    (999.6e-9, "1.00 µs"),  # rounds up into the next unit, never "1e+03 ns"
    (999.4e-9, "999 ns"),
    (999.6e-3, "1.00 s"),
    (999.96e-6, "1.00 ms"),
    (1e-9, "1.00 ns"),
    (5e-10, "0.500 ns"),
    (1.5e-3, "1.50 ms"),
    (9.996e-3, "10.0 ms"),
    (0.1234, "123 ms"),
    (12.34, "12.3 s"),
    (15600.0, "15600 s"),  # past the largest unit: whole seconds, no exponent
    (1.56e7, "15600000 s"),
    (0.0, "0 s"),
    (-2e-3, "-2.00 ms"),
    (-999.6e-9, "-1.00 µs"),
    (math.inf, "inf"),
    (-math.inf, "-inf"),
    (math.nan, "?"),
    (None, ""),
])
def test_seconds(s, text):
    assert units.seconds(s) == text


@pytest.mark.parametrize(("s", "text"), [(2e-3, "+2.00 ms"), (-2e-3, "-2.00 ms"), (0.0, "0 s"), (-15.6e-3, "-15.6 ms")])
def test_signed_seconds(s, text):
    assert units.seconds(s, signed=True) == text


def test_seconds_never_use_exponents():
    for k in range(-15, 12):
        for mantissa in (1.0, 9.994, 9.996, 999.5):
            for sign in (1, -1):
                text = units.seconds(sign * mantissa * 10.0**k)
                assert "e" not in text.split()[0] and "+-" not in text, text


@pytest.mark.parametrize(("n", "text"), [
    (0, "0 B"), (1, "1 B"), (1023, "1023 B"), (1024, "1.00 KiB"), (1536, "1.50 KiB"),
    (1024**2 - 50, "1.00 MiB"), (3 * 1024**3, "3.00 GiB"), (2 * 1024**5, "2048 TiB"), (-1536, "-1.50 KiB"),
])
def test_nbytes(n, text):
    assert units.nbytes(n) == text


def test_shape_and_plural():
    assert units.shape(()) == "[]"
    assert units.shape((2, 3)) == "[2, 3]"
    assert units.plural(1, "step") == "1 step"
    assert units.plural(0, "step") == "0 steps"
    assert units.plural(2, "launch", "launches") == "2 launches"
    assert units.plural(1, "copy", "copies") == "1 copy"


def test_short_devices_and_their_legend():
    names = ["numpy", "blas", "native", "opencl:pthread-skylake-avx512-Intel(R) Xeon(R) Processor (PoCL 3.1)",
             "opencl:NVIDIA H200"]
    short = units.short_devices(names)
    assert [short[n] for n in names] == ["numpy", "blas", "native", "cl0", "cl1"]
    assert short["host"] == "host"
    assert units.device_legend(short) == f"cl0 = {names[3]}   cl1 = {names[4]}"
    assert units.device_legend(units.short_devices(["numpy"])) == ""

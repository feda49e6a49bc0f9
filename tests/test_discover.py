"""Device discovery says in one line why OpenCL devices are missing, and what to install."""

from __future__ import annotations

import pytest

from engine.devices import discover
from engine.devices import opencl as cl


def _no_platform():
    raise RuntimeError("clGetPlatformIDs failed: PLATFORM_NOT_FOUND_KHR")


def test_no_opencl_platform_is_one_note_naming_the_package(monkeypatch):
    if cl.cl is None:
        pytest.skip("pyopencl is not importable")
    monkeypatch.setattr(cl.cl, "get_platforms", _no_platform)
    notes: list[str] = []
    devices = discover(native=False, notes=notes, cuda=False)
    assert [d.name for d in devices] == ["numpy", "blas"]
    assert len(notes) == 1 and "\n" not in notes[0]
    assert notes[0].startswith("OpenCL devices not offered: no OpenCL platform found")
    assert "pocl-opencl-icd" in notes[0]


def test_a_note_exactly_when_no_opencl_device_is_found():
    notes: list[str] = []
    opencl = [d for d in discover(native=False, notes=notes, cuda=False) if d.pool != "host"]
    assert bool(notes) != bool(opencl)

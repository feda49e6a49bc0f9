"""Devices that run kernels: numpy on the host, BLAS library kernels, native C on the host, OpenCL (pyopencl)."""

from __future__ import annotations

from engine.devices.base import HOST, Device, Variant
from engine.devices.numpy_device import LibraryDevice, NumpyDevice


def discover(opencl: bool = True, native: bool = True, notes: list[str] | None = None) -> list[Device]:
    """The numpy device and the BLAS library (always), the native C device when a C compiler works, then every
    OpenCL device found.  Why a device kind is missing is appended to ``notes`` (one line each)."""
    found: list[Device] = [NumpyDevice(), LibraryDevice()]
    if native:
        from engine.devices import native as c

        devices, note = c.discover()
        found.extend(devices)
        if note is not None and notes is not None:
            notes.append(note)
    if opencl:
        from engine.devices import opencl as cl  # pyopencl is imported only when OpenCL is wanted

        found.extend(cl.discover(notes))
    return found


__all__ = ["HOST", "Device", "LibraryDevice", "NumpyDevice", "Variant", "discover"]

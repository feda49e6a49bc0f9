"""Devices that run kernels: numpy on the host, BLAS library kernels, OpenCL (pyopencl)."""

from __future__ import annotations

from engine.devices.base import HOST, Device, Variant
from engine.devices.numpy_device import LibraryDevice, NumpyDevice


def discover(opencl: bool = True) -> list[Device]:
    """The numpy device and the BLAS library (always), then every OpenCL device found."""
    found: list[Device] = [NumpyDevice(), LibraryDevice()]
    if opencl:
        from engine.devices import opencl as cl  # pyopencl is imported only when OpenCL is wanted

        found.extend(cl.discover())
    return found


__all__ = ["HOST", "Device", "LibraryDevice", "NumpyDevice", "Variant", "discover"]

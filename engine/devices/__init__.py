"""Devices that run kernels: numpy on the host, BLAS library kernels, native C on the host, OpenCL (pyopencl),
cuBLAS on CUDA GPUs (cupy)."""

from __future__ import annotations

from engine.devices.base import Device
from engine.devices.numpy_device import LibraryDevice, NumpyDevice


def discover(opencl: bool = True, native: bool = True, notes: list[str] | None = None,
             cuda: bool = True) -> list[Device]:
    """The numpy device and the BLAS library (always), the native C device when a C compiler works, every
    OpenCL device found, then a cuBLAS device per CUDA GPU (where cupy works).
    Why a device kind is missing is appended to ``notes`` (one line each)."""
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
    if cuda:
        from engine.devices import cuda_blas  # cupy is imported only when CUDA is wanted

        found.extend(cuda_blas.discover(notes))
    return found


__all__ = ["Device", "LibraryDevice", "NumpyDevice", "discover"]

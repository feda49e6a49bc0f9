"""The Device contract (``engine.devices.base.Device``): every device class implements all of it, and what a
device lacks has the base's default, so the engine never probes a device's attributes."""

from __future__ import annotations

import inspect

import pytest

from engine.devices import Device, LibraryDevice, NumpyDevice, discover
from engine.devices.base import Nominal, Source
from engine.devices.cuda_blas import CublasDevice
from engine.devices.native import NativeDevice
from engine.devices.opencl import OpenCLDevice
from engine.devices.source import device_source
from engine.kernel.schedule import DEFAULT_VARIANT, Variant
from tests.test_autotune import matmul
from tests.test_cuda_blas import _host_cublas

CLASSES = [NumpyDevice, LibraryDevice, NativeDevice, OpenCLDevice, CublasDevice]

ATTRIBUTES = {"name": str, "pool": str, "driver_version": str, "is_gpu": bool, "tunable": bool,
              "launch_overhead": float}


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_every_device_class_implements_the_whole_contract(cls):
    assert issubclass(cls, Device) and not inspect.isabstract(cls), inspect.getattr_static(cls, "__abstractmethods__")


def _devices() -> list[Device]:
    return [*discover(cuda=False), _host_cublas()]


def test_every_device_found_declares_its_capabilities():
    for device in _devices():
        for name, kind in ATTRIBUTES.items():
            assert isinstance(getattr(device, name), kind), (device.name, name)
        assert device.lost is None and (device.nominal is None or isinstance(device.nominal, Nominal))
        assert device.tunable == (not isinstance(device, NumpyDevice)), device.name


def test_every_device_says_what_it_runs():
    k = matmul()
    for device in _devices():
        if not device.supports(k):
            continue
        src = device.source(k, DEFAULT_VARIANT)
        assert isinstance(src, Source) and src.title and src.language and k.name in src.text, device.name
        assert device_source(device, k) == src


def test_a_device_without_variants_runs_the_default_alone_and_builds_nothing_ahead():
    device, k = NumpyDevice(threads=1), matmul()
    assert device.variant_error(k, DEFAULT_VARIANT) is None
    assert device.variant_error(k, Variant(upcast=4)) == "numpy has only the default variant"
    assert device.predict(k, Variant(upcast=4)) == device.estimate(k) and device.driver_version.startswith("numpy ")
    assert device.compile_many([(k, DEFAULT_VARIANT)]) is None and not device.is_gpu and device.nominal is None

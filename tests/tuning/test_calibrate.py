"""The calibrated cost model: fitted by micro-benchmarks, kept per device and driver, refit by measurements."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from engine.devices import NumpyDevice
from engine.devices.base import DEFAULT_VARIANT
from engine.tuning import CacheWarning
from engine.tuning.calibrate import Calibrations, micro_kernels, shape
from tests.test_autotune import matmul


def test_micro_benchmarks_fit_a_device_once_and_it_is_read_back(tmp_path):
    device = NumpyDevice(threads=1)
    first = Calibrations(tmp_path)
    fitted = first.get(device)
    assert fitted.observations == len(micro_kernels()) - 1  # the tiny launch gives the overhead, not a factor
    assert set(fitted.shapes) == {shape(k) for k in micro_kernels()[1:]} and fitted.overhead > 0
    stored = json.loads((tmp_path / "calibration.json").read_text())["devices"]
    assert list(stored) == [f"numpy|numpy {np.__version__}"]  # keyed by device and driver
    again = Calibrations(tmp_path, fit=False).get(device)
    assert again == fitted
    k = matmul()
    assert Calibrations(tmp_path, fit=False).predict(k, device) == first.predict(k, device)


def test_a_corrupt_calibration_is_reported_and_fitted_again(tmp_path):
    (tmp_path / "calibration.json").write_text("{not json")
    with pytest.warns(CacheWarning, match="calibration"):
        c = Calibrations(tmp_path).get(NumpyDevice(threads=1))
    assert c.observations > 0 and json.loads((tmp_path / "calibration.json").read_text())["format"] == 1


def test_without_measurements_the_model_is_the_nominal_roofline():
    device = NumpyDevice(threads=1)
    k = matmul()
    assert math.isclose(Calibrations(persist=False, fit=False).predict(k, device, DEFAULT_VARIANT),
                        device.estimate(k))


class FreshCostDevice(NumpyDevice):
    """Launches take 1 ms, plus ``FRESH`` seconds per byte when they write an output buffer for the first time."""

    FRESH = 2e-10

    def __init__(self) -> None:
        super().__init__(threads=1)
        self.touched: set[int] = set()

    def launch(self, compiled, inputs, outputs):
        super().launch(compiled, inputs, outputs)
        fresh = sum(o.nbytes for o in outputs if id(o) not in self.touched)
        self.touched.update(id(o) for o in outputs)
        return 1e-3 + self.FRESH * fresh

    def free(self, handle):
        self.touched.discard(id(handle))
        super().free(handle)


def test_calibration_recovers_the_first_touch_cost_of_fresh_outputs_and_charges_it_per_output_byte():
    device = FreshCostDevice()
    calibrations = Calibrations(persist=False)
    assert math.isclose(calibrations.get(device).fresh, FreshCostDevice.FRESH, rel_tol=1e-6)
    k = matmul()
    nbytes = sum(b.nbytes for b in k.output_types)
    assert math.isclose(calibrations.output_cost(k, device), FreshCostDevice.FRESH * nbytes, rel_tol=1e-6)


def test_a_plans_launches_are_priced_with_the_first_touch_of_their_fresh_outputs():
    import sample_graphs
    from engine import load
    from engine.pipeline import Options, compile_program, extract

    device = NumpyDevice(threads=1)
    c = compile_program(load(sample_graphs.path("mlp.small")), [device],
                        Options(tune=False, tune_cache=False, execute=False))
    c.calibrations.get(device).fresh = 1e-9
    extract(c)
    times = {c.kernelization.candidates[kn.candidate].kernel.key: t for kn, t in c.kernel_times.items()}
    for launch in c.plan.launches():
        nbytes = sum(b.nbytes for b in launch.kernel.output_types)
        assert math.isclose(launch.predicted, times[launch.kernel.key] + 1e-9 * nbytes)

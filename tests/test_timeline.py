"""The timeline of a plan: bars one after another at their measured (or predicted) times, a lane per device, copies
on the device pool's lane, the memory each pool holds; and its SVG picture."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from engine import Tensor, from_tensors
from engine.devices import NumpyDevice, discover
from engine.export.timeline_svg import timeline_svg
from engine.pipeline import Options, compile_program
from engine.plan import Allocate, Copy, Execution, Launch
from engine.timeline import timeline

CPU_OPENCL = [d for d in discover() if d.name.startswith("opencl:") and not d.is_gpu][:1]
needs_opencl = pytest.mark.skipif(not CPU_OPENCL, reason="no OpenCL CPU device (install pocl-opencl-icd)")
SVG = "{http://www.w3.org/2000/svg}"


def _program():
    x = Tensor.input("x", (8, 16))
    return from_tensors([x.softmax().named("y"), (x * 2).named("z")])


def _fake_run(plan, seconds=lambda i: 0.001 * (i + 1)):
    """An execution of ``plan`` whose launches and copies took known times (step i: (i + 1) ms)."""
    timed = [seconds(i) if isinstance(s, Launch | Copy) else 0.0 for i, s in enumerate(plan.steps)]
    return Execution({}, tuple(timed))


def test_bars_follow_each_other_at_the_measured_times():
    c = compile_program(_program(), [NumpyDevice()], Options(tune=False, tune_cache=False, execute=False))
    run = _fake_run(c.plan)
    t = timeline(c.plan, run, c.devices)
    assert t.measured and t.lanes == ("numpy",)
    assert [b.step for b in t.bars] == [i for i, s in enumerate(c.plan.steps) if isinstance(s, Launch | Copy)]
    assert [b.seconds for b in t.bars] == [run.step_times[b.step] for b in t.bars]
    assert t.bars[0].start == 0 and all(a.end == pytest.approx(b.start) for a, b in zip(t.bars, t.bars[1:]))
    assert t.total == pytest.approx(run.total)
    assert t.busiest(1)[0] is max(t.bars, key=lambda b: b.seconds)
    (host,) = t.memory
    assert host.pool == "host" and host.peak == c.plan.peak_bytes and len(host.held) == len(c.plan.steps)
    outputs = set(c.plan.outputs.values())
    assert host.held[-1] == sum(s.buffer.nbytes for s in c.plan.steps if isinstance(s, Allocate) and s.value in outputs)


def test_without_a_run_the_bars_are_the_predictions():
    c = compile_program(_program(), [NumpyDevice()], Options(tune=False, tune_cache=False, execute=False))
    t = timeline(c.plan, None, c.devices)
    assert not t.measured and not any(b.measured for b in t.bars)
    assert [b.seconds for b in t.bars] == [c.plan.steps[b.step].predicted for b in t.bars]
    with pytest.raises(ValueError, match="step times"):
        timeline(c.plan, Execution({}, (0.0,)), c.devices)


@needs_opencl
def test_copies_go_on_the_device_lane_and_each_pool_has_its_memory():
    (device,) = CPU_OPENCL
    c = compile_program(_program(), CPU_OPENCL, Options(tune=False, tune_cache=False))
    t = timeline(c.plan, c.execution, c.devices)
    copies = [b for b in t.bars if b.kind == "copy"]
    assert copies and {b.lane for b in copies} == {device.name} and t.lanes == (device.name,)
    pools = {m.pool: m for m in t.memory}
    assert set(pools) == {"host", device.pool}
    assert max(pools.values(), key=lambda m: m.peak).peak <= c.plan.peak_bytes <= sum(m.peak for m in t.memory)


def test_the_svg_draws_every_bar_to_scale_with_its_tooltip():
    c = compile_program(_program(), [NumpyDevice()], Options(tune=False, tune_cache=False, execute=False))
    t = timeline(c.plan, _fake_run(c.plan), c.devices)
    root = ET.fromstring(timeline_svg(t, "plan", {}))
    bars = [r for r in root.iter(f"{SVG}rect") if r.find(f"{SVG}title") is not None]
    assert len(bars) == len(t.bars)
    widths = [float(r.get("width")) for r in bars]
    for (w, b) in zip(widths, t.bars):  # to scale: width / seconds is one constant
        assert w / b.seconds == pytest.approx(widths[0] / t.bars[0].seconds, rel=1e-3)
    assert all("measured" in r.find(f"{SVG}title").text for r in bars)
    assert len(list(root.iter(f"{SVG}polygon"))) == len(t.memory)
    predicted = ET.fromstring(timeline_svg(timeline(c.plan, None, c.devices), "plan", {}))
    assert all(r.get("stroke-dasharray") for r in predicted.iter(f"{SVG}rect") if r.find(f"{SVG}title") is not None)

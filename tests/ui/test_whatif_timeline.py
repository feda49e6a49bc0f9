"""Pilot tests of the what-if run (``r`` after a pin) and the timeline screen (``T``), on small samples compiled
with the cost model (no tuning): fast and deterministic."""

from __future__ import annotations

import math
import threading
import types

import pytest

from engine import pipeline, units
from engine.pipeline import Options
from engine.plan import execute
from engine.timeline import Bar, PoolMemory, Timeline
from tests.ui.conftest import compiled, plain
from zyx_explorer import app as app_module
from zyx_explorer import model
from zyx_explorer.screens.timeline import TimelineScreen
from zyx_explorer.widgets.class_detail import ClassDetail
from zyx_explorer.widgets.timeline_view import LEVELS, RIGHT, TimelineView, timeline_text

FAST = Options(tune=False, tune_cache=False)


async def _until(pilot, condition, limit: int = 500) -> bool:
    for _ in range(limit):
        if condition():
            return True
        await pilot.pause(0.02)
    return False


async def _pin_slowest_output_kernel(app, pilot) -> int:
    """Pin the output class to its slowest kernel form (never the one the plan chose); returns that node."""
    c = app.session.compilation
    out = next(iter(c.egraph.output_classes().values()))
    slow = max((n for n in c.egraph.eclass(out).nodes if c.egraph.node(n).op == "kernel"),
               key=lambda n: c.kernel_times[c.egraph.node(n).param])
    app.main.select_class(out, tab=True)
    await pilot.pause()
    detail = app.query_one(ClassDetail)
    detail.forms.focus()
    detail.forms.cursor = detail.forms.index_of(("form", slow))
    await pilot.press("p")
    assert app.session.pins == {out: slow}
    what = app.session.what
    said = [n.message for n in app._notifications if n.title == "What-if"][-1]
    assert f"pinned c{out} to n{slow}: predicted {units.seconds(what.predicted[0])} -> " in said
    assert said.endswith(f"; extraction {what.delta}")  # the engine's extract.compare, not a sum made here
    assert what.delta.dag > 0 and what.predicted_delta > 0  # the slowest form costs more, in both terms
    return slow


class TestWhatIfRun:
    async def test_r_measures_and_verifies_the_pinned_plan_beside_the_prediction(self, app_factory, monkeypatch):
        app = app_factory(options=FAST)
        ran = []
        monkeypatch.setattr(pipeline, "execute", lambda plan, *a: ran.append(plan) or execute(plan, *a))
        async with app.run_test(size=(140, 40)) as pilot:
            await compiled(pilot)
            base = app.session.compilation
            base_times = base.execution.step_times
            await _pin_slowest_output_kernel(app, pilot)
            whatif = app.session.whatif
            assert whatif.execution is None
            ran.clear()
            await pilot.press("r")
            assert await _until(pilot, lambda: app.session.whatif_run is not None), "the what-if never ran"
            run = app.session.whatif_run
            assert run.verification.ok and whatif.verification is run.verification
            assert [id(p) for p in ran] == [id(base.plan), id(whatif.plan)] * 3  # alternating, 3 runs each
            assert run.predicted == (base.plan.predicted, whatif.plan.predicted)
            assert all(math.isfinite(t) and t > 0 for t in run.measured)
            assert len(run.execution.step_times) == len(whatif.plan.steps)  # the what-if's own run...
            assert run.execution.total == run.measured[1] != run.measured[0]  # ...not the base plan's
            assert base.execution.step_times == base_times  # the real compilation is untouched
            shown = [str(n.message) for n in app._notifications if n.title == "What-if run"]
            assert shown and "measured" in shown[-1] and "predicted" in shown[-1] and "verification ok" in shown[-1]
            await pilot.press("4")
            await pilot.pause()
            summary = str(app.query_one("#plan-summary").render())
            assert "measured" in summary and "fastest of 3" in summary
            await pilot.press("u")  # unpinned: the run goes with its pin
            assert app.session.whatif_run is None

    async def test_r_without_a_pin_is_refused(self, app_factory):
        app = app_factory(options=FAST)
        async with app.run_test(size=(140, 40)) as pilot:
            await compiled(pilot)
            await pilot.press("r")
            await pilot.pause()
            assert app.session.whatif_run is None
            assert any("pin a form" in str(n.message) for n in app._notifications)


class TestTimeline:
    @pytest.mark.parametrize("size", [(80, 24), (160, 48)])
    async def test_t_shows_each_device_lane_to_the_terminal_width(self, app_factory, size):
        app = app_factory(options=FAST)
        async with app.run_test(size=size) as pilot:
            await compiled(pilot)
            await pilot.press("T")
            await pilot.pause()
            assert isinstance(app.screen, TimelineScreen)
            assert not app.check_action("sort", ()) and not app.check_action("pin", ())  # the panes' keys are off
            assert app.check_action("run_what_if", ()) and app.check_action("quit", ())
            text = plain(app.screen.query_one(TimelineView), size[0])
            lines = text.splitlines()
            assert "measured: each step's measured time" in lines[0]
            c = app.session.compilation
            short = app.session.short()
            ((_, t),) = app.session.timelines(app.main.viewed)
            axis = next(line for line in lines if "┤" in line)
            start, cols = axis.index("0"), axis.index("┤") - axis.index("0") + 1
            for device in {s.device for s in c.plan.launches()}:
                lane = next(line for line in lines if line.startswith(short[device] + " "))
                assert size[0] - 4 <= len(lane) <= size[0]  # drawn to the width: never cut, never wrapped
                bars = [b for b in t.bars if b.lane == device]
                cells = lane[start:start + cols].count("█")  # to scale: its share of the time, give or take
                assert abs(cells - t.lane_seconds(device) / t.total * cols) <= len(bars) + 1  # a cell per bar
            assert any(line.startswith("host ") and line.rstrip().endswith(units.nbytes(c.plan.peak_bytes))
                       for line in lines)  # one pool: its peak is the plan's
            await pilot.press("escape")
            assert not isinstance(app.screen, TimelineScreen)

    async def test_a_ran_what_if_gets_its_own_measured_lanes(self, app_factory):
        app = app_factory(options=FAST)
        async with app.run_test(size=(140, 40)) as pilot:
            await compiled(pilot)
            await _pin_slowest_output_kernel(app, pilot)
            await pilot.press("T")
            await pilot.pause()
            text = plain(app.screen.query_one(TimelineView), 140)
            assert "what-if plan (pinned)" in text and "predicted only" in text
            await pilot.press("r")  # from the timeline screen: it shows the run when it ends
            assert await _until(pilot, lambda: app.session.whatif_run is not None), "the what-if never ran"
            await pilot.pause()
            text = plain(app.screen.query_one(TimelineView), 140)
            assert "predicted only" not in text and text.count("measured: each step's measured time") == 2


def test_bars_are_drawn_where_and_as_long_as_they_ran():
    """Two lanes over 4 s: a runs 0-1 s and 3-4 s, b 1-3 s, a copy on b 3-3.01 s (thinner than a cell)."""
    bars = (Bar(0, "a", "launch", "k0", 0.0, 1.0, True), Bar(1, "b", "launch", "k1", 1.0, 2.0, True),
            Bar(2, "b", "copy", "c1", 3.0, 0.01, True), Bar(3, "a", "launch", "k2", 3.01, 0.99, True))
    t = Timeline(("a", "b"), bars, (1.0, 3.0, 3.01, 4.0), (PoolMemory("host", (4, 8, 8, 2), 8),), True)
    label = 6  # the narrowest lane label
    lines = timeline_text([("plan", t)], label + 2 + 40 + RIGHT, {}).plain.splitlines()
    lane = {line.split()[0]: line[label + 2: label + 2 + 40] for line in lines if line.split()[:1] in (["a"], ["b"], ["host"])}
    assert lane["a"] == "█" * 10 + " " * 20 + "█" * 10
    assert lane["b"] == " " * 10 + "█" * 20 + "▏" + " " * 9
    # the bytes held, from each step's start: 8 during the cell where the copy (3.0 s) and k2 (3.01 s) start
    assert lane["host"] == LEVELS[4] * 10 + LEVELS[8] * 21 + LEVELS[2] * 9


async def test_the_ui_answers_keys_while_the_what_if_runs(app_factory, monkeypatch):
    """The run is held until the test lets it go: meanwhile a key still switches the pane."""
    release, real = threading.Event(), pipeline.run_what_if
    threads = []
    monkeypatch.setattr(app_module, "run_what_if",
                        lambda *a: threads.append(threading.current_thread()) or (release.wait(10) and real(*a)))
    app = app_factory(options=FAST)
    async with app.run_test(size=(140, 40)) as pilot:
        await compiled(pilot)
        await _pin_slowest_output_kernel(app, pilot)
        await pilot.press("r", "7")
        await pilot.pause()
        assert app.query_one("#tabs").active == "results-tab" and app.session.whatif_run is None
        release.set()
        assert await _until(pilot, lambda: app.session.whatif_run is not None), "the what-if never ran"
        await pilot.pause()  # the panes it refreshed settle before the app closes
        assert threads and threads[0] is not threading.main_thread()


def test_a_measured_delta_within_the_runs_spread_is_called_noise():
    ok = types.SimpleNamespace(ok=True)
    noisy = pipeline.WhatIfRun((1e-3, 2e-3), ((1.0e-3, 1.2e-3, 1.1e-3), (1.05e-3, 1.3e-3, 1.15e-3)), None, ok)
    assert noisy.measured == (1.0e-3, 1.05e-3) and noisy.spread == pytest.approx(0.25e-3) and noisy.repeats == 3
    assert "runs spread 250 µs: within it, no measurable difference" in model.what_if_text(noisy)
    clear = pipeline.WhatIfRun((1e-3, 2e-3), ((1e-3, 1e-3), (2e-3, 2.1e-3)), None, ok)
    text = model.what_if_text(clear)
    assert "measured 1.00 ms -> 2.00 ms (+1.00 ms, fastest of 2 runs each; runs spread 100 µs)" in text
    assert "predicted 1.00 ms -> 2.00 ms (+1.00 ms)" in text and "verification ok" in text

"""The explorer driven with Textual's Pilot: every pane and binding, on the small MLP (numpy + BLAS devices)."""

from __future__ import annotations

import dataclasses
import math
import re
import threading

import pytest
from textual.widget import Widget

from engine import STAGES, Options, compile_stages, units
from engine.devices import NumpyDevice
from engine.kernel.attach import KernelNode
from engine.kernel.schedule import DEFAULT_VARIANT, Variant
from engine.program.dtypes import DType
from engine.tuning import FAILED, OK, WRONG, Trial, TuneResult
from engine.tuning.calibrate import micro_kernels, op_probes
from tests.ui.conftest import compiled, plain
from zyx_explorer import app as app_module
from zyx_explorer import model
from zyx_explorer.app import ExplorerApp
from zyx_explorer.commands import ExplorerCommands
from zyx_explorer.screens.help import HelpScreen
from zyx_explorer.screens.main import KEYS
from zyx_explorer.widgets.class_detail import ClassDetail
from zyx_explorer.widgets.classes_table import ClassesTable
from zyx_explorer.widgets.costs_table import CostsTable
from zyx_explorer.widgets.line_table import matches
from zyx_explorer.widgets.plan_table import PlanTable
from zyx_explorer.widgets.program_table import ProgramTable
from zyx_explorer.widgets.results_view import ResultsView
from zyx_explorer.widgets.rewrites_table import RewritesTable
from zyx_explorer.widgets.source_view import SourceView, times_text
from zyx_explorer.widgets.stage_bar import StageBar
from zyx_explorer.widgets.tensor_detail import TensorDetail
from zyx_explorer.widgets.variants_table import VariantsTable

SIZE = (140, 40)


def _output_class(app: ExplorerApp) -> int:
    return next(iter(app.session.compilation.egraph.output_classes().values()))


def _form_index(app: ExplorerApp, node: int) -> int:
    return app.query_one(ClassDetail).forms.index_of(("form", node))


class TestProgramPane:
    async def test_table_lists_every_tensor_and_detail_follows_the_cursor(self, app_factory):
        app = app_factory()
        async with app.run_test(size=SIZE) as pilot:
            table = app.query_one(ProgramTable)
            assert table.row_count == len(app.program.inputs) + len(app.program.nodes)
            detail = app.query_one(TensorDetail)
            assert detail.summary.plain.startswith("x = input: [8, 16] f32")
            await pilot.press(*["down"] * 6)  # x w1 b1 w2 b2 t0 -> t1
            assert detail.summary.plain.startswith("t1 = add(t0, b1): [8, 32] f32")
            assert list(detail.lowering.columns[1].cells) == ["reshape", "expand", "add"]
            await pilot.press("slash", *"matmul", "enter")  # the program table filters too
            assert [row.key for row in table.shown] == ["t0", "t2"]
            assert detail.summary.plain.startswith("t0 = matmul(x, w1)")
            await compiled(pilot)


class TestStages:
    async def test_every_stage_arrives_and_the_bar_follows(self, app_factory):
        app = app_factory()
        async with app.run_test(size=SIZE) as pilot:
            await compiled(pilot)
            assert app.session.done == list(STAGES) and app.main.viewed == STAGES[-1]
            bar = str(app.query_one(StageBar).render())
            assert "executed ✓" in bar and "done in" in bar
            assert "tuned ✓" in bar

    async def test_an_earlier_stage_viewed_is_said_in_the_bar(self, app_factory):
        app = app_factory()
        async with app.run_test(size=(80, 24)) as pilot:
            await compiled(pilot)
            await pilot.press("left_square_bracket", "left_square_bracket")
            bar = str(app.query_one(StageBar).render())
            assert "▶tuned ✓◀" in bar and "viewing tuned, not the latest (executed): ] moves on" in bar
            await pilot.press("right_square_bracket", "right_square_bracket")
            assert "viewing" not in str(app.query_one(StageBar).render())

    async def test_brackets_switch_the_stage_and_every_pane_follows(self, app_factory):
        app = app_factory()
        async with app.run_test(size=SIZE) as pilot:
            await compiled(pilot)
            await pilot.press("2")
            table = app.query_one(ClassesTable)
            final = table.row_count
            await pilot.press(*["left_square_bracket"] * (len(STAGES) - 2))  # -> egraph
            assert app.main.viewed == "egraph"
            assert table.row_count == app.session.egraph("egraph").num_classes < final
            assert app.query_one(PlanTable).row_count == 0 and app.query_one(CostsTable).row_count == 0
            await pilot.press("left_square_bracket")
            assert app.main.viewed == "program" and table.row_count == 0
            await pilot.press(*["right_square_bracket"] * 10)
            assert app.main.viewed == STAGES[-1] and table.row_count == final

    async def test_the_iteration_scrubber_steps_through_the_rewrite_log(self, app_factory):
        app = app_factory()
        async with app.run_test(size=SIZE) as pilot:
            await compiled(pilot)
            total = app.session.iterations()
            assert total >= 2
            await pilot.press("comma")
            assert app.main.viewed == "saturated" and app.main.iteration == total - 1
            snapshot = app.session.compilation.saturation.snapshot(total - 1)
            assert app.query_one(ClassesTable).row_count == snapshot.num_classes
            applied = sum(len(it.applications) for it in app.session.compilation.saturation.iterations[: total - 1])
            assert app.query_one(RewritesTable).row_count == applied
            assert f"it {total - 1}/{total}" in str(app.query_one(StageBar).render())
            await pilot.press(*["comma"] * (total + 3))
            assert app.main.iteration == 0
            await pilot.press(*["full_stop"] * (total + 3))
            assert app.main.iteration is None  # the last iteration: the saturated e-graph itself


class TestClassesPane:
    async def test_every_class_is_listed_and_filter_narrows_them(self, app_factory):
        app = app_factory()
        async with app.run_test(size=SIZE) as pilot:
            await compiled(pilot)
            await pilot.press("2")
            table = app.query_one(ClassesTable)
            assert table.row_count == app.session.compilation.egraph.num_classes
            await pilot.press("slash", *"kernel")
            assert 0 < table.row_count < app.session.compilation.egraph.num_classes
            assert all("kernel" in row.search for row in table.shown)
            await pilot.press("enter")  # keeps the filter, back to the table
            assert table.has_focus and table.query_text == "kernel"
            await pilot.press("slash", "escape")
            assert table.query_text == "" and table.row_count == app.session.compilation.egraph.num_classes

    async def test_s_cycles_the_sort(self, app_factory):
        app = app_factory()
        async with app.run_test(size=SIZE) as pilot:
            await compiled(pilot)
            await pilot.press("2")
            table = app.query_one(ClassesTable)
            ids = [row.key for row in table.shown]
            assert ids == sorted(ids)
            await pilot.press("s")  # most forms first
            forms = [len(app.session.compilation.egraph.eclass(r.key).nodes) for r in table.shown]
            assert forms == sorted(forms, reverse=True)

    async def test_cursor_moves_the_detail_and_clicks_select(self, app_factory):
        app = app_factory()
        async with app.run_test(size=SIZE) as pilot:
            await compiled(pilot)
            await pilot.press("2", "down", "down")
            table = app.query_one(ClassesTable)
            assert app.main.selected == table.shown[2].key == app.query_one(ClassDetail).cid
            await pilot.press("end")
            assert app.main.selected == table.shown[-1].key
            await pilot.click(ClassesTable, offset=(2, 2))  # the header is line 0
            assert table.cursor == round(table.scroll_y) + 1

    def test_filter_terms_and_fuzzy(self):
        assert matches("add [8, 32]", "c14 [8, 32] f32 add×2")
        assert not matches("mul", "c14 [8, 32] f32 add×2")
        assert matches("~ad2", "c14 add×2")


class TestClassDetail:
    async def test_forms_chosen_mark_children_follow_and_back(self, app_factory):
        app = app_factory()
        async with app.run_test(size=SIZE) as pilot:
            await compiled(pilot)
            out = _output_class(app)
            app.main.select_class(out, tab=True)
            await pilot.pause()
            before = list(app.main.history)
            detail = app.query_one(ClassDetail)
            head = str(detail.query_one("#detail-head").render())
            assert f"c{out}" in head and "chosen" in head and "output y" in head
            assert detail.chosen and detail.chosen <= set(app.session.compilation.egraph.eclass(out).nodes)
            forms = detail.forms
            child = next(i for i in range(forms.row_count) if forms.key_at(i)[0] == "child")
            forms.focus()
            forms.cursor = child
            target = forms.key_at(child)[1]
            await pilot.press("enter")
            assert app.main.selected == target and app.main.history == [*before, out]
            await pilot.press("backspace")
            assert app.main.selected == out and app.main.history == before

    async def test_a_cursor_move_redraws_the_detail_within_the_move_and_lays_nothing_out(self, app_factory,
                                                                                       monkeypatch):
        """What keeps keys fast on big e-graphs: the detail follows the cursor before the next frame, and neither
        the table nor the detail asks for a relayout (which repaints the whole screen)."""
        app = app_factory()
        async with app.run_test(size=SIZE) as pilot:
            await compiled(pilot)
            await pilot.press("2")
            await pilot.pause()
            table, detail = app.query_one(ClassesTable), app.query_one(ClassDetail)
            eg = app.main.shown_egraph()
            layouts: list[str] = []
            refresh = Widget.refresh

            def spy(widget, *regions, layout=False, **kwargs):
                if layout:
                    layouts.append(f"{type(widget).__name__}#{widget.id}")
                return refresh(widget, *regions, layout=layout, **kwargs)

            for _ in range(6):  # once over the rows: the detail head grows to its tallest why line (one layout)
                table.action_move(1)
            table.action_jump(0)
            await pilot.pause()
            monkeypatch.setattr(Widget, "refresh", spy)
            for _ in range(6):
                table.action_move(1)
                assert detail.cid == eg.find(table.current_key)  # no message round trip, no frame in between
                await pilot.pause()
            table.action_jump(-1)
            assert detail.cid == eg.find(table.current_key)
            await pilot.pause()
            assert layouts == []

    async def test_enter_on_a_form_explains_it_against_the_chosen_one(self, app_factory):
        app = app_factory()
        async with app.run_test(size=SIZE) as pilot:
            await compiled(pilot)
            out = _output_class(app)
            app.main.select_class(out, tab=True)
            await pilot.pause()
            detail = app.query_one(ClassDetail)
            eg = app.session.compilation.egraph
            structural = next(n for n in eg.eclass(out).nodes if eg.node(n).op not in ("kernel", "to_device"))
            detail.forms.focus()
            detail.forms.cursor = _form_index(app, structural)
            await pilot.press("enter")
            assert detail.explanation.startswith("why n") and f"n{structural}" in detail.explanation
            await pilot.press("m")
            assert detail.marked == structural
            other = next(n for n in eg.eclass(out).nodes if eg.node(n).op not in ("kernel", "to_device")
                         and n != structural)
            detail.forms.cursor = _form_index(app, other)
            await pilot.press("x")
            assert f"why n{structural} = n{other}" in detail.explanation


class TestCostsAndSource:
    async def test_kernel_by_device_matrix_and_source(self, app_factory):
        app = app_factory()
        async with app.run_test(size=SIZE) as pilot:
            await compiled(pilot)
            await pilot.press("3")
            costs = app.query_one(CostsTable)
            c = app.session.compilation
            assert costs.row_count == len(c.kernelization.candidates)
            assert [col.label for col in costs.columns[3:]] == [d.name for d in c.devices]
            assert any("*" in cell for row in costs.shown for cell in row.cells)  # the chosen kernel
            await pilot.press("down", "enter")
            assert app.main._active_tab() == "source"
            source = app.query_one(SourceView)
            assert source.cand_id == costs.shown[1].key
            device = source.variant[0]  # what runs on the launched device, not OpenCL C: numpy or blas here
            assert device in ("numpy", "blas") and source.source_text.startswith(f"# {device}: ")
            assert "__kernel" not in source.source_text


def test_the_source_pane_shows_a_kernels_time_and_its_plan_price_where_they_differ():
    text = times_text({"numpy": (14.6e-3, True, 15.3e-3), "blas": (13.4e-3, True, 13.4e-3),
                       "opencl:x": (278e-3, False, 278.1e-3)}, {"opencl:x": "cl0"}).plain.splitlines()
    assert text[:3] == ["  numpy: 14.6 ms measured, 15.3 ms in a plan", "  blas: 13.4 ms measured",
                        "  cl0: 278 ms predicted"]  # the same to three digits: no second figure
    assert text[3].startswith("  in a plan: plus its fresh outputs' first touch") and len(text) == 4
    assert "in a plan" not in times_text({"blas": (13.4e-3, True, 13.4e-3)}, {}).plain


class TestPlanPane:
    async def test_steps_totals_and_enter_selects_the_class(self, app_factory):
        app = app_factory()
        async with app.run_test(size=SIZE) as pilot:
            await compiled(pilot)
            await pilot.press("4")
            plan = app.session.compilation.plan
            table = app.query_one(PlanTable)
            assert table.row_count == len(plan.steps)
            summary = str(app.query_one("#plan-summary").render())
            assert "peak memory" in summary and "predicted" in summary and "measured" in summary
            launch = next(i for i, s in enumerate(plan.steps) if type(s).__name__ == "Launch")
            await pilot.press(*["down"] * launch)
            assert table.shown[launch].cells[1] == "Launch" and table.shown[launch].cells[6]  # measured
            assert app.main.kernel is not None
            await pilot.press("enter")
            assert app.main._active_tab() == "classes" and app.main.selected == plan.steps[launch].outputs[0][0]

    async def test_a_plan_for_resident_inputs_says_its_uploads_are_priced_at_nothing(self, app_factory):
        app = app_factory(options=Options(tune=False, tune_cache=False, resident_inputs=True))
        async with app.run_test(size=SIZE) as pilot:
            await compiled(pilot)
            await pilot.press("4")
            assert app.session.compilation.resident
            assert ("planned for inputs resident on the devices (their uploads priced at nothing), the runs reuse them"
                    in str(app.query_one("#plan-summary").render()))


class TestRewritesPane:
    async def test_filter_by_rule_and_jump_to_the_merged_class(self, app_factory):
        app = app_factory()
        async with app.run_test(size=SIZE) as pilot:
            await compiled(pilot)
            await pilot.press("6")
            table = app.query_one(RewritesTable)
            total = table.row_count
            assert total == sum(len(it.applications) for it in app.session.compilation.saturation.iterations)
            await pilot.press("slash", *"commute", "enter")
            assert 0 < table.row_count < total and all(r.cells[1] == "commute" for r in table.shown)
            it, j = table.current_key
            merged = app.session.compilation.saturation.iterations[it - 1].applications[j].merged
            await pilot.press("enter")
            assert app.main._active_tab() == "classes"
            assert app.main.selected == app.main.shown_egraph().find(merged[0])


class TestResultsPane:
    async def test_outputs_and_verification(self, app_factory):
        app = app_factory()
        async with app.run_test(size=SIZE) as pilot:
            await compiled(pilot)
            await pilot.press("7")
            await pilot.pause()
            text = plain(app.query_one(ResultsView))
            assert "Verification against the reference" in text and "ok" in text
            assert app.query_one(ResultsView).display


class TestPins:
    async def test_pin_an_alternative_kernel_shows_the_delta_and_unpin_restores(self, app_factory):
        app = app_factory()
        async with app.run_test(size=SIZE) as pilot:
            await compiled(pilot)
            c = app.session.compilation
            out = _output_class(app)
            chosen = c.extraction.choices[(out, "host")].node
            slow = max((n for n in c.egraph.eclass(out).nodes if c.egraph.node(n).op == "kernel"),
                       key=lambda n: c.kernel_times[c.egraph.node(n).param])
            assert slow != chosen
            app.main.select_class(out, tab=True)
            await pilot.pause()
            detail = app.query_one(ClassDetail)
            detail.forms.focus()
            detail.forms.cursor = _form_index(app, slow)
            await pilot.press("p")
            assert app.session.pins == {out: slow}
            whatif = app.session.whatif
            assert whatif.extraction.choices[(out, "host")].node == slow
            assert whatif.plan.predicted > c.plan.predicted and math.isfinite(whatif.plan.predicted)
            assert c.extraction.choices[(out, "host")].node == chosen  # the real compilation is untouched
            assert slow in detail.chosen and "📌" in detail.forms.text_at(_form_index(app, slow)).plain
            assert any("What-if" in (n.title or "") for n in app._notifications)
            await pilot.press("u")
            assert app.session.pins == {} and app.session.whatif is None and chosen in detail.chosen

    async def test_pin_device_and_refused_pins(self, app_factory):
        app = app_factory()
        async with app.run_test(size=SIZE) as pilot:
            await compiled(pilot)
            c = app.session.compilation
            out = _output_class(app)
            numpy_kernel = next(n for n in c.egraph.eclass(out).nodes if c.egraph.node(n).op == "kernel"
                                and c.egraph.node(n).param.device == "numpy")
            app.main.select_class(out, tab=True)
            await pilot.pause()
            detail = app.query_one(ClassDetail)
            detail.forms.focus()
            detail.forms.cursor = _form_index(app, numpy_kernel)
            await pilot.press("d")
            assert app.session.pins == {out: "numpy"}
            chosen = app.session.whatif.extraction.choices[(out, "host")].node
            assert c.egraph.node(chosen).param.device == "numpy"
            await pilot.press("u")
            transfer = next(n for n in c.egraph.eclass(out).nodes if c.egraph.node(n).op == "to_device")
            detail.forms.cursor = _form_index(app, transfer)
            await pilot.press("p")  # a transfer cannot be pinned: refused with a notification
            assert app.session.pins == {}
            assert any(n.severity == "error" for n in app._notifications)


class TestAppBindings:
    async def test_help_screen_opens_and_closes(self, app_factory):
        app = app_factory()
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("question_mark")
            assert isinstance(app.screen, HelpScreen)
            assert "Pin" in plain(app.screen.query_one("#help-keys"))
            await pilot.press("escape")
            assert not isinstance(app.screen, HelpScreen)
            await compiled(pilot)

    async def test_command_palette_runs_explorer_actions(self, app_factory):
        app = app_factory()
        async with app.run_test(size=SIZE) as pilot:
            await compiled(pilot)
            await pilot.press("ctrl+p", *"show plan")
            for _ in range(50):
                await pilot.pause(0.02)
            await pilot.press("enter")
            await pilot.pause()
            assert app.main._active_tab() == "plan"

    async def test_ctrl_s_saves_an_svg_screenshot_never_over_an_earlier_one(self, app_factory, tmp_path):
        app = app_factory("softmax.small")
        async with app.run_test(size=(100, 30)) as pilot:
            await compiled(pilot)
            await pilot.press("2", "ctrl+s", "ctrl+s")
            await pilot.pause()
        folder = tmp_path / "zyx-explore-softmax"
        shots = sorted(folder.glob("*.svg"))
        assert [s.name for s in shots] == ["screenshot-classes-executed-2.svg", "screenshot-classes-executed.svg"]
        assert all(s.read_text().startswith("<svg") for s in shots)

    async def test_e_exports_the_viewed_stage_into_the_programs_folder_without_overwriting(self, app_factory, tmp_path):
        first, second = app_factory(), app_factory("softmax.small")
        async with first.run_test(size=SIZE) as pilot:
            await compiled(pilot)
            await pilot.press("2", "left_square_bracket", "e")  # the plan stage
            await first.workers.wait_for_complete()
            await pilot.press("e")  # again: plan-2, the first kept
            await first.workers.wait_for_complete()
            await pilot.pause()
            assert first.main.viewed == "plan"
            exports = [n for n in first._notifications if n.title == "Export"]
            assert [n.severity for n in exports] == ["information"] * 2
            assert "plan.svg exists: kept, this export is plan-2" in exports[1].message
        async with second.run_test(size=SIZE) as pilot:  # another sample, same directory: its own folder
            await compiled(pilot)
            await pilot.press("e")
            await second.workers.wait_for_complete()
        mlp, softmax = tmp_path / "zyx-explore-mlp", tmp_path / "zyx-explore-softmax"
        assert sorted(p.name for p in mlp.iterdir()) == ["plan-2.dot", "plan-2.svg", "plan.dot", "plan.svg"]
        assert sorted(p.name for p in softmax.iterdir()) == ["executed.dot", "executed.svg"]
        assert (mlp / "plan.dot").read_text().startswith("digraph")
        assert (mlp / "plan.svg").read_text().lstrip().startswith(("<?xml", "<svg"))

    async def test_q_quits(self, app_factory):
        app = app_factory("sum.small")
        async with app.run_test() as pilot:
            await compiled(pilot)
            await pilot.press("q")
        assert app.return_code == 0


class TestErrors:
    async def test_a_failing_compilation_is_a_notification_and_earlier_stages_stay(self, app_factory):
        app = app_factory(devices=[])  # no device: nothing can compute the outputs
        async with app.run_test(size=SIZE) as pilot:
            await compiled(pilot)
            assert app.session.failed and "kernelized" in app.session.done and "plan" not in app.session.done
            assert any(n.severity == "error" for n in app._notifications)
            assert "failed" in str(app.query_one(StageBar).render())
            await pilot.press("2")
            assert app.query_one(ClassesTable).row_count > 0
            await pilot.press("4")
            assert app.query_one(PlanTable).row_count == 0
            await pilot.press("p")  # pins need a plan: refused, no crash
            assert app.session.pins == {}


class TestOpenCL:
    async def test_compiles_and_runs_on_every_device_found(self, app_factory):
        from engine.devices import discover

        devices = discover()
        app = app_factory(devices=devices)
        async with app.run_test(size=SIZE) as pilot:
            await compiled(pilot, limit=1500)
            assert app.session.failed is None and app.session.compilation.verification.ok
            await pilot.press("3")
            short = units.short_devices(d.name for d in devices)
            assert [col.label for col in app.query_one(CostsTable).columns[3:]] == [short[d.name] for d in devices]
            legend = plain(app.query_one("#costs-legend"))
            assert all(f"{short[d.name]} = {d.name}" in legend for d in devices if short[d.name] != d.name)


class GatedDevice(NumpyDevice):
    """A numpy device whose kernel builds wait until the test lets each one through (until ``open``); the
    calibration's micro-benchmarks pass."""

    name = "gated"

    def __init__(self) -> None:
        super().__init__()
        self.waiting = threading.Semaphore(0)
        self.permits = threading.Semaphore(0)
        self.open = False

    def compile(self, kernel, variant=DEFAULT_VARIANT):
        if not self.open and kernel.key not in {k.key for k in (*micro_kernels(), *op_probes())}:
            self.waiting.release()
            self.permits.acquire(timeout=30)
        return super().compile(kernel, variant)


async def _until(pilot, condition, what: str, limit: int = 500) -> None:
    for _ in range(limit):
        if condition():
            return
        await pilot.pause(0.02)
    raise AssertionError(f"never happened: {what}")


class TestTuning:
    async def test_costs_mark_measured_times_and_list_the_variants_tried(self, app_factory):
        app = app_factory(options=Options(tune_cache=False))
        async with app.run_test(size=SIZE) as pilot:
            await compiled(pilot)
            c = app.session.compilation
            await pilot.press("3")
            await pilot.pause()
            costs, variants = app.query_one(CostsTable), app.query_one(VariantsTable)
            chosen = c.plan_kernels()
            assert chosen and all(kn in c.tuning for kn in chosen)
            row = next(r for r in costs.shown if r.key == chosen[0].candidate)
            column = 3 + [d.name for d in c.devices].index(chosen[0].device)
            assert row.cells[column].endswith("m*")  # measured, chosen
            costs.move_to(chosen[0].candidate)
            await pilot.pause()
            mine = [kn for kn in c.kernel_times if kn.candidate == chosen[0].candidate]
            assert len(variants.shown) == sum(len(c.tuning[kn].trials) if kn in c.tuning else 1 for kn in mine)
            launched = next(r for r in variants.shown if r.cells[0] == "*")
            assert launched.key == (chosen[0].device, c.variants[chosen[0]])
            assert launched.cells[3] == "verified" and launched.cells[6] == "off"
            await pilot.press("tab", "enter")  # the first variant's source, on its device
            await pilot.pause()
            assert app.main._active_tab() == "source"
            source = app.query_one(SourceView)
            assert source.variant == variants.shown[0].key
            assert source.source_text.startswith(f"# {source.variant[0]}: ")
            await pilot.press("3", *["left_square_bracket"] * 3)  # kernelized: nominal estimates, no choice
            await pilot.pause()
            assert app.main.viewed == "kernelized"
            assert all(cell[-2:] in ("e ", "e<") for r in costs.shown for cell in r.cells[3:])
            assert all(r.cells[3] == "not tuned" for r in variants.shown)

    async def test_progress_is_shown_live_and_c_stops_tuning(self, app_factory):
        device = GatedDevice()
        app = app_factory("residual_mlp.small", devices=[device], options=Options(tune_cache=False))
        async with app.run_test(size=(180, 40)) as pilot:
            bar = app.query_one(StageBar)
            await _until(pilot, lambda: device.waiting.acquire(blocking=False), "the first kernel build")
            timing = " on gated: timing local=auto, 0/1 variants, "  # kernel, device, variant now, trials done
            await _until(pilot, lambda: timing in str(bar.render()), "the first kernel's progress line")
            first = str(bar.render())
            device.permits.release()
            await _until(pilot, lambda: timing in str(bar.render()) and str(bar.render()) != first,
                         "the second kernel's progress line")
            assert str(bar.render()).count("tuning ") == 1 and "tuned …" in str(bar.render())
            await _until(pilot, lambda: device.waiting.acquire(blocking=False), "the second kernel build")
            await pilot.press("3")  # the first kernel's measured time shows while the tuner is still running
            costs = app.query_one(CostsTable)
            await _until(pilot, lambda: any(cell[-2] == "m" for r in costs.shown for cell in r.cells[3:]),
                         "a measured cell while tuning")
            assert "tuned …" in str(bar.render())
            assert "1 kernel measured so far" in plain(app.query_one("#costs-legend"))
            budget = re.search(r" of (\d+\.\d) s", str(bar.render()))  # elapsed of the kernel's budget: its 4 s at
            assert budget and 0 < float(budget.group(1)) <= 4.0          # most, less when the total has run down
            assert app.check_action("cancel_tuning", ())
            await pilot.press("c")
            assert "stopping the tuner" in str(bar.render())
            device.open = True
            device.permits.release()
            await compiled(pilot)
            c = app.session.compilation
            # the second kernel was being built when c was pressed: it is never launched
            assert len(c.tuning) == 1 < len(c.plan_kernels()) and c.cancelled
            assert c.verification.ok and "tuned ✓ (stopped)" in str(bar.render())
            assert any(n.title == "Tuning" and "1 kernel" in n.message for n in app._notifications)
            assert app.check_action("cancel_tuning", ()) is False  # c is off once tuned

    def test_variant_rows_show_every_status_with_its_reason(self):
        kn = KernelNode("k_1@c3(c1)", "gpu", (4,), DType.F32)
        fast, slow, bad, broken = (Variant(local_size=n) for n in (64, 32, 16, 8))
        result = TuneResult("key", "gpu", (Trial(slow, OK, 2e-6, 3e-6), Trial(bad, WRONG, None, 1e-6, "out0: 4 differ"),
                                           Trial(fast, OK, 1e-6, 2e-6), Trial(broken, FAILED, None, 1e-6, "build\nlog")),
                            fast, 1e-6, 0.5, "miss")
        other = KernelNode("k_1@c3(c1)", "numpy", (4,), DType.F32)
        rows = model.variant_rows("k_1@c3(c1)", {kn: 1e-6, other: 5e-6}, {kn: result},
                                  lambda k: DEFAULT_VARIANT, ("gpu", slow), {})
        assert [r.cells[:4] for r in rows] == [
            ("+", "gpu", "local=64", "verified"), ("*", "gpu", "local=32", "verified"),
            (" ", "gpu", "local=16", "wrong"), (" ", "gpu", "local=8", "failed"),
            (" ", "numpy", "local=auto", "not tuned")]
        assert rows[0].cells[4:7] == ("1.00 µs", "2.00 µs", "miss") and rows[2].cells[7] == "out0: 4 differ"
        assert rows[3].cells[7] == "build" and rows[4].cells[5] == "5.00 µs"
        timed = dataclasses.replace(result.trials[0], touch=3e-3)  # its launch on a plan's fresh outputs, timed
        measured = dataclasses.replace(result, trials=(timed, *result.trials[1:]))
        rows = model.variant_rows("k_1@c3(c1)", {kn: 1e-6}, {kn: measured}, lambda k: DEFAULT_VARIANT, None, {})
        assert rows[1].cells[2] == "local=32" and measured.touch == 3e-3
        assert rows[1].cells[7] == "a plan's launch pays 3.00 ms more on fresh outputs (measured)"
        assert rows[0].cells[7] == ""


class TestProblems:
    async def test_problems_are_a_warning_and_listed_in_results(self, app_factory, monkeypatch):
        def with_problems(*args, **kwargs):
            for c in compile_stages(*args, **kwargs):
                if c.stage == "plan":
                    c.problems.append("blas failed on k_1: numpy ran it")
                yield c

        monkeypatch.setattr(app_module, "compile_stages", with_problems)
        app = app_factory()
        async with app.run_test(size=SIZE) as pilot:
            await compiled(pilot)
            assert [n.severity for n in app._notifications if "worked around" in (n.title or "")] == ["warning"]
            assert "blas failed on k_1: numpy ran it" in plain(app.query_one(ResultsView))


class TestEveryAction:
    async def test_the_palette_lists_every_binding_by_name_with_its_key(self, app_factory):
        app = app_factory()
        async with app.run_test(size=SIZE) as pilot:
            await compiled(pilot)
            hits = [hit async for hit in ExplorerCommands(app.screen).discover()]
            shown = {str(hit.display): hit.help for hit in hits}
            for b in KEYS:
                if b.id != "cancel-tuning":  # offered only while tuning
                    assert shown[b.tooltip] == f"key: {app.get_key_display(b)}"
            assert not any("action:" in help for help in shown.values())
            assert "Stop tuning (the plan uses what was timed)" not in shown
            system = [c.title for c in app.get_system_commands(app.screen)]
            assert "Theme" in system and "Screenshot" not in system and "Quit" not in system

    async def test_the_help_screen_lists_every_binding(self, app_factory):
        app = app_factory()
        async with app.run_test(size=(140, 60)) as pilot:
            await pilot.press("question_mark")
            text = plain(app.screen.query_one("#help-keys"))
            for b in KEYS:
                assert b.tooltip in text
            await pilot.press("escape")
            await compiled(pilot)

    @pytest.mark.parametrize("size", [(80, 24), (160, 48)])
    async def test_the_help_screen_scrolls_by_keyboard_to_its_last_line(self, app_factory, size):
        app = app_factory()
        async with app.run_test(size=size) as pilot:
            await compiled(pilot)
            await pilot.press("question_mark")
            await pilot.pause()
            scroll = app.screen.query_one("#help-scroll")
            assert app.focused is scroll
            if size == (80, 24):
                assert scroll.max_scroll_y > 0  # taller than the screen: the keys after Back are below
                await pilot.press("down")
                await pilot.pause()
                assert scroll.scroll_y == 1
            await pilot.press("end")
            await pilot.pause()
            assert scroll.scroll_y == scroll.max_scroll_y
            assert scroll.virtual_size.height - scroll.scroll_y <= scroll.scrollable_content_region.height
            await pilot.press("home")
            await pilot.pause()
            assert scroll.scroll_y == 0


class LongNamedDevice(NumpyDevice):
    """A numpy device named like a PoCL device (60 characters), to hold the short names and their legend."""

    name = "opencl:pthread-skylake-avx512-Intel(R) Xeon(R) Processor"


class TestLayout:
    @pytest.mark.parametrize("size", [(80, 24), (160, 48)])
    async def test_every_pane_fits_the_terminal(self, app_factory, size):
        from textual.widgets._footer import FooterKey

        from engine.devices import LibraryDevice
        from tests.ui.conftest import THREADS

        devices = [NumpyDevice(threads=THREADS), LibraryDevice(threads=THREADS), LongNamedDevice(threads=THREADS)]
        app = app_factory(devices=devices, options=Options(tune=False, tune_cache=False))
        width = size[0]
        async with app.run_test(size=size) as pilot:
            await compiled(pilot)
            lines = str(app.query_one(StageBar).render()).splitlines()
            assert "exec" in lines[0] and "done in" in "".join(lines)  # every stage on the first line
            assert all(key.region.right <= width for key in app.query(FooterKey))
            for tab, table in (("3", CostsTable), ("4", PlanTable)):
                await pilot.press(tab)
                await pilot.pause()
                shown = app.query_one(table)
                assert shown.canvas_width() <= shown.scrollable_content_region.width, tab  # no column cut
            costs = app.query_one(CostsTable)
            assert [c.label for c in costs.columns[3:]] == ["numpy", "blas", "cl0"]
            assert f"cl0 = {LongNamedDevice.name}" in plain(app.query_one("#costs-legend"))
            await pilot.press("2")
            app.main.select_class(_output_class(app))
            await pilot.pause()
            head = app.query_one("#detail-head")
            assert len(plain(head, head.content_size.width).rstrip("\n").splitlines()) <= head.content_size.height
            table = app.query_one(ClassesTable)
            if width >= 160:  # wide: the text columns take the room, none is left empty at the right
                assert table.canvas_width() >= table.scrollable_content_region.width - 1


class TestCostsMarks:
    def test_a_prediction_never_beats_a_timing_for_the_fastest_mark(self):
        import engine
        import sample_graphs
        from engine.devices import LibraryDevice
        from engine.pipeline import compile_program

        c = compile_program(engine.load(sample_graphs.path("mlp.small")),
                            [NumpyDevice(threads=2), LibraryDevice(threads=2)], Options(tune_cache=False, execute=False))
        measured, predicted = next((kn, other) for kn in c.tuning if c.tuning[kn].ok for other in c.kernel_times
                                   if other.candidate == kn.candidate and other.device != kn.device)
        tuning = {measured: c.tuning[measured]}  # the other device's time counts as a prediction
        times = {**c.kernel_times, predicted: c.kernel_times[measured] / 10}  # and looks 10x faster
        row = next(r for r in model.cost_rows(c, times, None, tuning) if r.key == measured.candidate)
        cells = dict(zip((d.name for d in c.devices), row.cells[3:]))
        assert cells[measured.device].endswith("m<") and cells[predicted.device].endswith("p ")

    async def test_one_kernel_for_two_classes_is_marked_and_not_cut(self, app_factory):
        app = app_factory("attention.small", options=Options(tune=False, tune_cache=False))
        async with app.run_test(size=(80, 24)) as pilot:
            await compiled(pilot)
            await pilot.press("3")
            costs = app.query_one(CostsTable)
            assert any(" ×2" in r.cells[0] for r in costs.shown)
            assert all(len(r.cells[0]) <= costs.columns[0].width for r in costs.shown)

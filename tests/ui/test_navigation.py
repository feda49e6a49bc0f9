"""Where did my tensor go, and why is the kernel shaped so: Program -> class, kernel and plan step, back from a
kernel to its program tensors, the kernelizer's decisions in the class detail and the source pane (Pilot)."""

from __future__ import annotations

from contextlib import asynccontextmanager

from engine.locate import locate
from engine.plan import Launch
from tests.ui.conftest import compiled
from zyx_explorer.widgets.class_detail import ClassDetail
from zyx_explorer.widgets.costs_table import CostsTable
from zyx_explorer.widgets.plan_table import PlanTable
from zyx_explorer.widgets.program_table import ProgramTable
from zyx_explorer.widgets.source_view import SourceView
from zyx_explorer.widgets.tensor_detail import TensorDetail

SIZE = (140, 40)


def notes(app) -> str:
    return "\n".join(n.message for n in app._notifications)


async def _enter_on(pilot, tensor: str) -> None:
    table = pilot.app.query_one(ProgramTable)
    pilot.app.main.action_tab("program")
    table.move_to(tensor)
    await pilot.press("enter")
    await pilot.pause()


@asynccontextmanager
async def jumped(app_factory, tensor: str | None = None):
    """The compiled explorer on mlp.small, after enter on program tensor ``tensor`` (if given)."""
    app = app_factory()
    async with app.run_test(size=SIZE) as pilot:
        await compiled(pilot)
        if tensor is not None:
            await _enter_on(pilot, tensor)
        yield app, pilot


class TestTensorToKernel:
    async def test_enter_on_a_tensor_jumps_to_its_class_kernel_and_plan_step(self, app_factory):
        async with jumped(app_factory, "t1") as (app, _):  # mlp.small: t1 = add(t0, b1), fused with the matmul t0
            c = app.session.compilation
            where = locate(c.egraph, c.kernelization, c.plan, "t1")
            step = c.plan.steps[where.steps[0]]
            assert isinstance(step, Launch) and "t1" in step.name
            assert app.main._active_tab() == "plan" and app.query_one(PlanTable).current_key == where.steps[0]
            assert app.main.selected == where.value and app.main.kernel == step.candidate
            assert f"kernel {step.name} at step {where.steps[0] + 1}" in notes(app)

    async def test_enter_on_an_input_jumps_to_its_allocate(self, app_factory):
        async with jumped(app_factory, "w1") as (app, _):
            step = app.session.compilation.plan.steps[app.query_one(PlanTable).current_key]
            assert app.main._active_tab() == "plan" and getattr(step, "input", None) == "w1"

    async def test_t_goes_back_from_a_plan_step_to_the_tensors_it_computes(self, app_factory):
        async with jumped(app_factory, "t1") as (app, pilot):
            await pilot.press("t")
            assert app.main._active_tab() == "program"
            assert app.query_one(ProgramTable).current_key in app.session.tensors_of(app.main.kernel)
            assert "t1" in app.session.tensors_of(app.main.kernel)
            detail = app.query_one(TensorDetail).summary.plain  # where it went, also in the tensor's detail
            step = app.query_one(PlanTable).current_key
            assert "compiled: value in c" in detail and f"kernel {app.session.kernel_name(app.main.kernel)} at step {step + 1}" in detail

    async def test_t_goes_back_from_a_costs_row_the_source_pane_and_a_kernel_form(self, app_factory):
        async with jumped(app_factory) as (app, pilot):
            await pilot.press("3", "down", "t")
            cand_id = app.query_one(CostsTable).current_key
            assert app.main._active_tab() == "program"
            assert app.query_one(ProgramTable).current_key == app.session.tensors_of(cand_id)[0]
            app.main.show_kernel(cand_id)
            await pilot.press("5", "t")
            assert app.main._active_tab() == "program"
            eg = app.session.compilation.egraph
            app.main.select_class(eg.output_classes()["y"], tab=True)
            detail = app.query_one(ClassDetail)
            form = next(n for n in eg.eclass(app.main.selected).nodes if eg.node(n).op == "kernel")
            detail.forms.focus()
            detail.forms.cursor = detail.forms.index_of(("form", form))
            await pilot.press("t")
            assert app.main._active_tab() == "program" and app.query_one(ProgramTable).current_key == "t2"

    async def test_t_without_a_kernel_is_a_warning(self, app_factory):
        async with jumped(app_factory) as (app, pilot):
            await pilot.press("4", "t")  # the plan's first step allocates an input: no kernel
            assert app.main._active_tab() == "plan" and "highlight a kernel" in notes(app)


class TestDecisionsShown:
    async def test_the_source_pane_names_the_kernel_its_tensors_and_decisions(self, app_factory):
        async with jumped(app_factory, "t1") as (app, pilot):
            await pilot.press("5")
            source = app.query_one(SourceView)
            text = str(source.content.renderables[0]) + str(source.content.renderables[2])
            assert app.session.kernel_name(app.main.kernel) in text and "program tensors: t0, t1" in text
            assert "grown from" in text and "left out" in text

    async def test_explaining_a_kernel_form_shows_why_it_is_shaped_so(self, app_factory):
        async with jumped(app_factory, "y") as (app, pilot):  # an output: its class has kernel forms
            detail = app.query_one(ClassDetail)
            app.main.action_tab("classes")
            eg = app.session.compilation.egraph
            kernel = next(n for n in eg.eclass(app.main.selected).nodes if eg.node(n).op == "kernel")
            detail.forms.focus()
            detail.forms.cursor = detail.forms.index_of(("form", kernel))
            await pilot.press("enter")
            name = app.session.kernel_name(eg.node(kernel).param.candidate)
            assert f"why kernel {name} is shaped so:" in detail.explanation
            assert "grown from" in detail.explanation

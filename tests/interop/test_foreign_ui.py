"""The foreign e-graph view (Pilot): classes, forms with costs, the three extractors side by side."""

from __future__ import annotations

from pathlib import Path

from engine.interop import parse_serialized
from tests.interop.graphs import SHARING, egglog_arith
from zyx_explorer.foreign import ForeignApp
from zyx_explorer.widgets.line_table import LineTable


async def _extracted(pilot) -> None:
    for _ in range(500):
        if pilot.app.extracted:
            break
        await pilot.pause(0.02)
    assert pilot.app.extracted
    await pilot.pause()


async def test_results_classes_and_forms():
    app = ForeignApp(parse_serialized(SHARING), Path("sharing.json"))
    async with app.run_test(size=(140, 40)) as pilot:
        await _extracted(pilot)
        results = app.query_one("#foreign-results", LineTable)
        rows = {r.key: r.cells for r in results.shown}
        assert rows["greedy"][1] == "5" and rows["dag"][1] == "4" and rows["ilp"][1] == "4"
        assert rows["ilp"][4] == "optimal"
        assert next(r for r in results.shown if r.key == "ilp").style == "bold green"  # the best DAG cost
        classes = app.query_one("#foreign-classes", LineTable)
        marks = {r.key: r.cells[4] for r in classes.shown}
        assert marks == {"S": "DI", "A": "GDI", "B": "GDI", "R": "GDI"}
        assert classes.move_to("A")
        await pilot.pause()
        forms = {r.key: r.cells for r in app.query_one("#foreign-forms", LineTable).shown}
        assert forms["a_leaf"][2] == "2" and forms["a_leaf"][3] == "G" and forms["a_s"][3] == "DI"
        assert forms["a_s"][4] == "S"
        assert "sharing.json: 6 nodes, 4 classes" in app.sub_title


async def test_enter_on_a_form_goes_to_its_child_class_and_back_returns():
    app = ForeignApp(parse_serialized(SHARING), Path("sharing.json"))
    async with app.run_test(size=(140, 40)) as pilot:
        await _extracted(pilot)
        classes = app.query_one("#foreign-classes", LineTable)
        classes.move_to("A")
        forms = app.query_one("#foreign-forms", LineTable)
        await pilot.pause()
        forms.focus()
        forms.move_to("a_s")
        await pilot.press("enter")
        assert classes.current_key == "S"
        await pilot.press("backspace")
        assert classes.current_key == "A"


async def test_filter_an_egglog_egraph():
    fg = parse_serialized(egglog_arith())
    app = ForeignApp(fg, Path("egglog.json"))
    async with app.run_test(size=(140, 40)) as pilot:
        await _extracted(pilot)
        await pilot.press("slash", *"i64", "enter")
        classes = app.query_one("#foreign-classes", LineTable)
        assert classes.row_count and all("i64" in r.cells[1] for r in classes.shown)
        assert "roots (let)" in app.sub_title and "$e" in app.sub_title

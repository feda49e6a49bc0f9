"""SVG snapshots of the main screens (pytest-textual-snapshot): the small MLP on numpy + BLAS, untuned
(cost-model times), frozen clock and zeroed measurements, so they repeat on any machine and checkout path.

Regenerate with ``pytest tests/ui/test_snapshots.py --snapshot-update`` and look at the SVGs before committing.
"""

from __future__ import annotations

from engine.pipeline import Options
from tests.ui.conftest import compiled, freeze_measurements, make_app

SIZE = (140, 40)


def _snap(snap_compare, *keys: str, then=None) -> bool:
    """Compile, freeze what was measured, press ``keys`` (then run ``then(app)``), and compare the screen."""
    app = make_app(options=Options(tune=False, tune_cache=False), frozen=True)  # nominal: no stored calibration

    async def run_before(pilot) -> None:
        await compiled(pilot)
        freeze_measurements(app)
        await pilot.press(*keys)
        if then is not None:
            then(app)
        await pilot.pause(0.3)  # lets the footer recompose after a screen change (its divider came and went)

    return snap_compare(app, terminal_size=SIZE, run_before=run_before)


def _output_class(app) -> None:
    app.main.select_class(next(iter(app.session.compilation.egraph.output_classes().values())), tab=True)


class TestSnapshots:
    def test_program(self, snap_compare):
        assert _snap(snap_compare, "down", "down", "down", "down", "down", "down")

    def test_classes_and_detail(self, snap_compare):
        assert _snap(snap_compare, "2", then=_output_class)

    def test_costs(self, snap_compare):
        assert _snap(snap_compare, "3", "down")

    def test_plan(self, snap_compare):
        assert _snap(snap_compare, "4", "down", "down")

    def test_source(self, snap_compare):
        assert _snap(snap_compare, "3", "enter")

    def test_rewrites(self, snap_compare):
        assert _snap(snap_compare, "6", "slash", *"commute", "enter")

    def test_results(self, snap_compare):
        assert _snap(snap_compare, "7")

    def test_help(self, snap_compare):
        assert _snap(snap_compare, "question_mark")

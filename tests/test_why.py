""""Why this form": the explanation uses the extractor's own objective (DAG cost, the same times and copies)."""

from __future__ import annotations

import math
from functools import cache

import pytest

import sample_graphs
from engine import load
from engine.devices.numpy_device import LibraryDevice, NumpyDevice
from engine.devices.opencl import discover
from engine.extract import Pins
from engine.pipeline import Compilation, Options, compile_program, explain, what_if
from zyx_explorer.model import seconds_text
from zyx_explorer.widgets.class_detail import ClassDetail

DEVICES = [NumpyDevice(), LibraryDevice(), *[d for d in discover() if not d.is_gpu][:1]]
SAMPLES = ["mlp.small", "attention.small", "residual_mlp.small", "transpose_fusion.small"]


@cache
def compiled(name: str, extractor: str) -> Compilation:
    return compile_program(load(sample_graphs.path(name)), DEVICES, Options(tune=False, tune_cache=False,
                                                                              execute=False, extractor=extractor))


def plan_classes(c: Compilation) -> list[int]:
    assert c.extraction is not None
    return sorted({v[0] for v in c.extraction.choices})


@pytest.mark.parametrize("name", SAMPLES)
def test_why_is_in_the_extractors_objective_on_every_class(name):
    c = compiled(name, "dag")
    ex = explain(c)
    assert c.extraction is not None
    classes = plan_classes(c)
    assert any(ex.why(cls).rivals for cls in classes)  # type: ignore[union-attr]
    for cls in classes:
        why = ex.why(cls)
        assert why is not None and why.dag_cost == c.extraction.dag_cost
        chosen = c.extraction.choices[why.value]
        assert why.chosen[0].node == chosen.node and why.chosen[0].seconds == chosen.time
        for rival in why.rivals:
            added, dropped = math.fsum(t.seconds for t in rival.added), math.fsum(t.seconds for t in rival.dropped)
            assert math.isclose(rival.dag_cost - why.dag_cost, added - dropped, rel_tol=1e-9, abs_tol=1e-15)
            assert any(t in rival.added for t in rival.via)  # what the rival does differently is paid for
        assert [r.dag_cost for r in why.rivals] == sorted(r.dag_cost for r in why.rivals)


@pytest.mark.parametrize("name", ["mlp.small", "attention.small"])
def test_no_rival_beats_the_ilp_optimum_and_each_is_a_real_plan(name):
    c = compiled(name, "ilp")
    assert c.extraction is not None and c.extraction.status == "optimal"
    ex = explain(c)
    for cls in plan_classes(c):
        why = ex.why(cls)
        assert why is not None
        for rival in why.rivals:
            assert rival.dag_cost >= why.dag_cost * (1 - 1e-9)
            if len(rival.via) == 1 and not rival.via[0].copy:  # pinned to the rival's kernel, the optimum is no worse
                pinned = what_if(c, Pins().node(c.egraph, rival.via[0].node))
                assert pinned.extraction.dag_cost <= rival.dag_cost * (1 + 1e-9)


def test_the_why_line_shows_those_numbers_with_the_right_sign():
    c = compiled("attention.small", "dag")
    ex = explain(c)
    detail = ClassDetail()
    detail._kz = c.kernelization
    seen = 0
    for cls in plan_classes(c):
        why = ex.why(cls)
        if why is None or not why.rivals:
            continue
        text = detail._why(c.egraph, why, pinned=False).plain
        delta = why.rivals[0].dag_cost - why.dag_cost
        assert f"plan DAG cost {seconds_text(why.dag_cost)}" in text
        assert f"plan {seconds_text(why.rivals[0].dag_cost)} ({'+' if delta >= 0 else '-'}{seconds_text(abs(delta))}:" in text
        assert "tree" not in text
        seen += 1
    assert seen

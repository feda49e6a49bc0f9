"""The DOT of every stage: it renders without a Graphviz warning and has the expected structure."""

from __future__ import annotations

import itertools
import json
import re
import subprocess

import graphviz
import pytest

from engine import STAGES, pipeline, units
from engine.devices import NumpyDevice, discover
from engine.export import ExportOptions, stage_graph, stage_names, view
from engine.export.chosen import neighbourhood, planned_kernels, region, stage_forms
from engine.extract import Pins
from engine.pipeline import Options, compile_program
from engine.plan import Copy, Launch
from tests.export.dotparse import parse
from tests.export.helpers import SAMPLES, compiled, render_svg

WHOLE = ExportOptions(max_nodes=1000)
"""Every class and kernel drawn, however big (the structure tests check the whole graph)."""


def _stage_egraph(c, stage):
    return c.egraph.prefix(*c.lowered) if stage == "egraph" else c.saturation.snapshot(len(c.saturation.iterations))


@pytest.mark.parametrize("name", SAMPLES)
def test_every_stage_renders_to_svg(name):
    c = compiled(name)
    drawn = [s for s in stage_names() if stage_graph(c, s).graph is not None]
    assert set(STAGES) <= set(drawn)
    for stage in drawn:
        source = stage_graph(c, stage).graph.source
        assert "<svg" in render_svg(source)
    assert graphviz.Source(stage_graph(c, "program").graph.source).pipe(format="svg").startswith(b"<?xml")


def test_program_has_a_node_per_input_and_op():
    c = compiled("mlp.small")
    dot = parse(stage_graph(c, "program").graph.source)
    p = c.program
    assert {f"t_{i.name}" for i in p.inputs} | {f"t_{n.id}" for n in p.nodes} <= set(dot.nodes)
    for n in p.nodes:
        assert units.shape(n.shape) in dot.nodes[f"t_{n.id}"]["label"]
        assert {(f"t_{a}", f"t_{n.id}") for a in n.args} <= {(a, b) for a, b, _ in dot.edges}


@pytest.mark.parametrize("name", SAMPLES)
@pytest.mark.parametrize("stage", ["egraph", "saturated"])
def test_egraph_is_one_cluster_per_class_with_edges_to_child_clusters(name, stage):
    c = compiled(name)
    eg = _stage_egraph(c, stage)
    dot = parse(stage_graph(c, stage, WHOLE).graph.source)
    assert set(dot.clusters) == {f"cluster_c{cls.id}" for cls in eg.classes()}
    assert dot.graph["compound"] == "true"
    edges = {(a, e.get("lhead")) for a, _, e in dot.edges}
    for cls in eg.classes():
        assert dot.clusters[f"cluster_c{cls.id}"] == {f"n{n}" for n in cls.nodes}
        for n in cls.nodes:
            for ch in eg.node(n).children:
                if ch != cls.id:
                    assert (f"n{n}", f"cluster_c{ch}") in edges
    lheads = [(b, e["lhead"]) for _, b, e in dot.edges if "lhead" in e]
    assert lheads and all(dot.node_cluster(b) == cluster for b, cluster in lheads)


@pytest.mark.parametrize("name", SAMPLES)
def test_the_chosen_form_of_each_class_is_highlighted(name):
    c = compiled(name)
    eg = _stage_egraph(c, "saturated")
    chosen = stage_forms(c, eg)
    dot = parse(stage_graph(c, "saturated", WHOLE).graph.source)
    highlighted = {int(n[1:]) for n, a in dot.nodes.items() if a.get("chosen") == "true"}
    assert highlighted == set(chosen.forms.values())
    assert len(highlighted) == eg.num_classes  # exactly one per class
    kz = c.kernelization
    for cand_id in planned_kernels(c):  # a planned kernel's root class shows the form the kernel was built from
        cand = kz.candidates[cand_id]
        assert chosen.forms[eg.find(cand.output)] == cand.root
        assert f"n{cand.root}" in dot.nodes and dot.nodes[f"n{cand.root}"]["chosen"] == "true"


@pytest.mark.parametrize("name", SAMPLES)
def test_kernelized_groups_the_classes_each_kernel_fuses(name):
    c = compiled(name)
    kz = c.kernelization
    dot = parse(stage_graph(c, "kernelized", WHOLE).graph.source)
    assert len([k for k in dot.clusters if k.startswith("cluster_k")]) == len(kz.candidates)
    heads = {a["kernel"]: n for n, a in dot.nodes.items() if "kernel" in a}
    assert set(heads) == set(kz.candidates)
    planned = planned_kernels(c)
    library = {p.candidate for p in c.kernel_times if p.device == "blas"}
    for cand_id, head in heads.items():
        cluster = dot.node_cluster(head)
        fused = {n.rsplit("_c", 1)[1] for n in dot.clusters[cluster] if n != head}
        assert fused == {str(x) for x in region(kz, kz.candidates[cand_id]).forms}
        assert (dot.nodes[head].get("chosen") == "true") == (cand_id in planned)
        assert dot.nodes[head]["label"].startswith(f"{kz.name(cand_id)} → ")  # the readable name; the hash labels the box
        assert ("library" in dot.nodes[head]) == (cand_id in library)
    assert library or name != "mlp.small"  # the MLP's matmuls are library (BLAS) kernels


@pytest.mark.parametrize("name", ["mlp.small", "attention.small"])
def test_tuned_marks_measured_and_predicted_times_and_kernelized_shows_estimates(name):
    c = compiled(name)
    tuned = parse(stage_graph(c, "tuned", WHOLE).graph.source)
    labels = {a["kernel"]: a["label"] for a in tuned.nodes.values() if "kernel" in a}
    assert c.tuning
    short = units.short_devices(d.name for d in c.devices)
    for kn, t in c.kernel_times.items():
        mark = "measured" if kn in c.tuning else "predicted"  # candidates no plan took stay untimed
        assert f"{short[kn.device]}: {units.seconds(t)} {mark}" in labels[kn.candidate]
    kernelized = parse(stage_graph(c, "kernelized", WHOLE).graph.source)
    assert not any("measured" in a.get("label", "") for a in kernelized.nodes.values())
    kn, estimate = next(iter(c.estimates.items()))
    head = next(a for a in kernelized.nodes.values() if a.get("kernel") == kn.candidate)
    assert units.seconds(estimate) in head["label"]


def _check_plan(c, stage="plan"):
    dot = parse(stage_graph(c, stage).graph.source)
    plan = c.plan
    expected = [f"step{i}" for i, s in enumerate(plan.steps, 1) if isinstance(s, Launch | Copy)]
    assert dot.order == expected  # launches and copies, in plan order
    kinds = {f"step{i}": type(s).__name__.lower() for i, s in enumerate(plan.steps, 1)}
    drawn = {a["id"]: a["step"] for a in [*dot.nodes.values(), *(e for _, _, e in dot.edges)] if "id" in a}
    assert drawn == {i: kinds[i] for i in expected}
    launches = {f"s{i}": s for i, s in enumerate(plan.steps, 1) if isinstance(s, Launch)}
    assert all(dot.nodes[n]["label"].startswith(f"#{n[1:]} launch {s.name}\\n") and s.name for n, s in launches.items())
    assert units.seconds(plan.predicted) in dot.graph["label"]
    return dot


@pytest.mark.parametrize("name", SAMPLES)
def test_plan_steps_in_order_with_the_predicted_total(name):
    c = compiled(name)
    _check_plan(c)
    label = parse(stage_graph(c, "executed").graph.source).graph["label"]
    assert "verification ok" in label and "measured" in label


def test_plan_copies_to_an_opencl_pool():
    """The output pinned to an OpenCL device: copies into its pool are drawn (pinned, not left to measured speed)."""
    devices = discover(native=False)
    gpu = next((d for d in devices if d.pool != "host"), None)
    if gpu is None:
        pytest.skip("no OpenCL device found")
    c = compile_program(compiled("mlp.small").program, devices, Options(tune=False, tune_cache=False, execute=False))
    output = next(iter(c.egraph.output_classes().values()))
    pipeline.extract(c, Pins().device(c.egraph, output, gpu.name))
    dot = _check_plan(c)
    assert any(isinstance(s, Copy) for s in c.plan.steps)
    source = stage_graph(c, "plan").graph.source
    short = units.short_devices(d.name for d in devices)
    assert f"on {short[gpu.name]}" in source and f"{short[gpu.name]} = {gpu.name}" in source  # once, in the legend
    assert source.count(gpu.name) == 1 + source.count(f"pool {gpu.name}")
    pool_index = {p: k for k, p in enumerate(view.palette([(d.name, d.pool) for d in devices])[1])}
    for s in c.plan.steps:
        if isinstance(s, Copy):
            src, dst = (f"v{v[0]}_{pool_index[v[1]]}" for v in (s.source, s.target))
            assert any(a == src and b == dst and e.get("step") == "copy" for a, b, e in dot.edges)
    render_svg(stage_graph(c, "plan").graph.source)


def test_neighbourhood_keeps_the_classes_near_one_and_says_so():
    c = compiled("attention.small")
    eg = _stage_egraph(c, "saturated")
    centre = eg.find(c.kernelization.candidates[next(iter(planned_kernels(c)))].output)
    dot = parse(stage_graph(c, "saturated", ExportOptions(neighbourhood=centre, depth=1)).graph.source)
    near = neighbourhood(eg, centre, 1)
    assert set(dot.clusters) == {f"cluster_c{x}" for x in near} and len(near) < eg.num_classes
    assert f"neighbourhood of c{centre} (depth 1)" in dot.graph["label"]
    assert any(n.startswith("cut_c") for n in dot.nodes)  # edges leaving the neighbourhood end in stubs


def test_plan_only_and_collapse():
    c = compiled("attention.small")
    eg = _stage_egraph(c, "saturated")
    dot = parse(stage_graph(c, "saturated", ExportOptions(plan_only=True)).graph.source)
    assert all(len(ns) == 1 for ns in dot.clusters.values())
    assert "plan-only" in dot.graph["label"]
    one_form = {cls.id for cls in eg.classes() if len(cls.nodes) == 1}
    dot = parse(stage_graph(c, "saturated", ExportOptions(collapse=True, max_nodes=1000)).graph.source)
    assert set(dot.clusters) == {f"cluster_c{cls.id}" for cls in eg.classes()} - {f"cluster_c{x}" for x in one_form}
    dot = parse(stage_graph(c, "kernelized", ExportOptions(collapse=True)).graph.source)
    assert not dot.clusters


def test_big_graphs_are_cut_with_a_note_and_layout_limits():
    c = compiled("attention.small")
    dot = parse(stage_graph(c, "saturated", ExportOptions(max_nodes=50)).graph.source)
    assert re.search(r"cut: \d+ e-nodes is over the limit of 50", dot.graph["label"])
    assert all(len(ns) == 1 for ns in dot.clusters.values())
    big = parse(stage_graph(c, "saturated", WHOLE).graph.source)
    assert len(big.nodes) > view.FAST_LAYOUT_NODES and big.graph["mclimit"] == "0.1"
    small = parse(stage_graph(compiled("transpose_fusion.small"), "saturated").graph.source)
    assert "mclimit" not in small.graph
    dot = parse(stage_graph(c, "kernelized", ExportOptions(max_nodes=10)).graph.source)
    assert "cut: over 10 nodes" in dot.graph["label"]


def _layout(source: str) -> tuple[float, float, list[tuple[str, tuple[float, ...]]]]:
    """Graphviz's layout of ``source``: the picture's width and height (pt), each cluster's box."""
    done = subprocess.run(["dot", "-Tjson"], input=source.encode(), capture_output=True, check=True, timeout=60)
    laid = json.loads(done.stdout)
    boxes = [(o["name"], tuple(map(float, o["bb"].split(",")))) for o in laid.get("objects", [])
             if o["name"].startswith("cluster") and "bb" in o]
    _, _, width, height = map(float, laid["bb"].split(","))
    return width, height, boxes


def _overlapping(boxes) -> list[tuple[str, str]]:
    return [(a, b) for (a, (ax0, ay0, ax1, ay1)), (b, (bx0, by0, bx1, by1)) in itertools.combinations(boxes, 2)
            if min(ax1, bx1) - max(ax0, bx0) > 0.5 and min(ay1, by1) - max(ay0, by0) > 0.5]


def test_attention_saturated_by_default_is_a_readable_picture_that_says_what_it_cut():
    c = compiled("attention.small")
    eg = _stage_egraph(c, "saturated")
    source = stage_graph(c, "saturated").graph.source
    dot = parse(source)
    label = dot.graph["label"]
    assert re.search(rf"cut: {eg.num_nodes} e-nodes is over the limit of {view.MAX_NODES}", label)
    hidden = int(re.search(r"(\d+) other forms hidden", label).group(1))
    shown = [n for n in dot.nodes.values() if n.get("chosen") == "true"]
    assert f"{len(shown)} of {eg.num_classes} e-classes, {len(shown)} of {eg.num_nodes} e-nodes shown" in label
    others = {n: len(eg.eclass(eg.find(int(n[1:]))).nodes) - 1 for n, a in dot.nodes.items() if a.get("chosen")}
    assert hidden == sum(others.values()) > 0  # every other form of a class drawn is counted...
    marks = [int(m) for n in shown for m in re.findall(r"\+(\d+) forms?", n["label"])]
    assert sum(marks) == hidden  # ...and its class says so
    width, height, boxes = _layout(source)
    assert width * height < 0.1 * 10_000 * 2_800  # the whole e-graph's picture is 10,000 x 2,800 pt
    assert not _overlapping(boxes)


@pytest.mark.parametrize("name", ["transpose_fusion.small", "mlp.small"])
def test_whole_egraph_clusters_never_overlap(name):
    c = compiled(name)
    _, _, boxes = _layout(stage_graph(c, "saturated").graph.source)
    assert len(boxes) == _stage_egraph(c, "saturated").num_classes  # drawn whole, a box per class
    assert not _overlapping(boxes)


def test_kernelized_marks_its_own_cheapest_estimate_and_tuned_the_plans_device():
    c = compiled("attention.small")
    short = units.short_devices(d.name for d in c.devices)
    for stage, mark in (("kernelized", "<"), ("tuned", "✓")):
        dot = parse(stage_graph(c, stage, ExportOptions(plan_only=True)).graph.source)
        heads = [n for n in dot.nodes.values() if n.get("kernel")]
        assert heads and all(n["label"].count(f"{mark} ") == 1 for n in heads)
        assert all(("✓" in n["label"]) == (stage == "tuned") for n in heads)
        for n in heads:
            cand = n["kernel"]
            times = c.estimates if stage == "kernelized" else None
            device = (min((kn for kn in times if kn.candidate == cand), key=times.get).device if times
                      else planned_kernels(c)[cand])
            assert f"{mark} {short[device]}: " in n["label"]


def test_a_stage_missing_from_the_compilation_is_skipped_with_a_note(monkeypatch):
    c = compile_program(compiled("mlp.small").program, [NumpyDevice()], Options(execute=False))
    sg = stage_graph(c, "executed")
    assert sg.graph is None and "not reached" in sg.note
    assert stage_names() == list(STAGES)

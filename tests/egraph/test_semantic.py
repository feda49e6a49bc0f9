"""Soundness: saturated sample and random programs keep every form of every class numerically equal.

The semantic check is the safety net for the rules, so it is itself tested: a deliberately wrong rule must be
caught, by the class it broke.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import assume, given, settings
from test_random_graphs import programs

import engine
import sample_graphs
from engine import DType, Tensor, from_tensors
from engine.egraph import (
    ANY,
    EGraph,
    Limits,
    P,
    Runner,
    StopReason,
    Var,
    check_semantics,
    default_rules,
    from_program,
    random_inputs,
    rewrite,
    rules_named,
    saturate,
)

SMALL = [name for name in sample_graphs.names() if name.endswith(".small")]
LIMITS = Limits(iterations=30, nodes=20_000, seconds=20)
RANDOM_LIMITS = Limits(iterations=30, nodes=20_000, seconds=60)
a, b = Var("a"), Var("b")


def sample(name: str) -> EGraph:
    return from_program(engine.load(sample_graphs.path(name)))


def test_there_are_small_samples():
    assert len(SMALL) >= 10
    assert all(name.removesuffix(".small") in sample_graphs.names() for name in SMALL)


@pytest.mark.parametrize("name", SMALL)
def test_sample_saturates_soundly(name):
    eg = sample(name)
    result = saturate(eg, limits=LIMITS)
    assert result.stop is StopReason.SATURATED
    report = check_semantics(eg)
    assert report.ok, report.disagreements
    assert report.skipped == ()
    assert report.classes == eg.num_classes
    assert report.forms == sum(len(c.nodes) for c in eg.classes())
    assert all(eg.node(n).param is not ANY for c in eg.classes() for n in c.nodes)


@pytest.mark.parametrize("name", SMALL)
def test_sample_with_fast_math_is_sound_on_finite_values(name):
    eg = sample(name)
    result = saturate(eg, default_rules(fast_math=True), LIMITS)
    assert result.stop is StopReason.SATURATED
    report = check_semantics(eg, finite_only=True)
    assert report.ok, report.disagreements
    assert report.skipped == ()


def test_sample_is_sound_on_its_own_input_values():
    program = engine.load(sample_graphs.path("mlp.small"))
    eg = from_program(program)
    saturate(eg, limits=LIMITS)
    report = check_semantics(eg, program.input_values())
    assert report.ok and report.skipped == ()


def test_fast_math_rules_fire_and_pass_on_finite_values():
    x = Tensor.input("x", (3, 4))
    y = ((x - x) + x * 0.0 + (x.exp2()).log2() + (x.abs() + 1.0).log2().exp2()).named("y")
    eg = from_program(from_tensors([y]))
    result = saturate(eg, default_rules(fast_math=True), LIMITS)
    assert result.stop is StopReason.SATURATED
    fired = result.merges_by_rule()
    assert {"sub-self-float", "mul-zero-float", "log2-exp2", "exp2-log2"} <= set(fired)
    assert check_semantics(eg, finite_only=True).ok


def test_exp2_log2_disagrees_on_negative_numbers():
    """2 ** log2(x) is NaN for x < 0: with NaN compared, the fast-math rule shows up; comparing finite values only, not."""
    x = Tensor.input("x", (8,))
    eg = from_program(from_tensors({"y": x.log2().exp2()}))
    Runner(rules_named("exp2-log2"), LIMITS).run(eg)
    inputs = {"x": np.linspace(-2, 2, 8).astype(np.float32)}
    report = check_semantics(eg, inputs)
    assert not report.ok
    assert {eg.find(d.class_id) for d in report.disagreements} == {eg.find(eg.outputs["y"])}
    assert check_semantics(eg, inputs, finite_only=True).ok


# -- a wrong rule is caught --------------------------------------------------------------


def test_wrong_rule_is_detected():
    bad = rewrite("bad-sub-commute", P("sub", a, b), P("sub", b, a))
    x, y = Tensor.input("x", (2, 3)), Tensor.input("y", (2, 3))
    eg = from_program(from_tensors({"d": (x - y).named("d"), "e": (x - y).relu()}))
    d = eg.outputs["d"]
    assert check_semantics(eg).ok
    result = Runner([bad], LIMITS).run(eg)
    assert result.merges_by_rule()["bad-sub-commute"] == 1
    report = check_semantics(eg)
    assert not report.ok
    (wrong,) = report.disagreements
    assert wrong.class_id == eg.find(d)
    assert {wrong.node, wrong.reference} == set(eg.eclass(d).nodes)
    assert wrong.reference == d  # the lowering's form is the reference
    assert eg.node(wrong.node).children == tuple(reversed(eg.node(d).children))
    assert wrong.max_error > 0.1


def test_wrong_rule_deep_in_a_sample_is_detected():
    bad = rewrite("bad-add-is-sub", P("add", a, b), P("sub", a, b))
    eg = sample("mlp.small")
    adds = {eg.find(n) for c in eg.classes() for n in c.nodes if eg.node(n).op == "add"}
    assert adds
    result = Runner([*default_rules(), bad], LIMITS).run(eg)
    assert result.merges_by_rule()["bad-add-is-sub"] > 0
    report = check_semantics(eg)
    assert not report.ok
    assert {eg.find(c) for c in adds} <= {eg.find(d.class_id) for d in report.disagreements}


def test_wrong_rule_in_one_dtype_only():
    """An integer-only slip: ``x / 1 = x + 1`` for i32, with floats untouched."""
    bad = rewrite("bad-div", P("div", a, b), P("add", a, b), lambda eg, m: eg.eclass(m["a"]).dtype == DType.I32)
    xf, xi = Tensor.input("xf", (4,)), Tensor.input("xi", (4,), DType.I32)
    eg = from_program(from_tensors({"f": xf / 2.0, "i": xi / 2}))
    Runner([bad], LIMITS).run(eg)
    report = check_semantics(eg)
    assert [eg.find(d.class_id) for d in report.disagreements] == [eg.find(eg.outputs["i"])]


# -- the check itself --------------------------------------------------------------------


def test_random_inputs_cover_every_leaf():
    eg = from_program(from_tensors({"y": Tensor.input("x", (2, 3)).cast("i32") + Tensor.input("k", (2, 3), "i32"),
                                    "z": Tensor.input("m", (3,), "bool").logical_not()}))
    inputs = random_inputs(eg, seed=3)
    assert set(inputs) == {"x", "k", "m"}
    assert inputs["x"].dtype == np.float32 and inputs["k"].dtype == np.int32 and inputs["m"].dtype == np.bool_
    assert inputs["x"].shape == (2, 3) and inputs["m"].shape == (3,)
    assert all(np.array_equal(inputs[k], random_inputs(eg, seed=3)[k]) for k in inputs)
    assert not np.array_equal(inputs["x"], random_inputs(eg, seed=4)["x"])


def test_large_forms_are_skipped_not_failed():
    eg = sample("mlp.small")
    saturate(eg, limits=LIMITS)
    report = check_semantics(eg, max_elements=1)
    assert report.ok
    assert report.skipped
    assert report.forms + len(report.skipped) == sum(len(c.nodes) for c in eg.classes())


def test_check_rebuilds_first():
    eg = sample("elementwise.small")
    leaves = [n for n in range(eg.num_added) if eg.node(n).op == "leaf"]
    x = leaves[0]
    eg.union(eg.add("neg", [eg.add("neg", [x])]), x, "double negation, by hand")
    assert not eg.clean
    assert check_semantics(eg).ok
    assert eg.clean


# -- random programs ---------------------------------------------------------------------


@settings(max_examples=200, derandomize=True, deadline=None)
@given(programs())
def test_random_programs_saturate_soundly(built):
    """Each rewrite keeps the values; a long chain of ops on one broadcast scalar may outlast the iterations."""
    program = built.program
    eg = from_program(program)
    result = saturate(eg, limits=RANDOM_LIMITS)
    assert result.stop in (StopReason.SATURATED, StopReason.ITERATION_LIMIT)
    report = check_semantics(eg, program.input_values())
    assert report.ok, report.disagreements
    assert report.skipped == ()
    classes = eg.output_classes()
    assert set(classes) == set(program.outputs)


def _every_value_finite(program) -> bool:
    """Whether every primitive value of ``program`` on its inputs is finite (or not a float): where one is not,
    fast-math rules may give the classes above it different finite values (``0 / 0`` rewritten to 0 in one form
    and to 1 in another), which their contract allows."""
    graph = dataclasses.replace(program.lower())
    graph.outputs = {f"v{i}": i for i in range(len(graph.nodes))}
    with np.errstate(all="ignore"):
        values = engine.evaluate(graph, program.input_values())
    return all(np.isfinite(v).all() for v in values.values() if np.issubdtype(np.asarray(v).dtype, np.floating))


@settings(max_examples=100, derandomize=True, deadline=None)
@given(programs(max_steps=8))
def test_random_programs_with_fast_math_agree_on_finite_values(built):
    program = built.program
    assume(_every_value_finite(program))
    eg = from_program(program)
    saturate(eg, default_rules(fast_math=True), RANDOM_LIMITS)
    report = check_semantics(eg, program.input_values(), finite_only=True)
    assert report.ok, report.disagreements

"""Explanations: the proof path between two e-nodes of one class, and its text."""

from __future__ import annotations

from itertools import pairwise

import pytest

import engine
import sample_graphs
from engine import DType, Tensor, from_tensors
from engine.egraph import (
    CONGRUENCE,
    EGraph,
    Limits,
    Runner,
    Scalar,
    Step,
    congruence_reasons,
    default_rules,
    explain,
    format_explanation,
    from_program,
    rules_named,
    saturate,
)

LIMITS = Limits(iterations=20, seconds=10)


def check_chain(eg: EGraph, a: int, b: int, steps: list[Step], depth: int = 3) -> None:
    """``steps`` lead from ``a`` to ``b``, each one a logged union; congruences are explained in turn."""
    if a == b:
        assert steps == []
        return
    assert steps[0].left == a and steps[-1].right == b
    for s, t in pairwise(steps):
        assert s.right == t.left
    for s in steps:
        union = eg.unions[s.union]
        assert {union.a, union.b} == {s.left, s.right}
        assert union.reason == s.reason
        assert s.is_congruence == (s.reason == CONGRUENCE)
        if s.is_congruence:
            reasons = congruence_reasons(eg, s)
            assert reasons, "a congruence has children that differ"
            left, right = eg.raw_node(s.left), eg.raw_node(s.right)
            assert (left.op, left.param) == (right.op, right.param)
            for x, y, sub in reasons:
                assert eg.find(x) == eg.find(y)
                if depth:
                    check_chain(eg, x, y, sub, depth - 1)
    assert len({s.union for s in steps}) == len(steps)  # a path: no union used twice


def simple() -> tuple[EGraph, dict[str, int]]:
    eg = EGraph()
    x = eg.leaf("x", (2, 3), DType.F32)
    nn = eg.add("neg", [eg.add("neg", [x])])
    one = eg.splat(Scalar(1.0, DType.F32), (2, 3))
    m = eg.add("mul", [one, x])  # 1 * x: commute, then mul-one
    r_nn, r_x = eg.add("relu", [nn]), eg.add("relu", [x])
    return eg, {"x": x, "nn": nn, "m": m, "relu_nn": r_nn, "relu_x": r_x}


def test_one_rule_one_step():
    eg, n = simple()
    Runner(rules_named("double-neg"), LIMITS).run(eg)
    steps = explain(eg, n["nn"], n["x"])
    assert [s.reason for s in steps] == ["double-neg"]
    check_chain(eg, n["nn"], n["x"], steps)


def test_two_rules_chain():
    eg, n = simple()
    Runner(rules_named("commute", "mul-one"), LIMITS).run(eg)
    steps = explain(eg, n["m"], n["x"])
    assert [s.reason for s in steps] == ["commute", "mul-one"]
    check_chain(eg, n["m"], n["x"], steps)
    back = explain(eg, n["x"], n["m"])
    assert [s.reason for s in back] == ["mul-one", "commute"]
    check_chain(eg, n["x"], n["m"], back)


def test_congruence_step_has_reasons():
    eg, n = simple()
    Runner(rules_named("double-neg"), LIMITS).run(eg)
    steps = explain(eg, n["relu_nn"], n["relu_x"])
    assert [s.reason for s in steps] == [CONGRUENCE]
    (x, y, sub), = congruence_reasons(eg, steps[0])
    assert {x, y} == {eg.raw_node(n["relu_nn"]).children[0], eg.raw_node(n["relu_x"]).children[0]}
    assert [s.reason for s in sub] == ["double-neg"]
    check_chain(eg, n["relu_nn"], n["relu_x"], steps)


def test_explain_a_node_with_itself_is_empty():
    eg, n = simple()
    assert explain(eg, n["x"], n["x"]) == []


def test_explain_different_classes_raises():
    eg, n = simple()
    Runner(rules_named("double-neg"), LIMITS).run(eg)
    with pytest.raises(ValueError, match="different classes"):
        explain(eg, n["m"], n["x"])


def test_format_explanation_names_the_rules():
    eg, n = simple()
    Runner(rules_named("commute", "mul-one"), LIMITS).run(eg)
    lines = format_explanation(eg, explain(eg, n["m"], n["x"]))
    assert len(lines) == 2
    assert "[commute]" in lines[0] and "[mul-one]" in lines[1]
    assert f"n{n['m']}" in lines[0] and f"n{n['x']}" in lines[1]
    assert "leaf[x]" in lines[1]


def test_format_explanation_expands_congruences():
    eg, n = simple()
    Runner(rules_named("double-neg"), LIMITS).run(eg)
    steps = explain(eg, n["relu_nn"], n["relu_x"])
    lines = format_explanation(eg, steps)
    assert "[congruence]" in lines[0]
    assert any(line.strip().startswith("because") for line in lines)
    assert any("[double-neg]" in line and line.startswith("    ") for line in lines)
    assert format_explanation(eg, steps, depth=0) == lines[:1]
    assert format_explanation(eg, []) == []


def test_transpose_fusion_outputs_explained():
    a, b = Tensor.input("A", (3, 2)), Tensor.input("B", (4, 3))
    eg = from_program(from_tensors({"lhs": a.T @ b.T, "rhs": (b @ a).T}))
    saturate(eg, limits=LIMITS)
    lhs, rhs = eg.outputs["lhs"], eg.outputs["rhs"]
    steps = explain(eg, lhs, rhs)
    check_chain(eg, lhs, rhs, steps)
    text = "\n".join(format_explanation(eg, steps, depth=4))
    rules = {s.reason for s in steps if not s.is_congruence}
    assert rules and all(f"[{r}]" in text for r in rules)


@pytest.mark.parametrize("name", ["attention.small", "layernorm.small", "swiglu_mlp.small"])
def test_every_form_of_every_class_is_explained(name):
    eg = from_program(engine.load(sample_graphs.path(name)))
    saturate(eg, default_rules(), LIMITS)
    for cls in eg.classes():
        first = cls.nodes[0]
        for other in cls.nodes[1:]:
            check_chain(eg, first, other, explain(eg, first, other), depth=1)

"""One small e-graph per rule where it applies (and where a condition blocks it), checked for soundness.

Every rule in ``ALL_RULES`` must have a positive case in ``CASES``: a new rule without one fails
``test_every_rule_has_a_case``.  A case builds an e-graph directly, names the node the rule applies to and
the term it must end up equal to; the test runs that rule alone and asserts the term is already in the
node's class (building it adds nothing), then that every form of every class computes the same values.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from engine import DType, Tensor, from_tensors
from engine.egraph import (
    ALL_RULES,
    EGraph,
    Limits,
    P,
    Runner,
    Scalar,
    T,
    Term,
    Var,
    build,
    check_semantics,
    default_rules,
    from_program,
    rewrite,
    rules_named,
    saturate,
)
from engine.egraph.pattern import TermLike
from engine.egraph.rules.algebra import splat_term
from engine.egraph.rules.movement import split_factor

F32, F64, I32, BOOL = DType.F32, DType.F64, DType.I32, DType.BOOL
FAST_MATH = {rule.name for rule in ALL_RULES if not rule.exact}
LIMITS = Limits(iterations=10, nodes=2000, seconds=5)


@dataclass
class Case:
    rule: str
    egraph: EGraph
    node: int
    expected: TermLike


def splat(eg: EGraph, value, shape=(2, 3), dtype=F32) -> int:
    return eg.splat(Scalar(value, dtype), shape)


def zeros(shape=(2, 3), dtype=F32) -> Term:
    return splat_term(Scalar(0, dtype), shape)  # type: ignore[return-value]


def leaf(eg: EGraph, name: str = "x", shape=(2, 3), dtype=F32) -> int:
    return eg.leaf(name, shape, dtype)


def run(eg: EGraph, *names: str):
    return Runner(rules_named(*names), LIMITS).run(eg)


def holds(eg: EGraph, node: int, term: TermLike) -> bool:
    """``term`` is already in the e-graph, in the class of ``node``."""
    before = eg.num_added
    built = build(eg, term)
    return eg.num_added == before and eg.find(built) == eg.find(node)


def sound(eg: EGraph, rule: str) -> None:
    report = check_semantics(eg, finite_only=rule in FAST_MATH)
    assert report.ok, report.disagreements
    assert report.skipped == ()


# -- positive cases, one or more per rule ----------------------------------------------------

CASES: list[Callable[[], Case]] = []


def case(fn: Callable[[], Case]) -> Callable[[], Case]:
    CASES.append(fn)
    return fn


def _binary(rule: str, op: str, value, expected: Callable[[EGraph, int], TermLike], dtype=F32) -> Case:
    eg = EGraph()
    x = leaf(eg, dtype=dtype)
    return Case(rule, eg, eg.add(op, [x, splat(eg, value, dtype=dtype)]), expected(eg, x))


@case
def commute() -> Case:
    eg = EGraph()
    x, y = leaf(eg), leaf(eg, "y")
    return Case("commute", eg, eg.add("add", [x, y]), T("add", y, x))


@case
def commute_max_float() -> Case:
    eg = EGraph()
    x, y = leaf(eg), leaf(eg, "y")
    return Case("commute-max-float", eg, eg.add("max", [x, y]), T("max", y, x))


@case
def commute_logic() -> Case:
    eg = EGraph()
    x, y = leaf(eg, dtype=BOOL), leaf(eg, "y", dtype=BOOL)
    return Case("commute", eg, eg.add("or", [x, y]), T("or", y, x))


@case
def constant_fold() -> Case:
    eg = EGraph()
    n = eg.add("mul", [splat(eg, 2.0), splat(eg, 3.0)])
    return Case("constant-fold", eg, n, splat_term(Scalar(6.0, F32), (2, 3)))


@case
def constant_fold_reduce() -> Case:
    eg = EGraph()
    n = eg.add("reduce_sum", [splat(eg, 2, dtype=I32)], (1,))
    return Case("constant-fold", eg, n, splat_term(Scalar(6, I32), (2,)))


@case
def mul_one() -> Case:
    return _binary("mul-one", "mul", 1.0, lambda eg, x: x)


@case
def mul_neg_one() -> Case:
    return _binary("mul-neg-one", "mul", -1.0, lambda eg, x: T("neg", x))


@case
def add_zero() -> Case:
    return _binary("add-zero", "add", -0.0, lambda eg, x: x)


@case
def add_zero_float() -> Case:
    return _binary("add-zero-float", "add", 0.0, lambda eg, x: x)


@case
def sub_zero_float() -> Case:
    return _binary("sub-zero-float", "sub", -0.0, lambda eg, x: x)


@case
def sub_zero() -> Case:
    return _binary("sub-zero", "sub", 0, lambda eg, x: x, I32)


@case
def div_one() -> Case:
    return _binary("div-one", "div", 1.0, lambda eg, x: x)


def _nested(rule: str, op: str, dtype=F32, expected_op: str | None = None) -> Case:
    eg = EGraph()
    x = leaf(eg, dtype=dtype)
    inner = eg.add(op, [x])
    return Case(rule, eg, eg.add(op, [inner]), T(expected_op, x) if expected_op else x)


@case
def double_neg() -> Case:
    return _nested("double-neg", "neg")


@case
def double_not() -> Case:
    return _nested("double-not", "not", BOOL)


@case
def relu_relu() -> Case:
    return _nested("relu-relu", "relu", expected_op="relu")


def _self(rule: str, op: str, dtype=F32, expected: Callable[[int], TermLike] = lambda x: x) -> Case:
    eg = EGraph()
    x = leaf(eg, dtype=dtype)
    return Case(rule, eg, eg.add(op, [x, x]), expected(x))


@case
def max_self() -> Case:
    return _self("max-self", "max")


@case
def and_self() -> Case:
    return _self("and-self", "and", BOOL)


@case
def or_self() -> Case:
    return _self("or-self", "or", BOOL)


@case
def sub_self() -> Case:
    return _self("sub-self", "sub", I32, lambda x: zeros(dtype=I32))


@case
def sub_self_float() -> Case:
    return _self("sub-self-float", "sub", F32, lambda x: zeros())


@case
def mul_zero() -> Case:
    return _binary("mul-zero", "mul", 0, lambda eg, x: zeros(dtype=I32), I32)


@case
def mul_zero_bool() -> Case:
    eg = EGraph()
    x = leaf(eg, dtype=BOOL)
    return Case("mul-zero", eg, eg.add("mul", [x, splat(eg, False, dtype=BOOL)]), zeros(dtype=BOOL))


@case
def mul_zero_float() -> Case:
    return _binary("mul-zero-float", "mul", 0.0, lambda eg, x: zeros(), F32)


@case
def log2_exp2() -> Case:
    eg = EGraph()
    x = leaf(eg)
    return Case("log2-exp2", eg, eg.add("log2", [eg.add("exp2", [x])]), x)


@case
def exp2_log2() -> Case:
    eg = EGraph()
    x = leaf(eg)
    return Case("exp2-log2", eg, eg.add("exp2", [eg.add("log2", [x])]), x)


@case
def permute_permute() -> Case:
    eg = EGraph()
    x = leaf(eg, shape=(2, 3, 4))
    inner, outer = (1, 0, 2), (2, 0, 1)
    n = eg.add("permute", [eg.add("permute", [x], inner)], outer)
    out_shape = np.zeros((2, 3, 4)).transpose(inner).transpose(outer).shape
    composed = tuple((2, 3, 4).index(d) for d in out_shape)  # the sizes are distinct, so they name the axes
    return Case("permute-permute", eg, n, T("permute", x, param=composed))


@case
def permute_identity() -> Case:
    eg = EGraph()
    x = leaf(eg)
    return Case("permute-identity", eg, eg.add("permute", [x], (0, 1)), x)


@case
def permute_as_reshape() -> Case:
    eg = EGraph()
    x = leaf(eg, shape=(2, 1, 3))
    return Case("permute-as-reshape", eg, eg.add("permute", [x], (1, 0, 2)), T("reshape", x, param=(1, 2, 3)))


@case
def permute_expand() -> Case:
    eg = EGraph()
    x = leaf(eg, shape=(1, 3, 1))
    n = eg.add("permute", [eg.add("expand", [x], (2, 3, 4))], (2, 0, 1))
    return Case("permute-expand", eg, n, T("expand", T("permute", x, param=(2, 0, 1)), param=(4, 2, 3)))


@case
def reshape_reshape() -> Case:
    eg = EGraph()
    x = leaf(eg)
    n = eg.add("reshape", [eg.add("reshape", [x], (3, 2))], (6,))
    return Case("reshape-reshape", eg, n, T("reshape", x, param=(6,)))


@case
def reshape_identity() -> Case:
    eg = EGraph()
    x = leaf(eg)
    return Case("reshape-identity", eg, eg.add("reshape", [x], (2, 3)), x)


@case
def expand_expand() -> Case:
    eg = EGraph()
    x = leaf(eg, shape=(1, 1))
    n = eg.add("expand", [eg.add("expand", [x], (1, 3))], (2, 3))
    return Case("expand-expand", eg, n, T("expand", x, param=(2, 3)))


@case
def expand_identity() -> Case:
    eg = EGraph()
    x = leaf(eg)
    return Case("expand-identity", eg, eg.add("expand", [x], (2, 3)), x)


@case
def pad_pad() -> Case:
    eg = EGraph()
    x = leaf(eg)
    n = eg.add("pad", [eg.add("pad", [x], (((1, 0), (0, 0)), 0.0))], (((0, 1), (0, 2)), 0.0))
    return Case("pad-pad", eg, n, T("pad", x, param=(((1, 1), (0, 2)), 0.0)))


@case
def pad_pad_shrink_then_shrink() -> Case:
    eg = EGraph()
    x = leaf(eg, shape=(4, 3))
    n = eg.add("pad", [eg.add("pad", [x], (((-1, 0), (0, 0)), 0.0))], (((0, -1), (0, 0)), 0.0))
    return Case("pad-pad", eg, n, T("pad", x, param=(((-1, -1), (0, 0)), 0.0)))


@case
def pad_pad_grow_then_shrink() -> Case:
    eg = EGraph()
    x = leaf(eg, shape=(4, 3))
    n = eg.add("pad", [eg.add("pad", [x], (((2, 0), (0, 0)), 5.0))], (((-1, 0), (0, 0)), 0.0))
    return Case("pad-pad", eg, n, T("pad", x, param=(((1, 0), (0, 0)), 5.0)))


@case
def pad_zero() -> Case:
    eg = EGraph()
    x = leaf(eg)
    return Case("pad-zero", eg, eg.add("pad", [x], (((0, 0), (0, 0)), 1.0)), x)


@case
def movement_sink() -> Case:
    eg = EGraph()
    a, b = eg.add("permute", [leaf(eg)], (1, 0)), eg.add("permute", [leaf(eg, "y")], (1, 0))
    n = eg.add("permute", [eg.add("add", [a, b])], (1, 0))
    return Case("movement-sink", eg, n, T("add", T("permute", a, param=(1, 0)), T("permute", b, param=(1, 0))))


@case
def movement_sink_splat() -> Case:
    eg = EGraph()
    a = eg.add("reshape", [leaf(eg, shape=(6,))], (2, 3))
    n = eg.add("reshape", [eg.add("mul", [a, splat(eg, 2.0)])], (3, 2))
    expected = T("mul", T("reshape", a, param=(3, 2)), T("reshape", splat(eg, 2.0), param=(3, 2)))
    return Case("movement-sink", eg, n, expected)


@case
def movement_sink_pad() -> Case:
    eg = EGraph()
    a = eg.add("permute", [leaf(eg, shape=(3, 2))], (1, 0))
    pad = (((1, 0), (0, 1)), 0.0)
    n = eg.add("pad", [eg.add("relu", [a])], pad)  # relu(0) == 0: the border may be padded before the relu
    return Case("movement-sink", eg, n, T("relu", T("pad", a, param=pad)))


@case
def movement_hoist() -> Case:
    eg = EGraph()
    x, y = leaf(eg, shape=(3, 2)), leaf(eg, "y", shape=(3, 2))
    n = eg.add("mul", [eg.add("permute", [x], (1, 0)), eg.add("permute", [y], (1, 0))])
    return Case("movement-hoist", eg, n, T("permute", T("mul", x, y), param=(1, 0)))


@case
def movement_hoist_pad() -> Case:
    eg = EGraph()
    x, y = leaf(eg), leaf(eg, "y")
    pads = ((1, 1), (0, 0))
    n = eg.add("add", [eg.add("pad", [x], (pads, 1.0)), eg.add("pad", [y], (pads, 2.0))])
    return Case("movement-hoist", eg, n, T("pad", T("add", x, y), param=(pads, 3.0)))  # the borders add up


def _reduce_reduce(op: str) -> Case:
    eg = EGraph()
    x = leaf(eg, shape=(2, 3, 4))
    n = eg.add(op, [eg.add(op, [x], (1,))], (1,))  # axis 1 of (2, 4) is axis 2 of x
    return Case(f"{op}-{op}", eg, n, T(op, x, param=(1, 2)))


def _reduce_ones(op: str, dtype=I32) -> Case:
    eg = EGraph()
    x = leaf(eg, shape=(2, 1, 3), dtype=dtype)
    name = f"{op}-ones" + ("-float" if op == "reduce_sum" and dtype.is_float else "")
    return Case(name, eg, eg.add(op, [x], (1,)), T("reshape", x, param=(2, 3)))


@case
def reduce_sum_ones_float() -> Case:
    return _reduce_ones("reduce_sum", F32)


@case
def reduce_max_ones_float() -> Case:
    return _reduce_ones("reduce_max", F32)


def _permute_reduce(op: str) -> Case:
    eg = EGraph()
    x = leaf(eg, shape=(2, 3, 4))
    n = eg.add("permute", [eg.add(op, [x], (1,))], (1, 0))  # (2, 4) -> (4, 2)
    return Case(f"permute-{op}", eg, n, T(op, T("permute", x, param=(2, 1, 0)), param=(1,)))


def _reduce_split(op: str) -> Case:
    eg = EGraph()
    x = leaf(eg, shape=(3, 1 << 16))
    n = eg.add(op, [x], (1,))  # 65536 = 256 x 256
    return Case(f"{op}-split", eg, n, T(op, T(op, T("reshape", x, param=(3, 256, 256)), param=(2,)), param=(1,)))


for _op in ("reduce_sum", "reduce_max"):
    for _make in (_reduce_reduce, _reduce_ones, _permute_reduce, _reduce_split):
        CASES.append(lambda op=_op, make=_make: make(op))


@case
def transpose_fusion() -> Case:
    a, b = Tensor.input("A", (2, 3)), Tensor.input("B", (3, 4))
    eg = from_program(from_tensors({"y": a @ b}))
    n = eg.outputs["y"]
    _, axes, (prod,) = eg.node(n)
    _, _, (ea, eb) = eg.node(prod)  # reduce_sum(mul(expand(a'), expand(b')), (2,)) over (2, 4, 3)
    swap = (1, 0, 2)
    expected = T("permute", T("reduce_sum", T("mul", T("permute", eb, param=swap), T("permute", ea, param=swap)),
                              param=axes), param=(1, 0))
    return Case("transpose-fusion", eg, n, expected)


@case
def matmul_layout() -> Case:
    a, b = Tensor.input("A", (2, 3)), Tensor.input("B", (3, 4))
    eg = from_program(from_tensors({"y": a @ b}))
    x = eg.lookup("leaf", param="A")
    return Case("matmul-layout", eg, x, T("permute", T("permute", x, param=(1, 0)), param=(1, 0)))


def _name(make: Callable[[], Case]) -> str:
    rule, fn = make().rule, make.__name__
    return rule if fn in ("<lambda>", rule.replace("-", "_")) else f"{rule}:{fn}"


@pytest.mark.parametrize("make", CASES, ids=[_name(m) for m in CASES])
def test_rule_applies(make):
    c = make()
    assert not holds(c.egraph, c.node, c.expected)  # the rule has something to do
    c = make()  # fresh: the probe above built the term
    result = run(c.egraph, c.rule)
    assert c.rule in result.merges_by_rule() or any(a.rule == c.rule for it in result.iterations
                                                     for a in it.applications)
    assert holds(c.egraph, c.node, c.expected), [c.egraph.describe(n) for n in c.egraph.eclass(c.node).nodes]
    sound(c.egraph, c.rule)


def test_every_rule_has_a_case():
    covered = {make().rule for make in CASES}
    assert covered == {rule.name for rule in ALL_RULES}


def test_fast_math_rules_only_on_request():
    exact = {rule.name for rule in default_rules()}
    fast = {rule.name for rule in default_rules(fast_math=True)}
    assert fast == {rule.name for rule in ALL_RULES}
    assert exact == fast - FAST_MATH
    assert {"commute-max-float", "reduce_sum-ones-float", "add-zero-float", "sub-zero-float", "sub-self-float", "mul-zero-float", "log2-exp2", "exp2-log2"} == FAST_MATH


@pytest.mark.parametrize("make", [m for m in CASES if m().rule in FAST_MATH], ids=lambda m: m().rule)
def test_fast_math_case_needs_fast_math(make):
    c = make()
    saturate(c.egraph, default_rules(), LIMITS)
    assert not holds(c.egraph, c.node, c.expected)
    c = make()
    saturate(c.egraph, default_rules(fast_math=True), LIMITS)
    assert holds(c.egraph, c.node, c.expected)
    sound(c.egraph, c.rule)


def test_rules_named_rejects_unknown_names():
    with pytest.raises(KeyError):
        rules_named("no-such-rule")
    assert [r.name for r in rules_named("commute", "pad-pad")] == ["commute", "pad-pad"]


def test_rewritten_forms_hashcons_with_lowered_ones():
    """``x * -1 = -x`` builds the very node the lowering made for ``-x`` (its parameter is None, not a wildcard)."""
    x = Tensor.input("x", (2, 3))
    eg = from_program(from_tensors({"neg": -x, "mul": x * -1.0, "relu": x.relu(), "relu2": x.relu().relu()}))
    before = eg.num_nodes
    run(eg, "mul-neg-one", "relu-relu")
    classes = eg.output_classes()
    assert classes["neg"] == classes["mul"]
    assert classes["relu"] == classes["relu2"]
    assert eg.num_nodes == before  # both right-hand sides existed already
    assert all(eg.node(n).param is None for c in eg.classes() for n in c.nodes if eg.node(n).op in ("neg", "relu"))


# -- conditions that block a rule ------------------------------------------------------------


def blocked(eg: EGraph, node: int, rule: str, term: TermLike) -> None:
    """``rule`` neither merges anything nor puts ``term`` in the class of ``node``."""
    result = run(eg, rule)
    assert result.merges_by_rule()[rule] == 0
    assert not holds(eg, node, term)


def test_commute_skips_equal_operands():
    eg = EGraph()
    x = leaf(eg)
    eg.add("add", [x, x])
    result = run(eg, "commute")
    assert result.iterations[0].matches["commute"] == 0 and len(result.iterations) == 1


def test_constant_fold_needs_a_splat():
    eg = EGraph()
    n = eg.add("mul", [leaf(eg), splat(eg, 0.0)])
    blocked(eg, n, "constant-fold", zeros())


@pytest.mark.parametrize(("rule", "op", "value"), [("mul-one", "mul", 2.0), ("mul-neg-one", "mul", 1.0),
                                                   ("add-zero", "add", 1.0), ("sub-zero", "sub", -1.0),
                                                   ("add-zero", "add", 0.0), ("sub-zero", "sub", -0.0),
                                                   ("div-one", "div", -1.0)])
def test_identity_needs_its_constant(rule, op, value):
    eg = EGraph()
    x = leaf(eg)
    n = eg.add(op, [x, splat(eg, value)])
    blocked(eg, n, rule, x)


def test_identity_needs_the_constant_on_the_right():
    eg = EGraph()
    x = leaf(eg)
    n = eg.add("sub", [splat(eg, 0.0), x])  # 0 - x is not x
    blocked(eg, n, "sub-zero", x)


def test_mul_zero_is_not_exact_for_floats():
    eg = EGraph()
    x = leaf(eg)
    n = eg.add("mul", [x, splat(eg, 0.0)])
    blocked(eg, n, "mul-zero", zeros())
    result = saturate(eg, default_rules(), LIMITS)
    assert not holds(eg, n, zeros()) and "mul-zero-float" not in result.rules


def test_mul_zero_float_is_not_applied_to_ints():
    eg = EGraph()
    x = leaf(eg, dtype=I32)
    n = eg.add("mul", [x, splat(eg, 0, dtype=I32)])
    blocked(eg, n, "mul-zero-float", zeros(dtype=I32))


def test_sub_self_is_not_exact_for_floats():
    eg = EGraph()
    x = leaf(eg, dtype=F64)
    n = eg.add("sub", [x, x])
    blocked(eg, n, "sub-self", zeros(dtype=F64))
    eg2 = EGraph()
    y = leaf(eg2, dtype=I32)
    blocked(eg2, eg2.add("sub", [y, y]), "sub-self-float", zeros(dtype=I32))


def test_fast_math_zero_is_wrong_for_infinity():
    """Why ``x * 0 = 0`` is fast-math: inf * 0 is NaN. The semantic check sees it unless told finite values only."""
    eg = EGraph()
    x = leaf(eg, shape=(3,))
    n = eg.add("mul", [x, splat(eg, 0.0, shape=(3,))])
    run(eg, "mul-zero-float")
    assert holds(eg, n, zeros(shape=(3,)))
    inputs = {"x": np.array([1.0, np.inf, -2.0], np.float32)}
    report = check_semantics(eg, inputs)
    assert not report.ok and eg.find(report.disagreements[0].class_id) == eg.find(n)
    assert check_semantics(eg, inputs, finite_only=True).ok


def test_max_self_needs_one_operand():
    eg = EGraph()
    x, y = leaf(eg), leaf(eg, "y")
    n = eg.add("max", [x, y])
    blocked(eg, n, "max-self", x)


def test_permute_as_reshape_blocked_when_big_axes_move():
    eg = EGraph()
    x = leaf(eg, shape=(2, 1, 3))
    n = eg.add("permute", [x], (2, 1, 0))
    blocked(eg, n, "permute-as-reshape", T("reshape", x, param=(3, 1, 2)))


def test_permute_identity_blocked_for_a_real_permute():
    eg = EGraph()
    x = leaf(eg)
    n = eg.add("permute", [x], (1, 0))
    blocked(eg, n, "permute-identity", T("reshape", x, param=(3, 2)))
    assert eg.find(n) != eg.find(x)


@pytest.mark.parametrize("rule", ["reshape-identity", "expand-identity"])
def test_view_identity_blocked_when_the_shape_changes(rule):
    eg = EGraph()
    x = leaf(eg, shape=(1, 3))
    op = rule.split("-")[0]
    n = eg.add(op, [x], (2, 3) if op == "expand" else (3, 1))
    result = run(eg, rule)
    assert result.merges_by_rule()[rule] == 0 and eg.find(n) != eg.find(x)


def test_pad_pad_blocked_when_a_shrunk_side_grows_again():
    eg = EGraph()
    x = leaf(eg, shape=(4, 3))
    n = eg.add("pad", [eg.add("pad", [x], (((-1, 0), (0, 0)), 0.0))], (((1, 0), (0, 0)), 0.0))
    blocked(eg, n, "pad-pad", T("pad", x, param=(((0, 0), (0, 0)), 0.0)))  # the lost row is not zeros
    assert eg.find(n) != eg.find(x)


def test_pad_pad_blocked_when_both_grow_with_different_values():
    eg = EGraph()
    x = leaf(eg)
    n = eg.add("pad", [eg.add("pad", [x], (((1, 0), (0, 0)), 1.0))], (((1, 0), (0, 0)), 2.0))
    for value in (1.0, 2.0):
        blocked(eg, n, "pad-pad", T("pad", x, param=(((2, 0), (0, 0)), value)))


def test_pad_zero_blocked_for_a_real_pad():
    eg = EGraph()
    x = leaf(eg)
    blocked(eg, eg.add("pad", [x], (((0, 1), (0, 0)), 0.0)), "pad-zero", x)


def test_movement_sink_skips_operands_that_are_not_views():
    eg = EGraph()
    x, y = leaf(eg), leaf(eg, "y")
    n = eg.add("permute", [eg.add("add", [x, y])], (1, 0))
    blocked(eg, n, "movement-sink", T("add", T("permute", x, param=(1, 0)), T("permute", y, param=(1, 0))))


def test_movement_sink_keeps_a_border_the_op_would_change():
    eg = EGraph()
    a = eg.add("permute", [leaf(eg, shape=(3, 2))], (1, 0))
    pad = (((1, 0), (0, 0)), 0.0)
    n = eg.add("pad", [eg.add("exp2", [a])], pad)  # exp2(0) == 1: the border must stay outside
    blocked(eg, n, "movement-sink", T("exp2", T("pad", a, param=pad)))


def test_movement_hoist_needs_the_same_movement_of_the_same_shape():
    eg = EGraph()
    x, y = leaf(eg, shape=(6,)), leaf(eg, "y", shape=(3, 2))
    n = eg.add("add", [eg.add("reshape", [x], (2, 3)), eg.add("reshape", [y], (2, 3))])
    result = run(eg, "movement-hoist")
    assert result.iterations[0].matches["movement-hoist"] == 0
    assert len(eg.eclass(n).nodes) == 1


def test_reduce_ones_blocked_over_a_real_axis():
    eg = EGraph()
    x = leaf(eg, shape=(2, 1, 3))
    n = eg.add("reduce_sum", [x], (0,))
    result = run(eg, "reduce_sum-ones")
    assert result.iterations[0].matches["reduce_sum-ones"] == 0 and len(eg.eclass(n).nodes) == 1


@pytest.mark.parametrize(("shape", "axes"), [
    ((1 << 15,), (0,)),  # too short
    ((65537,), (0,)),  # 65537 is prime: no factor of at least 256 on both sides
    ((256, 2, 256), (0, 2)),  # the reduced axes are not one run
    ((2048, 1 << 16), (1,)),  # more outputs than a split helps
])
def test_reduce_split_blocked(shape, axes):
    eg = EGraph()
    n = eg.add("reduce_sum", [leaf(eg, shape=shape)], axes)
    result = run(eg, "reduce_sum-split")
    assert result.iterations[0].matches["reduce_sum-split"] == 0 and len(eg.eclass(n).nodes) == 1


def test_split_factor_is_the_divisor_nearest_the_square_root():
    assert [split_factor(n) for n in (1 << 16, 1 << 21, 1 << 26, 3 << 20, 65537)] == [256, 1024, 8192, 1536, None]


def test_split_of_a_split_adds_nothing():
    """The outer reduce over (G, N/G) splits to itself: saturation stops after one split per reduce."""
    x = Tensor.input("x", (1 << 20,))
    eg = from_program(from_tensors({"y": x.sum(), "m": x.max()}))
    result = saturate(eg, limits=LIMITS)
    assert result.stop == "saturated"
    merges = result.merges_by_rule()
    assert (merges["reduce_sum-split"], merges["reduce_max-split"]) == (1, 1)
    y = eg.output_classes()["y"]
    inner = T("reduce_sum", T("reshape", eg.lookup("leaf", param="x"), param=(1024, 1024)), param=(1,))
    assert holds(eg, y, T("reduce_sum", inner, param=(0,)))
    sound(eg, "reduce_sum-split")


@st.composite
def long_reduces(draw):
    """A sum or max over a run of axes (mostly of at least 2^16 elements) of a random elementwise expression."""
    small = st.lists(st.sampled_from([1, 2, 3, 5]), max_size=1)
    run = st.lists(st.sampled_from([256, 4096, 1024, 1 << 16, 3, 65537, 5, 1]), min_size=2, max_size=3)
    before, axes, after = draw(small), draw(run), draw(small)
    dtype = draw(st.sampled_from([F32, F64, I32]))
    dims = (*before, *axes, *after)
    return dims, tuple(range(len(before), len(before) + len(axes))), dtype, draw(st.sampled_from(["sum", "max"])), \
        draw(st.booleans())


@settings(max_examples=80, derandomize=True, deadline=None)
@given(long_reduces())
def test_random_long_reduces_split_soundly(drawn):
    dims, axes, dtype, op, squared = drawn
    assume(math.prod(dims) <= 1 << 22)
    x = Tensor.input("x", tuple(dims), dtype)
    body = x * x + x if squared else x
    eg = from_program(from_tensors({"y": getattr(body, op)(axes)}))
    result = saturate(eg, limits=LIMITS)
    n = math.prod(dims[a] for a in axes)
    outputs = math.prod(dims) // n
    expected = n >= 1 << 16 and split_factor(n) is not None and outputs <= 1024
    assert (result.merges_by_rule()[f"reduce_{op}-split"] > 0) == expected
    report = check_semantics(eg)
    assert report.ok, report.disagreements
    assert report.skipped == ()


def test_matmul_layout_skips_matrices_with_a_unit_dimension():
    a, b = Tensor.input("A", (2, 1)), Tensor.input("B", (1, 4))  # k == 1: both operand matrices are vectors
    eg = from_program(from_tensors({"y": a @ b}))
    result = run(eg, "matmul-layout", "transpose-fusion")
    assert result.iterations[0].matches == {"matmul-layout": 0, "transpose-fusion": 1}  # the contraction is seen
    assert result.merges_by_rule()["matmul-layout"] == 0
    sound(eg, "matmul-layout")


def test_transpose_fusion_skips_vector_results():
    eg = EGraph()
    x, y = leaf(eg, shape=(1, 3)), leaf(eg, "y", shape=(2, 1))
    prod = eg.add("mul", [eg.add("expand", [x], (2, 3)), eg.add("expand", [y], (2, 3))])
    eg.add("reduce_sum", [prod], (1,))  # a contraction with a rank-1 result: no last two axes to swap
    result = run(eg, "transpose-fusion")
    assert result.iterations[0].matches["transpose-fusion"] == 0


# -- transpose fusion through the builder --------------------------------------------------


def _transposes() -> EGraph:
    a, b = Tensor.input("A", (3, 2)), Tensor.input("B", (4, 3))
    return from_program(from_tensors({"lhs": a.T @ b.T, "rhs": (b @ a).T}))


def test_transpose_fusion_joins_both_orders():
    eg = _transposes()
    assert eg.output_classes()["lhs"] != eg.output_classes()["rhs"]
    result = saturate(eg, limits=Limits(iterations=20, seconds=10))
    assert result.stop == "saturated"
    classes = eg.output_classes()
    assert classes["lhs"] == classes["rhs"]
    sound(eg, "transpose-fusion")


def test_transpose_fusion_is_what_joins_them_without_sinking():
    """Without the rules that move permutes through reduces and elementwise ops, only transpose fusion helps."""
    moving = {"permute-reduce_sum", "permute-reduce_max", "movement-sink", "movement-hoist"}
    rules = [r for r in default_rules() if r.name not in moving]
    eg = _transposes()
    Runner(rules, Limits(iterations=20, seconds=10)).run(eg)
    assert len(set(eg.output_classes().values())) == 1
    eg = _transposes()
    Runner([r for r in rules if r.name != "transpose-fusion"], Limits(iterations=20, seconds=10)).run(eg)
    assert len(set(eg.output_classes().values())) == 2


def test_declarative_rule_with_condition():
    x = Var("x")
    rule = rewrite("add-self-is-twice", P("add", x, x), lambda eg, m: T("mul", m["x"], splat(eg, 2.0)),
                   lambda eg, m: eg.eclass(m["x"]).dtype.is_float)
    eg = EGraph()
    a, i = leaf(eg), leaf(eg, "i", dtype=I32)
    n, k = eg.add("add", [a, a]), eg.add("add", [i, i])
    eg.add("add", [a, leaf(eg, "b")])  # not x + x
    result = Runner([rule], LIMITS).run(eg)
    assert result.merges_by_rule() == {"add-self-is-twice": 1}
    assert len(eg.eclass(n).nodes) == 2 and len(eg.eclass(k).nodes) == 1
    assert check_semantics(eg).ok

"""The runner: every stop reason, the rewrite log's bookkeeping, and snapshots of past iterations."""

from __future__ import annotations

from collections import Counter

import pytest

import engine
import sample_graphs
from engine.egraph import (
    CONGRUENCE,
    EGraph,
    Limits,
    Runner,
    Saturation,
    StopReason,
    default_rules,
    from_program,
    rules_named,
    saturate,
)

ROOMY = Limits(iterations=50, nodes=50_000, seconds=30)


def sample(name: str = "matmul.small") -> EGraph:
    return from_program(engine.load(sample_graphs.path(name)))


def run(name: str = "matmul.small", limits: Limits = ROOMY, **kwargs) -> Saturation:
    return Runner(default_rules(), limits, **kwargs).run(sample(name))


def contents(eg: EGraph) -> tuple:
    """The e-graph up to the choice of class ids: its partition of node ids and every node with canonical children."""
    members: dict[int, list[int]] = {}
    for n in range(eg.num_added):
        members.setdefault(eg.find(n), []).append(n)
    rep = {c: min(ns) for c, ns in members.items()}
    partition = frozenset(frozenset(ns) for ns in members.values())
    nodes = {}
    for cls in eg.classes():
        for n in cls.nodes:
            op, param, children = eg.node(n)
            nodes[n] = (op, param, tuple(rep[eg.find(c)] for c in children))
    splats = {rep[cls.id]: cls.splat for cls in eg.classes()}
    return partition, nodes, splats, eg.num_nodes, eg.num_classes, eg.num_added, len(eg.unions)


# -- stop reasons ------------------------------------------------------------------------


def test_saturates_a_small_sample():
    result = run("matmul.small")
    assert result.stop is StopReason.SATURATED
    last = result.iterations[-1]
    assert last.applications == () and last.congruences == 0
    before = result.iterations[-2].log_position if len(result.iterations) > 1 else result.start
    assert last.log_position == before  # nothing changed in the last iteration
    assert len(result.iterations) > 1
    assert result.seconds >= sum(it.seconds for it in result.iterations)


def test_saturate_defaults_to_the_exact_rules():
    result = saturate(sample("elementwise.small"))
    assert result.rules == tuple(r.name for r in default_rules())
    assert result.stop is StopReason.SATURATED


def test_no_rules_saturate_at_once():
    result = Runner([], ROOMY).run(sample())
    assert result.stop is StopReason.SATURATED and len(result.iterations) == 1
    assert result.iterations[0].matches == {}


def test_iteration_limit():
    full = run("matmul.small")
    assert len(full.iterations) > 2
    result = run("matmul.small", Limits(iterations=1))
    assert result.stop is StopReason.ITERATION_LIMIT
    assert len(result.iterations) == 1
    assert result.iterations[0].applications  # it was not done
    result = run("matmul.small", Limits(iterations=len(full.iterations) - 1))
    assert result.stop is StopReason.ITERATION_LIMIT


def test_exactly_enough_iterations_is_saturated():
    full = run("matmul.small")
    result = run("matmul.small", Limits(iterations=len(full.iterations)))
    assert result.stop is StopReason.SATURATED


def test_node_limit():
    eg = sample("attention.small")
    start = eg.num_nodes
    limit = start + 10
    result = Runner(default_rules(), Limits(nodes=limit)).run(eg)
    assert result.stop is StopReason.NODE_LIMIT
    assert eg.num_nodes > limit  # it stops as soon as the limit is passed ...
    assert eg.num_nodes < run("attention.small").egraph.num_nodes  # ... well before saturation
    assert len(result.iterations) < len(run("attention.small").iterations)
    assert eg.clean  # the stopped iteration was rebuilt and logged
    assert result.iterations[-1].nodes == eg.num_nodes


def test_time_limit():
    result = run("attention.small", Limits(seconds=0))
    assert result.stop is StopReason.TIME_LIMIT
    assert len(result.iterations) == 1
    assert result.egraph.clean


def test_cancelled():
    calls = []

    def cancel() -> bool:
        calls.append(1)
        return True

    result = run("attention.small", cancel=cancel)
    assert result.stop is StopReason.CANCELLED
    assert len(result.iterations) == 1 and calls


def test_cancelled_later():
    """Cancelling after some checks stops in a later iteration; the work done so far is kept and logged."""
    full = run("attention.small")
    checks = []

    def cancel() -> bool:
        checks.append(1)
        return len(checks) > 3 * len(default_rules())

    result = run("attention.small", cancel=cancel)
    assert result.stop is StopReason.CANCELLED
    assert 1 < len(result.iterations) < len(full.iterations)


def test_cancel_beats_time_limit():
    result = run("attention.small", Limits(seconds=0), cancel=lambda: True)
    assert result.stop is StopReason.CANCELLED


def test_never_cancelled_saturates():
    result = run("matmul.small", cancel=lambda: False)
    assert result.stop is StopReason.SATURATED


# -- the rewrite log ---------------------------------------------------------------------


@pytest.mark.parametrize("name", ["matmul.small", "attention.small", "layernorm.small"])
def test_rewrite_log_bookkeeping(name):
    result = run(name)
    eg = result.egraph
    names = set(result.rules)
    assert [it.index for it in result.iterations] == list(range(1, len(result.iterations) + 1))
    assert result.start_counts[0] <= result.start[0]
    previous = result.start
    for it in result.iterations:
        assert set(it.matches) == names
        added, unions = it.log_position
        assert added >= previous[0] and unions >= previous[1]  # the event log only grows
        for a in it.applications:
            assert a.rule in names
            assert it.matches[a.rule] > 0
            assert a.node < previous[0]  # found by the search, before this iteration added anything
            assert a.result < added
        per_rule = Counter(a.rule for a in it.applications)
        assert all(per_rule[r] <= it.matches[r] for r in per_rule)
        for a in it.merges:
            assert a.merged[0] != a.merged[1]
        logged = eg.unions[previous[1]:unions]
        assert len(logged) == len(it.merges) + it.congruences  # every union is a merge or a congruence
        assert sum(u.reason == CONGRUENCE for u in logged) == it.congruences
        assert Counter(u.reason for u in logged if u.reason != CONGRUENCE) == Counter(a.rule for a in it.merges)
        # a new node is a new class and a union removes one
        assert it.classes == result.start_counts[1] + (added - result.start[0]) - (unions - result.start[1])
        assert it.nodes <= added
        previous = it.log_position
    assert result.iterations[-1].nodes == eg.num_nodes and result.iterations[-1].classes == eg.num_classes


def test_merges_by_rule_matches_the_unions():
    result = run("attention.small")
    unions = result.egraph.unions[result.start[1]:]
    assert result.merges_by_rule() == Counter(u.reason for u in unions if u.reason != CONGRUENCE)
    assert sum(result.merges_by_rule().values()) == sum(len(it.merges) for it in result.iterations)
    assert sum(it.congruences for it in result.iterations) == sum(u.reason == CONGRUENCE for u in unions)
    assert result.merges_by_rule()["commute"] > 0


def test_iteration_of_union():
    eg = sample("attention.small")
    leaves = [n for n in range(eg.num_added) if eg.node(n).op == "leaf"]
    eg.union(eg.add("neg", [eg.add("neg", [leaves[0]])]), leaves[0], "given")  # a union before saturation
    result = Runner(default_rules(), ROOMY).run(eg)
    assert result.start[1] == 1
    assert result.iteration_of_union(0) == 0
    begin = result.start[1]
    for it in result.iterations:
        end = it.log_position[1]
        for u in range(begin, end):
            assert result.iteration_of_union(u) == it.index
        begin = end
    assert begin == len(eg.unions)


def test_snapshot_bounds():
    result = run("matmul.small")
    with pytest.raises(IndexError):
        result.snapshot(len(result.iterations) + 1)
    with pytest.raises(IndexError):
        result.snapshot(-1)


def test_snapshot_zero_is_the_input():
    result = run("matmul.small")
    assert contents(result.snapshot(0)) == contents(sample("matmul.small"))


def test_snapshot_equals_a_shorter_run():
    full = run("attention.small")
    assert len(full.iterations) > 3
    assert contents(full.snapshot(len(full.iterations))) == contents(full.egraph)
    for i in range(1, len(full.iterations) + 1):
        shorter = run("attention.small", Limits(iterations=i, nodes=ROOMY.nodes, seconds=ROOMY.seconds))
        snap = full.snapshot(i)
        assert contents(snap) == contents(shorter.egraph), i
        assert (snap.num_nodes, snap.num_classes) == (full.iterations[i - 1].nodes, full.iterations[i - 1].classes)
        assert snap.outputs == shorter.egraph.outputs
        assert snap.leaf_types == full.egraph.leaf_types


def test_snapshot_does_not_touch_the_egraph():
    result = run("matmul.small")
    before = contents(result.egraph)
    result.snapshot(1)
    assert contents(result.egraph) == before


def test_commute_alone_saturates_in_two_iterations():
    """A commuted node commutes back to a node that exists: the second iteration changes nothing."""
    result = Runner(rules_named("commute"), ROOMY).run(sample("matmul.small"))
    assert result.stop is StopReason.SATURATED
    first, second = result.iterations[0], result.iterations[1]
    assert first.matches["commute"] > 0
    assert len(result.iterations) == 2
    assert second.applications == ()

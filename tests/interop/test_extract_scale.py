"""Extraction at scale: greedy's work is linear, the DAG search reaches the ILP's optimum on random
e-graphs, every extractor keeps its time limit, and the foreign view kills a running extraction on quit."""

from __future__ import annotations

import signal
import threading
from dataclasses import replace
from pathlib import Path

import pytest

from engine.extract import EXTRACTORS, Problem, solve
from engine.interop import parse_serialized, problem_of
from tests.interop.graphs import SHARING, chain, random_egraph
from zyx_explorer.foreign import ForeignApp


class Counted(float):
    """A producer's time that counts the additions to it: greedy scoring its producer, the extraction
    adding up its tree cost."""

    scorings = 0

    def __add__(self, other: float) -> float:
        Counted.scorings += 1
        return float(self) + other


def test_greedy_scores_each_producer_once_on_a_chain_listed_parents_first():
    """A sweep in file order to a fixed point settles one class per sweep here: n² scorings."""
    n = 3000
    given = problem_of(parse_serialized(chain(n, alternatives=2))).problem
    order = given.order
    problem = Problem([(v, replace(p, time=Counted(p.time))) for v, p in order], given.outputs)
    Counted.scorings = 0
    assert solve(problem, "greedy").dag_cost == n  # every class by its cost-1 form
    assert Counted.scorings <= len(order) + n  # once per producer, and once per chosen value for its tree cost


def test_every_extractor_takes_a_time_limit():
    problem = problem_of(parse_serialized(SHARING)).problem
    for method in EXTRACTORS:
        assert solve(problem, method, time_limit=5.0).dag_cost == (5.0 if method == "greedy" else 4.0)
    out = solve(problem, "dag", time_limit=0.0)  # no time to search: greedy's selection, and a note saying why
    assert out.dag_cost == 5.0 and "time limit" in out.note
    out = solve(problem, "ilp", time_limit=0.0)
    assert out.status == "timeout" and "before the solver ran" in out.note


def test_the_ilp_returns_at_its_limit_when_the_solver_does_not(monkeypatch):
    import scipy.optimize

    release = threading.Event()
    real = scipy.optimize.milp

    def stuck(*args, **kwargs):
        release.wait()
        return real(*args, **kwargs)

    monkeypatch.setattr(scipy.optimize, "milp", stuck)
    unstick = threading.Timer(30.0, release.set)  # an ILP that waited for the solver fails, not hangs
    unstick.start()
    try:
        out = solve(problem_of(parse_serialized(SHARING)).problem, "ilp", time_limit=0.5)
    finally:
        release.set()
        unstick.cancel()
    assert out.status == "timeout" and "while the solver ran" in out.note
    assert out.dag_cost == 4.0  # the dag pre-search's result


def test_dag_reaches_the_ilp_optimum_on_random_egraphs():
    worse = 0
    for seed in range(8):
        problem = problem_of(parse_serialized(random_egraph(seed, 200))).problem
        g, d, i = (solve(problem, m, time_limit=60.0) for m in ("greedy", "dag", "ilp"))
        assert i.status == "optimal"
        assert d.dag_cost == pytest.approx(i.dag_cost), seed
        worse += g.dag_cost > i.dag_cost
    assert worse >= 2  # the graphs have sharing that greedy misses


async def test_quitting_kills_a_running_extraction():
    app = ForeignApp(parse_serialized(random_egraph(1, 1000, leaves=0.0)), Path("big.json"), ilp_time_limit=300.0)
    async with app.run_test() as pilot:
        while app.child is None:
            await pilot.pause(0.01)
        assert app.running
        await pilot.press("q")
    assert app.child.wait(timeout=30) == -signal.SIGKILL

"""The fuzz harness (tests/fuzzing.py) at CI size: a few tens of cases per category and the fast scenarios.

By hand it runs thousands (``python -m tests.fuzzing --cases 3000``; counts in benchmarks/RESULTS.md).
"""

from __future__ import annotations

import io

from tests import fuzzing


def test_fuzzed_commands_never_crash_hang_or_mislead():
    log = io.StringIO()
    counts = fuzzing.run(cases=25, seed=7, scenarios="quick", log=log)
    assert fuzzing.failures_in(counts) == 0, log.getvalue()[:3000]
    assert [sum(c.values()) for c in counts.values()] == [25, 25, 25, 2, 3]
    assert counts["check"]["located"] > 0 and counts["compile"]["ok"] > 0  # the cases reach both outcomes


def test_classify():
    argv = ["check", "g.json"]
    assert fuzzing.classify(argv, 2, "", "error: g.json: nodes[0]: bad\n") == "located"
    assert fuzzing.classify(argv, 2, "", "error: something went wrong\n") == "unlocated"
    assert fuzzing.classify(argv, 0, "", "Traceback (most recent call last):\n") == "traceback"
    assert fuzzing.classify(argv, None, "", "", escaped="KeyError: 'x'") == "traceback"
    assert fuzzing.classify(argv, -11, "", "") == "crash"


def test_the_worker_reports_a_hang(tmp_path, monkeypatch):
    """A case that does not answer in time is a hang, and the worker is replaced for the next case."""
    workers = fuzzing.Workers({**fuzzing.os.environ, "PYTHONPATH": str(fuzzing.ROOT)})
    fuzzing.prepare_folder(tmp_path / "g")
    try:
        assert workers.run("check", 1, tmp_path / "g", timeout=0.001)["outcome"] == "hang"
        assert workers.run("check", 1, tmp_path / "g", timeout=60)["outcome"] in ("ok", "located")
    finally:
        workers.close()

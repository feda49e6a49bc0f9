"""The zyx-explore command line: check, version, help and located errors with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import sample_graphs
import zyx_explorer.cli
from engine.egraph import P, Var, default_rules, rewrite
from zyx_explorer import __version__
from zyx_explorer.cli import default_file, main


def test_check_prints_a_summary(capsys):
    assert main(["check", str(sample_graphs.path("attention.small"))]) == 0
    out = capsys.readouterr().out
    for fragment in ("Inputs", "Outputs", "matmul", "attention", "74 primitive ops", "is a valid graph.json"):
        assert fragment in out


def test_check_reports_unused_nodes(tmp_path, capsys):
    doc = {"inputs": {"x": {"shape": [2]}}, "nodes": [{"id": "a", "op": "relu", "args": ["x"]},
                                                     {"id": "b", "op": "neg", "args": ["x"]}], "outputs": ["a"]}
    path = tmp_path / "g.json"
    path.write_text(json.dumps(doc))
    assert main(["check", str(path)]) == 0
    assert "1 not used by any output" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('{"inputs": {}, "nodes": [{"id": "a", "op": "add", "args": ["x", "w3"]}], "outputs": ["a"]}',
         "nodes[0].args[0]: unknown tensor 'x'"),
        ('{"inputs": {},\n  "nodes": [,]}', "line 2 column 13: invalid JSON"),
    ],
)
def test_bad_file_gives_one_located_paragraph_and_exit_2(tmp_path, capsys, text, fragment):
    path = tmp_path / "bad.json"
    path.write_text(text)
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert fragment in err
    assert str(path) in err
    assert "Traceback" not in err


def test_explore_refuses_a_bad_file_before_the_ui_starts(tmp_path, capsys):
    assert main([str(tmp_path / "missing.json")]) == 2
    assert "missing.json: no such file" in capsys.readouterr().err


def test_default_file_is_the_bundled_attention():
    assert default_file() == sample_graphs.path("attention")
    assert default_file().is_file()


def test_console_script_version_and_help():
    version = subprocess.run([sys.executable, "-m", "zyx_explorer", "--version"], capture_output=True, text=True)
    assert version.returncode == 0 and version.stdout.strip() == f"zyx-explore {__version__}"
    helped = subprocess.run([sys.executable, "-m", "zyx_explorer", "--help"], capture_output=True, text=True)
    assert helped.returncode == 0 and "check FILE" in helped.stdout


def test_subprocess_error_has_no_traceback(tmp_path):
    path = tmp_path / "cyc.json"
    path.write_text(json.dumps({"inputs": {}, "nodes": [{"id": "a", "op": "neg", "args": ["a"]}], "outputs": ["a"]}))
    run = subprocess.run([sys.executable, "-m", "zyx_explorer", "check", str(path)], capture_output=True, text=True)
    assert run.returncode == 2
    assert "cycle" in run.stderr and "Traceback" not in run.stderr


@pytest.mark.parametrize("name", ["mlp.small", "attention.small", "layernorm.small"])
def test_check_semantic_saturates_and_agrees(capsys, name):
    assert main(["check", "--semantic", str(sample_graphs.path(name))]) == 0
    out = capsys.readouterr().out
    for fragment in ("is a valid graph.json", "Saturation", "stop reason", "saturated", "e-nodes",
                     "Merges per rule", "commute", "Semantic check", "seed 0", "ok: every form agrees"):
        assert fragment in out, fragment


def test_check_semantic_reports_sizes_before_and_after(capsys):
    assert main(["check", "--semantic", str(sample_graphs.path("mlp.small"))]) == 0
    out = capsys.readouterr().out
    assert "26 -> 90" in out and "26 -> 42" in out  # e-nodes, then e-classes
    assert "random and special-value inputs" in out and "90 forms of 42 classes compared" in " ".join(out.split())


def test_check_semantic_fast_math(capsys):
    path = str(sample_graphs.path("swiglu_mlp.small"))
    assert main(["check", "--semantic", "--fast-math", "--seed", "3", path]) == 0
    out = capsys.readouterr().out
    assert "exact + fast-math" in out and "seed 3, finite values only" in out and "ok: every form agrees" in out


def test_check_semantic_stops_at_a_limit(capsys):
    assert main(["check", "--semantic", "--nodes", "100", str(sample_graphs.path("attention.small"))]) == 0
    out = capsys.readouterr().out
    assert "node limit" in out and "(limit 100)" in out and "ok: every form agrees" in out


def test_check_semantic_finds_an_unsound_rule(monkeypatch, capsys):
    x, y = Var("x"), Var("y")
    wrong = rewrite("sub-commute", P("sub", x, y), P("sub", y, x, param=None), doc="x - y = y - x (wrong)")
    monkeypatch.setattr(zyx_explorer.cli, "default_rules", lambda fast_math=False: [*default_rules(fast_math), wrong])
    assert main(["check", "--semantic", str(sample_graphs.path("layernorm.small"))]) == 1
    out = capsys.readouterr().out
    assert "Disagreements" in out and "sub-commute" in out and "a rule is unsound" in out
    assert "ok: every form agrees" not in out


def test_check_semantic_bad_file_exits_2(tmp_path, capsys):
    path = tmp_path / "bad.json"
    path.write_text('{"inputs": {}, "nodes": [{"id": "a", "op": "neg", "args": ["x"]}], "outputs": ["a"]}')
    assert main(["check", "--semantic", str(path)]) == 2
    captured = capsys.readouterr()
    assert "unknown tensor 'x'" in captured.err and "Traceback" not in captured.err
    assert "Saturation" not in captured.out


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--semantic", "--iterations", "-1"], "--iterations: must be at least 0"),
        (["--semantic", "--nodes", "0"], "--nodes: must be at least 1"),
        (["--semantic", "--seconds", "0"], "--seconds: must be a positive number"),
        (["--semantic", "--seconds", "inf"], "--seconds: must be a positive number"),
        (["--semantic", "--seed", "-3"], "--seed: must be at least 0"),
        (["--semantic", "--seed", "one"], "--seed: not an integer"),
        (["--fast-math"], "--fast-math needs --semantic"),
        (["--seed", "1", "--iterations", "3"], "--seed, --iterations need --semantic"),
    ],
)
def test_check_semantic_bad_options_are_usage_errors(capsys, args, fragment):
    with pytest.raises(SystemExit) as exit_:
        main(["check", *args, str(sample_graphs.path("sum.small"))])
    assert exit_.value.code == 2
    assert fragment in capsys.readouterr().err


def test_help_mentions_check_semantic(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    assert "check --semantic FILE" in capsys.readouterr().out


@pytest.mark.parametrize("tune", [True, False], ids=["tuned", "no-tune"])
def test_compile_json_reports_the_plan(capsys, tune):
    args = ["compile", str(sample_graphs.path("mlp.small")), "--json", "--no-opencl", "--no-native", "--budget", "8"]
    assert main(args + ([] if tune else ["--no-tune"])) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["verified"] is True and out["devices"] == ["numpy", "blas"]
    assert out["launches"] == len(out["plan"]) > 0 and out["budget_s"] == (8.0 if tune else None)
    assert out["launches_measured"] == (out["launches"] if tune else 0)
    assert out["coverage"] == (f"all {out['launches']} launches measured" if tune
                               else f"{out['launches']} of {out['launches']} launches predicted only")
    assert out["predicted_s"] == pytest.approx(sum(launch["predicted_s"] for launch in out["plan"])
                                               + out["copies_predicted_s"])
    assert out["measured_s"] >= sum(launch["measured_s"] for launch in out["plan"]) > 0 and out["first_run_s"] > 0
    assert out["reruns"] == 2 and out["resident_inputs"] is False
    assert (out["kernels_tuned"] > 0) is tune and out["tune_s"] >= 0
    assert all({"kernel", "device", "variant", "predicted_s", "measured_s"} <= set(launch) for launch in out["plan"])


def test_compile_prints_the_plan_and_its_coverage(capsys):
    assert main(["compile", str(sample_graphs.path("mlp.small")), "--no-tune", "--no-opencl", "--no-native"]) == 0
    out = capsys.readouterr().out
    assert "plan launches" in out and "launches predicted only" in out and "verified" in out
    assert "(median of 2 reruns; first run " in out


def test_compile_for_resident_inputs_says_so(capsys):
    args = ["compile", str(sample_graphs.path("mlp.small")), "--no-tune", "--no-native", "--resident"]
    assert main(args) == 0
    assert "plan for inputs resident on the devices (their uploads priced at nothing): " in capsys.readouterr().out
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["resident_inputs"] is True and out["verified"] is True

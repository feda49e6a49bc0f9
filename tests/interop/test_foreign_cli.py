"""The CLI on foreign e-graphs: ``extract`` (table and JSON), detection by ``zyx-explore FILE``, exit codes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import sample_graphs
import zyx_explorer.cli
import zyx_explorer.foreign
from tests.interop.graphs import SHARING, egglog_arith
from zyx_explorer.cli import main


@pytest.fixture
def sharing(tmp_path):
    path = tmp_path / "sharing.json"
    path.write_text(json.dumps(SHARING))
    return path


def test_extract_prints_every_extractor(sharing, capsys):
    assert main(["extract", str(sharing)]) == 0
    out = capsys.readouterr().out
    assert "6 nodes, 4 classes, roots (root_eclasses): R" in out
    lines = {line.split()[1]: line for line in out.splitlines() if line.startswith("│")}
    assert "5 " in lines["greedy"] and "4 " in lines["dag"] and "optimal" in lines["ilp"]


def test_extract_json_for_scripts(sharing, capsys):
    assert main(["extract", "--json", "--extractor", "greedy", "--extractor", "ilp", str(sharing)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [r["extractor"] for r in doc["results"]] == ["greedy", "ilp"]
    assert doc["results"][1]["dag_cost"] == 4.0 and doc["results"][1]["chosen"]["A"] == "a_s"


def test_extract_on_an_egglog_file(tmp_path, capsys):
    path = tmp_path / "egglog.json"
    path.write_text(json.dumps(egglog_arith()))
    assert main(["extract", "--json", str(path)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {r["extractor"]: r["dag_cost"] for r in doc["results"]} == {"greedy": 20.0, "dag": 20.0, "ilp": 20.0}


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ('{"nodes": {"a": {"op": "x", "eclass": "A", "cost": -2}}}', "nodes.a.cost: expected a finite cost >= 0 and <= 1e+100"),
        ('{"nodes": {"a": {"op": "x", "eclass": "A", "children": ["q"]}}}', "nodes.a.children[0]: unknown node 'q'"),
        ("{\n  nodes", "line 2 column 3: invalid JSON"),
    ],
)
def test_extract_errors_are_one_located_paragraph(tmp_path, capsys, content, fragment):
    path = tmp_path / "bad.json"
    path.write_text(content)
    assert main(["extract", str(path)]) == 2
    err = capsys.readouterr().err
    assert fragment in err and str(path) in err and "Traceback" not in err


def test_extract_refuses_a_graph_json(capsys):
    assert main(["extract", str(sample_graphs.path("mlp.small"))]) == 2
    assert "a graph.json program, not an egraph-serialize e-graph" in capsys.readouterr().err


def test_an_uncomputable_root_exits_2(tmp_path, capsys):
    path = tmp_path / "loop.json"
    path.write_text(json.dumps({"nodes": {"a": {"op": "f", "eclass": "A", "children": ["a"]}}, "root_eclasses": ["A"]}))
    assert main(["extract", str(path)]) == 2
    err = capsys.readouterr().err
    assert "loop.json: ilp: nothing computes output(s) A" in err and "Traceback" not in err


def test_explore_detects_the_format(sharing, monkeypatch):
    opened = []
    monkeypatch.setattr(zyx_explorer.foreign.ForeignApp, "run", lambda self: opened.append(self))
    monkeypatch.setattr(zyx_explorer.cli, "_need_terminal", lambda: None)  # pytest's stdin is not a terminal
    assert main([str(sharing)]) == 0
    assert opened and set(opened[0].egraph.classes) == {"S", "A", "B", "R"} | {"A", "B"}


def test_subprocess_extract_error_has_no_traceback(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"nodes": {"a": {"op": "x", "eclass": "A", "subsumed": "yes"}}}')
    run = subprocess.run([sys.executable, "-m", "zyx_explorer", "extract", str(path)], capture_output=True, text=True)
    assert run.returncode == 2 and "nodes.a.subsumed: expected true or false" in run.stderr
    assert "Traceback" not in run.stderr


@pytest.mark.parametrize(("stage", "root_suffix"), [("egraph", ""), ("saturated", ""), ("kernelized", "@host")])
def test_serialize_writes_an_extractable_file(tmp_path, capsys, stage, root_suffix):
    out = tmp_path / "mlp.json"
    assert main(["serialize", str(sample_graphs.path("mlp.small")), "-o", str(out), "--stage", stage,
                 "--no-tune", "--no-opencl"]) == 0
    assert f"the {stage} e-graph" in capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert all(r.endswith(root_suffix) and r.startswith("c") for r in doc["root_eclasses"])
    assert main(["extract", "--json", str(out)]) == 0
    results = json.loads(capsys.readouterr().out)["results"]
    assert all(r["dag_cost"] > 0 and not r["error"] for r in results)
    if stage == "egraph":  # before saturation: one form per class, every extractor takes all the classes needed
        assert len({r["dag_cost"] for r in results}) == 1


def test_serialize_refuses_to_overwrite(tmp_path, capsys):
    out = tmp_path / "x.json"
    out.write_text("keep")
    assert main(["serialize", str(sample_graphs.path("mlp.small")), "-o", str(out), "--no-tune"]) == 2
    assert "use --force" in capsys.readouterr().err and out.read_text() == "keep"


def test_check_detects_and_summarises_an_egraph_serialize_file(sharing, capsys):
    assert main(["check", str(sharing)]) == 0
    out = " ".join(capsys.readouterr().out.split())  # the console wraps at its width
    assert "an egraph-serialize e-graph" in out and "6 nodes in 4 classes, roots (root_eclasses): R" in out
    assert "is a valid egraph-serialize e-graph" in out and "graph.json" not in out


def test_check_of_a_broken_egraph_serialize_file_is_one_located_message(tmp_path, capsys):
    path = tmp_path / "broken.json"
    path.write_text(json.dumps({"nodes": {"a": {"op": "x", "children": ["missing"], "eclass": "A"}}}))
    assert main(["check", str(path)]) == 2
    err = "".join(capsys.readouterr().err.split())
    assert "".join(str(path).split()) in err and "Traceback" not in err and "unknown key" not in err


def test_check_semantic_refuses_an_egraph_serialize_file(sharing, capsys):
    assert main(["check", "--semantic", str(sharing)]) == 2
    assert "--semantic checks a graph.json program" in " ".join(capsys.readouterr().err.split())

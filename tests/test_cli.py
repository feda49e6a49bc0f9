"""The zyx-explore command line: check, version, help and located errors with exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import sample_graphs
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


def test_default_file_is_the_bundled_mlp():
    assert default_file() == sample_graphs.path("mlp")
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

"""``zyx-explore export``: one file per stage plus the reports, --force, a missing `dot`, bad input exits 2."""

from __future__ import annotations

import json
import re

import pytest

import sample_graphs
import zyx_explorer.cli
from engine import STAGES
from engine.devices import LibraryDevice, NumpyDevice
from zyx_explorer.cli import main

SAMPLE = str(sample_graphs.path("mlp.small"))


@pytest.fixture
def host_devices(monkeypatch):
    """Compile for numpy and BLAS only: quick, and the same on every machine."""
    monkeypatch.setattr(zyx_explorer.cli, "discover", lambda opencl=True, **_: [NumpyDevice(), LibraryDevice()])


def test_export_writes_one_file_per_stage_and_the_reports(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["export", SAMPLE, "--stage", "all", "--format", "svg", "-o", str(out)]) == 0
    assert {p.name for p in out.glob("*.svg")} == {f"{s}.svg" for s in STAGES} | {"timeline.svg"}
    assert (out / "report.html").is_file() and (out / "report.md").is_file()


def test_an_output_folder_with_files_needs_force(tmp_path, capsys, host_devices):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert main(["export", SAMPLE, "--stage", "plan", "-o", str(out)]) == 2
    assert "is not empty; use --force" in capsys.readouterr().err
    assert not (out / "plan.svg").exists()
    assert main(["export", SAMPLE, "--stage", "plan", "-o", str(out), "--force"]) == 0
    assert (out / "plan.svg").exists() and (out / "keep.txt").read_text() == "mine"


def test_missing_dot_says_so_in_one_line_and_writes_dot(tmp_path, capsys, monkeypatch, host_devices):
    monkeypatch.setenv("PATH", str(tmp_path / "no-graphviz"))
    out = tmp_path / "out"
    assert main(["export", SAMPLE, "--stage", "saturated", "-o", str(out)]) == 0
    err = [line for line in capsys.readouterr().err.splitlines() if "dot" in line]
    assert len(err) == 1 and "`dot` not found on PATH" in err[0]
    assert (out / "saturated.dot").is_file() and not (out / "saturated.svg").exists()


def test_png_neighbourhood_and_plan_only(tmp_path, host_devices):
    out = tmp_path / "out"
    assert main(["export", SAMPLE, "--stage", "saturated", "--format", "png", "-o", str(out),
                 "--neighbourhood", "c0", "--depth", "1", "--plan-only", "--collapse"]) == 0
    assert (out / "saturated.png").read_bytes()[:4] == b"\x89PNG"
    assert "neighbourhood of c0 (depth 1)" in (out / "saturated.dot").read_text()


@pytest.mark.parametrize(
    ("args", "fragment"),
    [(["--depth", "3"], "--depth needs --neighbourhood"), (["--format", "gif"], "invalid choice"),
     (["--stage", "nope"], "invalid choice"), (["--neighbourhood", "x1"], "not a class id")],
)
def test_bad_options_exit_2(tmp_path, capsys, args, fragment):
    with pytest.raises(SystemExit) as exit_:
        main(["export", SAMPLE, "-o", str(tmp_path / "out"), *args])
    assert exit_.value.code == 2
    assert fragment in capsys.readouterr().err


def test_an_unknown_class_exits_2(tmp_path, capsys, host_devices):
    assert main(["export", SAMPLE, "-o", str(tmp_path / "out"), "--neighbourhood", "c99999"]) == 2
    assert "--neighbourhood c99999: no such class" in capsys.readouterr().err


def test_bad_file_exits_2_with_a_located_message(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"inputs": {}, "nodes": [{"id": "a", "op": "add", "args": ["x", "w3"]}],
                               "outputs": ["a"]}))
    assert main(["export", str(bad), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: nodes[0].args[0]: unknown tensor 'x'" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_max_nodes_draws_a_big_egraph_whole(tmp_path, host_devices):
    attention = str(sample_graphs.path("attention.small"))
    args = ["export", attention, "--stage", "saturated", "--format", "dot", "--no-tune"]
    assert main([*args, "-o", str(tmp_path / "cut")]) == 0
    assert main([*args, "--max-nodes", "1000", "-o", str(tmp_path / "whole")]) == 0
    cut, whole = ((tmp_path / d / "saturated.dot").read_text() for d in ("cut", "whole"))
    assert "over the limit of 150 (--max-nodes)" in cut
    assert int(re.search(r"(\d+) of 305 e-nodes shown", cut).group(1)) <= 150
    assert "305 of 305 e-nodes shown" in whole and "cut:" not in whole

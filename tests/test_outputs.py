"""The explorer's output folder and file names: per program, never over an existing file."""

from __future__ import annotations

from pathlib import Path

from zyx_explorer.outputs import free_stem, program_dir


def test_program_dir_is_safe_for_a_file_name():
    assert program_dir(Path("out"), "mlp") == Path("out/zyx-explore-mlp")
    assert program_dir(Path("out"), "../a b/c") == Path("out/zyx-explore-a_b_c")
    assert program_dir(Path("out"), "..") == Path("out/zyx-explore-program")


def test_free_stem_skips_every_taken_name(tmp_path):
    assert free_stem(tmp_path, "plan", (".dot", ".svg")) == "plan"
    (tmp_path / "plan.svg").write_text("")
    assert free_stem(tmp_path, "plan", (".dot", ".svg")) == "plan-2"
    (tmp_path / "plan-2.dot").write_text("")
    assert free_stem(tmp_path, "plan", (".dot", ".svg")) == "plan-3"

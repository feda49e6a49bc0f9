"""export_stage / export_all: files written atomically, DOT kept without `dot`, the report's plan and verification."""

from __future__ import annotations

from engine.export import ExportOptions, export_all, export_stage
from engine.plan import Copy, Launch
from tests.export.helpers import compiled


def test_export_stage_writes_dot_and_the_rendering(tmp_path):
    c = compiled("mlp.small")
    paths = export_stage(c, "plan", tmp_path, "svg", ExportOptions())
    assert [p.name for p in paths] == ["plan.dot", "plan.svg"]
    assert paths[1].read_text().lstrip().startswith("<?xml")
    assert [p.name for p in export_stage(c, "saturated", tmp_path, "dot")] == ["saturated.dot"]
    assert (tmp_path / "egraph.png").exists() is False
    png = export_stage(c, "egraph", tmp_path, "png")[1]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not list(tmp_path.glob(".*.tmp"))  # no temporary file left behind
    assert paths[1].stat().st_mode & 0o777 == 0o644  # not the temporary file's owner-only mode


def test_without_dot_the_dot_file_is_still_written(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    c = compiled("mlp.small")
    result = export_all(c, ["program", "plan"], tmp_path / "out", "svg")
    assert sorted(p.name for p in result.paths) == ["plan.dot", "program.dot", "report.html", "report.md",
                                                    "timeline.svg"]  # drawn without Graphviz
    assert len(result.notes) == 1 and "`dot` not found" in result.notes[0] and "\n" not in result.notes[0]


def test_the_report_shows_the_timeline_of_the_run(tmp_path):
    c = compiled("attention.small")
    export_all(c, ["plan"], tmp_path, "dot")
    svg = (tmp_path / "timeline.svg").read_text()
    assert svg.count("<title>step ") == len([s for s in c.plan.steps if isinstance(s, Launch | Copy)])
    assert "(measured)" in svg and "measured step times of the run" in svg
    assert "![timeline](timeline.svg)" in (tmp_path / "report.md").read_text()
    assert "<figure id='timeline'>" in (tmp_path / "report.html").read_text()


def test_report_has_the_plan_costs_rewrites_and_verification(tmp_path):
    c = compiled("attention.small")
    result = export_all(c, None, tmp_path, "svg", source="attention.small.json")
    md = (tmp_path / "report.md").read_text()
    page = (tmp_path / "report.html").read_text()
    assert "| # | step | what | device / pool | bytes | predicted | measured |" in md
    plan_rows = [line for line in md.splitlines() if line.startswith("| ") and line.split(" | ")[1:2] in
                 (["allocate"], ["copy"], ["launch"], ["free"])]
    assert len(plan_rows) == len(c.plan.steps)
    for launch in (s for s in c.plan.steps if isinstance(s, Launch)):
        assert launch.kernel.name in md and launch.kernel.name in page  # the id, in the costs table
        assert any(row.split(" | ")[2] == launch.name for row in plan_rows)  # the readable name, in the plan
    assert "verification: ok" in md and "verification: ok" in page
    assert all(o.name in md for o in c.verification.outputs)
    assert "## Rewrites" in md and "stop: saturated" in md and "## Kernel cost per device" in md
    svgs = [p for p in result.paths if p.suffix == ".svg"]
    assert page.count("<svg") == len(svgs) >= 6 and "<?xml" not in page
    assert all(f"]({p.name})" in md for p in svgs)


def test_report_says_when_verification_did_not_run(tmp_path):
    from engine.devices import NumpyDevice
    from engine.pipeline import Options, compile_program

    c = compile_program(compiled("mlp.small").program, [NumpyDevice()], Options(execute=False))
    result = export_all(c, None, tmp_path, "dot")
    md = (tmp_path / "report.md").read_text()
    assert "verification: not run" in md and "## Plan" in md
    assert any("executed" in n and "not reached" in n for n in result.notes)


def test_a_report_of_a_plan_for_resident_inputs_says_so(tmp_path):
    from engine.devices import NumpyDevice
    from engine.pipeline import Options, compile_program

    said = "for inputs resident on the devices (their uploads priced at nothing)"
    for resident in (False, True):
        c = compile_program(compiled("mlp.small").program, [NumpyDevice()],
                            Options(tune=False, tune_cache=False, resident_inputs=resident))
        export_all(c, ["plan"], tmp_path / str(resident), "dot")
        assert (said in (tmp_path / str(resident) / "report.md").read_text()) is resident
        assert (said in (tmp_path / str(resident) / "plan.dot").read_text()) is resident

"""The README's quick start and option lists agree with the code and with CI (`.ci/run` follows the quick start)."""

from __future__ import annotations

import re
from pathlib import Path

from engine.export import stage_names

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _quick_start() -> list[str]:
    block = README.split("## Quick start", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    return [line.split("#")[0].strip() for line in block.splitlines()]


def test_quick_start_makes_a_venv_before_pip_and_ends_with_the_two_commands():
    lines = _quick_start()
    assert lines[0].startswith("sudo apt-get install -y ")
    assert lines.index("python3 -m venv .venv && . .venv/bin/activate") < lines.index("pip install -e '.[test]'")
    assert lines[-2:] == ["zyx-explore", "python -m pytest"]


def test_ci_installs_what_the_quick_start_installs():
    packages = set(_quick_start()[0].split()[4:])
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    apt = re.search(r"apt-get install -y -qq ([^>\n]+)", ci)
    assert apt is not None and packages == set(apt.group(1).split())
    assert "python3 -m venv .venv" in ci and "-e '.[test]'" in ci and "python -m pytest" in ci


def test_the_stage_list_is_every_stage():
    listed = re.search(r"`--stage (all\|[a-z|]+)`", README)
    assert listed is not None and listed.group(1).split("|") == ["all", *stage_names()]


def test_the_cache_variable_is_documented():
    assert "ZYX_EXPLORE_CACHE" in README

"""The explorer reads the engine through its public API only: the names ``engine/__init__.py`` exports
(``__all__``) and ``engine.errors``; a module of the engine imported from ``zyx_explorer`` fails here, directly
(``from engine.pipeline import ...``) or as a name (``from engine import pipeline``)."""

from __future__ import annotations

import ast
from pathlib import Path

import engine

ROOT = Path(__file__).resolve().parent.parent
PUBLIC = {"engine", "engine.errors"}

NOT_YET_CONVERTED = {
    "zyx_explorer/app.py",
    "zyx_explorer/screens/timeline.py",
    "zyx_explorer/widgets/class_detail.py",
    "zyx_explorer/widgets/results_view.py",
    "zyx_explorer/widgets/source_view.py",
    "zyx_explorer/widgets/tensor_detail.py",
    "zyx_explorer/widgets/timeline_view.py",
}
"""Files the UI refactor (issue 19, the thin App) still has to switch to ``from engine import ...`` (every name
they import is exported by ``engine`` already): empty this set as they are converted."""


def offences(path: Path) -> list[str]:
    """Every import in ``path`` of an engine module or name outside the public API, as ``line: what``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [f"{node.lineno}: import {a.name}" for a in node.names
                    if a.name.startswith("engine.") and a.name not in PUBLIC]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "engine":
                out += [f"{node.lineno}: from engine import {a.name}" for a in node.names if a.name not in engine.__all__]
            elif node.module.startswith("engine.") and node.module not in PUBLIC:
                out.append(f"{node.lineno}: from {node.module} import ...")
    return out


def test_the_explorer_imports_only_the_public_engine_api():
    found = [f"{path.relative_to(ROOT).as_posix()}:{line}" for path in sorted((ROOT / "zyx_explorer").rglob("*.py"))
             if path.relative_to(ROOT).as_posix() not in NOT_YET_CONVERTED for line in offences(path)]
    assert not found, "import these names from engine (add them to its __all__ if missing):\n" + "\n".join(found)


def test_the_allow_list_is_not_stale():
    """A converted file leaves the allow-list, so that it cannot slide back."""
    stale = [rel for rel in sorted(NOT_YET_CONVERTED) if not offences(ROOT / rel)]
    assert not stale, f"already converted, remove from NOT_YET_CONVERTED: {stale}"


def test_the_not_yet_converted_files_find_their_names_in_engine():
    """Every name the allow-listed files import from engine modules is exported by ``engine``, so that switching
    them is an edit of import lines only."""
    missing = []
    for rel in sorted(NOT_YET_CONVERTED):
        for node in ast.walk(ast.parse((ROOT / rel).read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("engine."):
                missing += [f"{rel}: {node.module}.{a.name}" for a in node.names if not hasattr(engine, a.name)]
    assert not missing, "export these from engine/__init__.py:\n" + "\n".join(missing)

"""The explorer reads the engine through its public API only: the names ``engine/__init__.py`` exports
(``__all__``) and ``engine.errors``; a module of the engine imported from ``zyx_explorer`` fails here, directly
(``from engine.pipeline import ...``) or as a name (``from engine import pipeline``)."""

from __future__ import annotations

import ast
from pathlib import Path

import engine

ROOT = Path(__file__).resolve().parent.parent
PUBLIC = {"engine", "engine.errors"}

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
             for line in offences(path)]
    assert not found, "import these names from engine (add them to its __all__ if missing):\n" + "\n".join(found)


def test_an_engine_module_import_is_an_offence(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from engine.pipeline import Options\nfrom engine import pipeline, Stage\nimport engine.plan\n")
    assert [o.split(": ")[1] for o in offences(bad)] == [
        "from engine.pipeline import ...", "from engine import pipeline", "import engine.plan"]

"""The engine's layering: no import cycle between its subpackages, nor between the modules of one.

The graphs are read from the source with ``ast``, so an import inside a function counts as much as one at
the top of a module: a deferred import hides a cycle from Python's loader, not from a reader (each side of
it still has to be understood with the other).  Between subpackages, ``if TYPE_CHECKING:`` imports count
too, for the same reason.  Between the modules of one subpackage they do not: modules whose types name each
other (``kernel.decisions`` annotates with ``kernel.kernelize``'s and ``kernel.attach``'s types, and they
import it) is how Python spells mutually referring types, and such an import never runs.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def module_names(root: Path = ROOT) -> dict[str, Path]:
    """Every module of ``engine`` by dotted name (a package by its ``__init__``)."""
    out = {}
    for path in sorted((root / "engine").rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports(path: Path, name: str, modules: dict[str, Path], typing: bool = True) -> set[str]:
    """The ``engine`` modules that module ``name`` (at ``path``) imports, anywhere in its body (those under
    ``if TYPE_CHECKING:`` only when ``typing``)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(), str(path))
    typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If) and _type_checking(block.test)
                   for stmt in block.body for n in ast.walk(stmt)}
    out: set[str] = set()
    for node in ast.walk(tree):
        if not typing and id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            # ``from engine.kernel import opencl`` imports the module engine.kernel.opencl
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:  # ``import engine.kernel.ir as x`` -> its module
                target = target.rpartition(".")[0]
            if target:
                out.add(target)
    out.discard(name)
    return out


def _type_checking(test: ast.expr) -> bool:
    """Whether an ``if`` tests ``TYPE_CHECKING`` (or ``typing.TYPE_CHECKING``)."""
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def layer(module: str) -> str:
    """The node of ``module`` in the subpackage graph: its subpackage (``engine.kernel``, ``engine.devices``, ...)
    or, for a top-level module (``engine.pipeline``) and ``engine`` itself, the module."""
    return ".".join(module.split(".")[:2])


def graphs(root: Path = ROOT) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(module -> the engine modules it imports at run time, layer -> the layers it imports, typing included)."""
    modules = module_names(root)
    by_module = {name: imports(path, name, modules, typing=False) for name, path in modules.items()}
    by_layer: dict[str, set[str]] = {}
    for name, path in modules.items():
        by_layer.setdefault(layer(name), set()).update(layer(t) for t in imports(path, name, modules))
    for node, targets in by_layer.items():
        targets.discard(node)
    return by_module, by_layer


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The cycles (closed paths) of each strongly connected component of more than one node (Tarjan): a shortest
    one through each of its nodes, each cycle once."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.extend(cycles_through(graph, set(component)))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def cycles_through(graph: dict[str, set[str]], component: set[str]) -> list[list[str]]:
    """A shortest cycle through each node of ``component``, closed (``[a, b, ..., a]``), starting at its
    smallest node; a cycle found through several of its nodes is listed once."""
    out: list[list[str]] = []
    for start in sorted(component):
        paths = {start: [start]}
        frontier = [start]
        cycle = None
        while frontier and cycle is None:
            nxt = []
            for v in frontier:
                for w in sorted(graph.get(v, set()) & component):
                    if w == start and cycle is None:
                        cycle = paths[v]
                    elif w not in paths:
                        paths[w] = [*paths[v], w]
                        nxt.append(w)
            frontier = nxt
        assert cycle is not None, f"{start} is on no cycle of {component}"
        first = cycle.index(min(cycle))
        cycle = cycle[first:] + cycle[:first]
        if [*cycle, cycle[0]] not in out:
            out.append([*cycle, cycle[0]])
    return out


def describe(found: list[list[str]]) -> str:
    return "\n".join(" -> ".join(c) for c in found)


def test_no_cycle_between_engine_subpackages():
    _, by_layer = graphs()
    found = cycles(by_layer)
    assert not found, f"import cycles between engine subpackages:\n{describe(found)}"


def test_no_cycle_between_engine_modules():
    by_module, _ = graphs()
    found = cycles(by_module)
    assert not found, f"import cycles between engine modules:\n{describe(found)}"


def test_a_cycle_is_found(tmp_path):
    """The check itself: a deliberate cycle (a function-level import closing it) is reported with its path."""
    for name, text in {
        "engine/__init__.py": "",
        "engine/kernel/__init__.py": "",
        "engine/kernel/a.py": "from engine.devices.b import x\n",
        "engine/devices/__init__.py": "",
        "engine/devices/b.py": "def x():\n    from engine.kernel import a\n",
        "engine/kernel/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from engine.kernel import d\n",
        "engine/kernel/d.py": "from engine.kernel.c import x\n",
        "engine/units.py": "import engine.kernel.a as k\n",
    }.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    by_module, by_layer = graphs(tmp_path)
    assert by_module["engine.units"] == {"engine.kernel.a"}
    assert cycles(by_layer) == [["engine.devices", "engine.kernel", "engine.devices"]]
    assert cycles(by_module) == [["engine.devices.b", "engine.kernel.a", "engine.devices.b"]]
    c = tmp_path / "engine/kernel/c.py"
    assert by_module["engine.kernel.c"] == set()  # a typing-only import between modules of one subpackage
    assert imports(c, "engine.kernel.c", module_names(tmp_path)) == {"engine.kernel.d"}  # counts between layers

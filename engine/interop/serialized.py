"""egraph-serialize JSON, the interchange format of egg, egglog and extraction-gym: reading and validating it.

    {"nodes": {node_id: {"op": str, "children": [node_id, ...], "eclass": class_id,
                         "cost": float = 1.0, "subsumed": bool = false}},
     "root_eclasses": [class_id, ...], "class_data": {class_id: {"type": str, ...}}}

Only ``nodes`` is required; unknown top-level keys are ignored (as its other readers do).
A child names a node and stands for that node's class.  Roots are ``root_eclasses``; when
that is empty (egglog leaves it so), the classes egglog names by a user's ``let`` in ``class_data``,
else the classes no node reads.  Every mistake is a ``GraphError`` at its JSON path.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import FormatError, GraphError
from engine.fileio import UnsafeFileError, read_bounded
from engine.program.loader import reject_unencodable

MAX_NODES = 2_000_000
"""More e-nodes than this are refused (their problem would not fit in memory)."""
MAX_BYTES = 1 << 30
"""A bigger file is refused before it is read."""
MAX_COST = 1e100
"""The largest node cost: sums over MAX_NODES nodes of such costs stay finite."""
_NODE_KEYS = {"op", "children", "eclass", "cost", "subsumed"}


@dataclass(frozen=True)
class ForeignNode:
    """One e-node of an imported e-graph."""

    id: str
    op: str
    children: tuple[str, ...]
    """Node ids, each standing for its node's class."""
    eclass: str
    cost: float
    subsumed: bool = False


@dataclass(frozen=True)
class ForeignEGraph:
    """An e-graph read from egraph-serialize JSON: nodes, their classes, class data and roots."""

    nodes: Mapping[str, ForeignNode]
    classes: Mapping[str, tuple[str, ...]]
    """Class id -> its node ids, in file order."""
    class_data: Mapping[str, Mapping[str, Any]]
    roots: tuple[str, ...]
    roots_from: str
    """Where the roots came from: ``root_eclasses``, ``let`` (egglog's names) or ``unused`` (classes no node reads)."""
    source: str = ""

    def child_classes(self, node: ForeignNode) -> tuple[str, ...]:
        return tuple(self.nodes[c].eclass for c in node.children)

    def type_of(self, cls: str) -> str:
        return str(self.class_data.get(cls, {}).get("type", ""))

    def root_name(self, cls: str) -> str:
        """The class and, for an egglog ``let``, its names (e.g. ``Num-4 ($expr1, $expr2)``)."""
        let = self.class_data.get(cls, {}).get("let")
        return f"{cls} ({let})" if let else cls


def is_serialized(doc: Any) -> bool:
    """Whether a decoded JSON document looks like egraph-serialize (a ``nodes`` object, no graph.json ``inputs``)."""
    return isinstance(doc, dict) and isinstance(doc.get("nodes"), dict) and "inputs" not in doc


def detect(path: str | Path) -> str | None:
    """``egraph-serialize`` or ``graph.json`` by the file's content; None when it is neither or unreadable
    (its loader then says why)."""
    try:
        doc = json.loads(read_bounded(Path(path), MAX_BYTES).decode("utf-8"))
    except (OSError, ValueError, RecursionError):  # a FIFO or a device is not read (it could block)
        return None
    if is_serialized(doc):
        return "egraph-serialize"
    return "graph.json" if isinstance(doc, dict) and "inputs" in doc else None


def load_serialized(path: str | Path) -> ForeignEGraph:
    """Read an egraph-serialize file; GraphError naming the file and the place in it."""
    path = Path(path)
    try:
        text = read_bounded(path, MAX_BYTES).decode("utf-8")
    except UnicodeDecodeError as e:
        raise FormatError(f"not UTF-8 text (byte {e.start})", source=str(path)) from None
    except UnsafeFileError as e:
        raise GraphError(f"not read: {e}", source=str(path)) from None
    except OSError as e:
        raise GraphError(f"cannot read: {e.strerror}", source=str(path)) from None
    return loads_serialized(text, str(path))


def loads_serialized(text: str, source: str = "") -> ForeignEGraph:
    """Parse egraph-serialize text (see the module docstring)."""
    try:
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as e:
            raise FormatError(f"invalid JSON: {e.msg}", f"line {e.lineno} column {e.colno}") from None
        except ValueError as e:  # an integer longer than Python's digit limit
            raise FormatError(f"invalid JSON: {e}") from None
        reject_unencodable(doc, text)
        return parse_serialized(doc, source)
    except GraphError as e:
        raise e.within("", source) from None
    except RecursionError:
        raise FormatError("nested too deeply", source=source) from None


def _fail(what: str, value: Any, location: str) -> FormatError:
    return FormatError(f"expected {what}, got {json.dumps(value, default=str)[:60]}", location)


def _id(value: Any, what: str, location: str) -> str:
    """A node or class id: a string (an integer is accepted and read as its decimal text)."""
    if isinstance(value, str) and value:
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise _fail(f"a {what} id (a non-empty string)", value, location)


def parse_serialized(doc: Any, source: str = "") -> ForeignEGraph:
    """Validate a decoded egraph-serialize document."""
    if not isinstance(doc, dict):
        raise _fail("a JSON object with a 'nodes' object", doc, "")
    if "nodes" not in doc:
        raise FormatError("missing the 'nodes' key (an egraph-serialize file needs it)", "")
    raw_nodes = doc["nodes"]
    if not isinstance(raw_nodes, dict):
        raise _fail("an object of node id -> node", raw_nodes, "nodes")
    if len(raw_nodes) > MAX_NODES:
        raise FormatError(f"{len(raw_nodes):,} nodes: more than this reader's limit of {MAX_NODES:,}", "nodes")
    nodes: dict[str, ForeignNode] = {}
    classes: dict[str, list[str]] = {}
    for nid, raw in raw_nodes.items():
        node = _parse_node(nid, raw, f"nodes.{nid}")
        nodes[nid] = node
        classes.setdefault(node.eclass, []).append(nid)
    for node in nodes.values():
        for j, child in enumerate(node.children):
            if child not in nodes:
                raise FormatError(f"unknown node {child!r} (a child names a node of the file)",
                                  f"nodes.{node.id}.children[{j}]")
    class_data = _parse_class_data(doc.get("class_data", {}), classes)
    roots = doc.get("root_eclasses", [])
    if not isinstance(roots, list):
        raise _fail("a list of class ids", roots, "root_eclasses")
    root_ids = [_id(r, "class", f"root_eclasses[{k}]") for k, r in enumerate(roots)]
    for k, r in enumerate(root_ids):
        if r not in classes:
            raise FormatError(f"unknown class {r!r} (no node has it as its eclass)", f"root_eclasses[{k}]")
    how = "root_eclasses"
    if not root_ids:
        root_ids, how = [c for c in classes if _user_let(class_data.get(c, {}))], "let"
    if not root_ids:
        read = {nodes[ch].eclass for n in nodes.values() for ch in n.children}
        root_ids, how = [c for c in classes if c not in read], "unused"
    if not root_ids:
        raise FormatError("no root class: root_eclasses is empty, no class has a 'let' name, and every class is "
                          "read by a node (a cycle)" if nodes else "no nodes: there is nothing to extract",
                          "root_eclasses" if nodes else "nodes")
    return ForeignEGraph(nodes, {c: tuple(ns) for c, ns in classes.items()}, class_data,
                         tuple(dict.fromkeys(root_ids)), how, source)


def _user_let(data: Mapping[str, Any]) -> bool:
    """Whether egglog's ``let`` names a binding of the user's (``$e``), not one of its own (``$__expr_0``)."""
    let = data.get("let")
    return isinstance(let, str) and any(not n.strip().startswith("$__") for n in let.split(","))


def _parse_node(nid: str, raw: Any, loc: str) -> ForeignNode:
    if not nid:
        raise FormatError("a node id must not be empty", loc)
    if not isinstance(raw, dict):
        raise _fail("a node object with op, children and eclass", raw, loc)
    for key in ("op", "eclass"):
        if key not in raw:
            raise FormatError(f"missing the {key!r} key", loc)
    op = raw["op"]
    if not isinstance(op, str):
        raise _fail("an op name (a string)", op, f"{loc}.op")
    eclass = _id(raw["eclass"], "class", f"{loc}.eclass")
    children = raw.get("children", [])
    if not isinstance(children, list):
        raise _fail("a list of node ids", children, f"{loc}.children")
    kids = tuple(_id(ch, "node", f"{loc}.children[{j}]") for j, ch in enumerate(children))
    cost = raw.get("cost", 1.0)
    if isinstance(cost, bool) or not isinstance(cost, int | float) or not 0 <= cost <= MAX_COST:  # NaN fails too
        shown = f"an integer of {cost.bit_length()} bits" if isinstance(cost, int) and cost > MAX_COST else cost
        raise _fail(f"a finite cost >= 0 and <= {MAX_COST:g}", shown, f"{loc}.cost")
    subsumed = raw.get("subsumed", False)
    if not isinstance(subsumed, bool):
        raise _fail("true or false", subsumed, f"{loc}.subsumed")
    return ForeignNode(nid, op, kids, eclass, float(cost), subsumed)


def _parse_class_data(raw: Any, classes: Mapping[str, list[str]]) -> dict[str, dict[str, Any]]:
    if not isinstance(raw, dict):
        raise _fail("an object of class id -> data", raw, "class_data")
    out = {}
    for cls, data in raw.items():
        if not isinstance(data, dict):
            raise _fail("an object (such as {\"type\": ...})", data, f"class_data.{cls}")
        if cls not in classes:
            raise FormatError(f"unknown class {cls!r} (no node has it as its eclass)", f"class_data.{cls}")
        out[cls] = data
    return out

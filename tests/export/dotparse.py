"""A small reader of the DOT the ``graphviz`` package writes (one statement per line), for structural asserts."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_ATTR = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|[^\s\]]+)')
_NODE = re.compile(r"^\s*(\w+) \[(.*)\]$")
_EDGE = re.compile(r"^\s*(\w+) -> (\w+)(?: \[(.*)\])?$")
_SUB = re.compile(r"^\s*subgraph (\w+) \{$")


def attrs(text: str | None) -> dict[str, str]:
    return {k: v[1:-1] if v.startswith('"') else v for k, v in _ATTR.findall(text or "")}


@dataclass
class Dot:
    graph: dict[str, str] = field(default_factory=dict)
    nodes: dict[str, dict[str, str]] = field(default_factory=dict)
    edges: list[tuple[str, str, dict[str, str]]] = field(default_factory=list)
    clusters: dict[str, set[str]] = field(default_factory=dict)
    """Cluster name -> the nodes declared directly inside it."""
    order: list[str] = field(default_factory=list)
    """Node and edge ``id`` attributes in the order they appear."""

    def node_cluster(self, node: str) -> str | None:
        return next((c for c, ns in self.clusters.items() if node in ns), None)


def parse(source: str) -> Dot:
    dot = Dot()
    stack: list[str] = []
    for line in source.splitlines()[1:]:
        if m := _SUB.match(line):
            stack.append(m.group(1))
            if m.group(1).startswith("cluster"):
                dot.clusters[m.group(1)] = set()
        elif line.strip() == "}":
            if stack:
                stack.pop()
        elif m := _EDGE.match(line):
            a = attrs(m.group(3))
            dot.edges.append((m.group(1), m.group(2), a))
            if "id" in a:
                dot.order.append(a["id"])
        elif m := _NODE.match(line):
            name, a = m.group(1), attrs(m.group(2))
            if name in ("graph", "node", "edge"):
                continue
            dot.nodes[name] = a
            if "id" in a:
                dot.order.append(a["id"])
            if stack and stack[-1].startswith("cluster"):
                dot.clusters[stack[-1]].add(name)
        elif not stack and "=" in line and line.startswith("\t") and "[" not in line:
            dot.graph.update(attrs(line))
    return dot

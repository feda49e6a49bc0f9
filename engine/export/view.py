"""What an export shows (options and default limits), and the formatting every stage's graph shares."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import graphviz

MAX_NODES = 150
"""Above this many drawn nodes a graph is collapsed, then cut to the chosen plan (and says so): a saturated
e-graph lays its classes out side by side, so that its picture grows wider than a screen can show long before
``dot`` gets slow (sizes in benchmarks/RESULTS.md); ``--max-nodes`` raises it."""
FAST_LAYOUT_NODES = 150
"""Above this many drawn nodes the DOT carries Graphviz's speed limits (``FAST_LAYOUT``)."""
FAST_LAYOUT = {"mclimit": "0.1", "nslimit": "1", "nslimit1": "1"}
"""Crossing-minimisation and network-simplex limits: a big graph lays out several times faster (RESULTS.md)."""

DEVICE_FILLS = ("#dbe7f3", "#fde3cc", "#d9ecd5", "#f8d6d7", "#ecdff0", "#fff2b3")
DEVICE_LINES = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1", "#b8860b")
HOST_FILL, HOST_LINE = "#eeeeee", "#777777"
CHOSEN_FILL, CHOSEN_LINE = "#ffd966", "#b45f06"
LIBRARY_FILL, LIBRARY_LINE = "#e6d7f5", "#7030a0"
LIBRARY_DEVICES = ("blas",)
"""Devices whose kernels are library calls (styled apart from generated kernels)."""


@dataclass(frozen=True)
class ExportOptions:
    """What to draw. ``neighbourhood``: only classes within ``depth`` edges of that class id;
    ``plan_only``: only what the chosen plan uses; ``collapse``: a class with one form is one node;
    ``max_nodes``: above it, collapse and then plan-only are switched on (with a note)."""

    neighbourhood: int | None = None
    depth: int = 2
    plan_only: bool = False
    collapse: bool = False
    max_nodes: int = MAX_NODES


DEFAULT_OPTIONS = ExportOptions()


def graph(name: str, title: str, notes: Sequence[str], **attrs: str) -> graphviz.Digraph:
    """A digraph labelled with ``title`` and the notes on what was cut and why."""
    g = graphviz.Digraph(name)
    label = "\\l".join([title, *notes]) + "\\l"
    g.attr(label=label, labelloc="t", labeljust="l", fontname="Helvetica", fontsize="12", **attrs)
    g.attr("node", fontname="Helvetica", fontsize="10")
    g.attr("edge", fontname="Helvetica", fontsize="9")
    return g


def limit_layout(g: graphviz.Digraph, drawn: int) -> None:
    """Add Graphviz's speed limits to big graphs."""
    if drawn > FAST_LAYOUT_NODES:
        g.attr(**FAST_LAYOUT)


def palette(devices: Sequence[tuple[str, str]]) -> tuple[dict[str, tuple[str, str]], dict[str, tuple[str, str]]]:
    """(fill, line) colours per device name and per memory pool, from (name, pool) pairs: each device its own
    colour, a device pool that of its first device, the host pool grey."""
    by_device = {d: (DEVICE_FILLS[i % len(DEVICE_FILLS)], DEVICE_LINES[i % len(DEVICE_LINES)])
                 for i, (d, _) in enumerate(devices)}
    by_pool = {"host": (HOST_FILL, HOST_LINE)}
    for d, pool in devices:
        by_pool.setdefault(pool, by_device[d])
    return by_device, by_pool

"""The explorer of a foreign e-graph (egraph-serialize JSON from egg, egglog, extraction-gym...).

Three panes: the classes (type, forms, what each extractor chose), the node forms of the
class under the cursor with their costs, and the three extractors' results side by side
(DAG cost, tree cost, wall time, status).  The extractions run in a child process (watched by a
thread worker), each result shown as it comes; quitting kills the process, since HiGHS cannot be
interrupted.  The tables are virtualised (``LineTable``), so big e-graphs stay responsive.
"""

from __future__ import annotations

import math
import os
import pickle
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO, ClassVar

from rich.text import Text
from textual import on, work
from textual.actions import SkipAction
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import Footer, Header, Input, Static

from engine import EXTRACTORS, ForeignEGraph, ForeignResult, extract_each
from zyx_explorer.rows import Row
from zyx_explorer.widgets.line_table import Column, LineTable

MARKS = {"greedy": "G", "dag": "D", "ilp": "I"}
"""How the tables mark what each extractor chose."""


def cost_text(x: float) -> str:
    return "-" if math.isnan(x) else f"{x:.6g}"


def result_rows(results: Sequence[ForeignResult]) -> list[Row]:
    """One row per extractor: DAG cost (the best bold), tree cost, seconds, status and note."""
    finite = [r.dag_cost for r in results if not math.isnan(r.dag_cost)]
    best = min(finite, default=math.nan)
    return [Row(r.method, (r.method, cost_text(r.dag_cost), cost_text(r.tree_cost), f"{r.seconds:.4f}",
                           r.status, r.error or r.note),
                "bold green" if r.dag_cost == best else "") for r in results]


def extract_into(inp: BinaryIO, out: BinaryIO) -> None:
    """The child process: read ``(egraph, time limit)`` pickled; write each extractor's result as it comes."""
    egraph, time_limit = pickle.load(inp)
    for result in extract_each(egraph, EXTRACTORS, time_limit):
        pickle.dump(result, out)
        out.flush()


class Extracted(Message):
    def __init__(self, results: list[ForeignResult], done: bool, error: str = "") -> None:
        super().__init__()
        self.results = results
        self.done = done
        self.error = error
        """Why the extraction process ended early (its last line on stderr)."""


class ForeignApp(App):
    """Classes | forms of the current class, and the extractors' results below."""

    TITLE = "zyx-explore"
    AUTO_FOCUS = "#foreign-classes"
    CSS = """
    #foreign-main { height: 1fr; }
    #foreign-classes { width: 5fr; }
    #foreign-right { width: 4fr; }
    #foreign-forms-title, #foreign-results-title { background: $panel; text-style: bold; }
    #foreign-results { height: 5; }
    #foreign-filter { display: none; dock: bottom; }
    """
    BINDINGS: ClassVar = [
        Binding("q", "quit", "Quit", id="quit"),
        Binding("tab", "focus_next", "Pane", id="pane"),
        Binding("slash", "filter", "Filter", id="filter"),
        Binding("s", "sort", "Sort", id="sort"),
        Binding("backspace", "back", "Back", id="back"),
        Binding("escape", "close_filter", "Close filter", show=False, id="close-filter"),
        Binding("enter", "keep_filter", "Keep filter", show=False, priority=True, id="keep-filter"),
    ]

    def __init__(self, egraph: ForeignEGraph, source: Path, ilp_time_limit: float = 10.0) -> None:
        super().__init__()
        self.egraph = egraph
        self.source = source
        self.ilp_time_limit = ilp_time_limit
        self.results: list[ForeignResult] = []
        self.history: list[str] = []
        self.running = True
        self.child: subprocess.Popen | None = None
        self.parents: dict[str, int] = {}
        for n in egraph.nodes.values():
            for c in set(egraph.child_classes(n)):
                self.parents[c] = self.parents.get(c, 0) + 1

    def compose(self) -> ComposeResult:
        yield Header()
        with Horizontal(id="foreign-main"):
            yield LineTable([Column("class", 30), Column("type", 16), Column("forms", 5, right=True),
                             Column("readers", 7, right=True), Column("chosen", 6)], id="foreign-classes")
            with Vertical(id="foreign-right"):
                yield Static("forms", id="foreign-forms-title")
                yield LineTable([Column("node", 22), Column("op", 18), Column("cost", 10, right=True),
                                 Column("chosen", 6), Column("children", 40)], id="foreign-forms")
        yield Static("extractors: running greedy, dag and ilp...", id="foreign-results-title")
        yield LineTable([Column("extractor", 9), Column("DAG cost", 12, right=True), Column("tree cost", 12, right=True),
                         Column("seconds", 9, right=True), Column("status", 9), Column("note", 60)],
                        id="foreign-results")
        yield Input(placeholder="filter classes: Num  i64  ~fuzzy   (enter: keep, escape: clear)", id="foreign-filter")
        yield Footer()

    def on_mount(self) -> None:
        fg = self.egraph
        roots = ", ".join(fg.root_name(r) for r in fg.roots[:3]) + (" ..." if len(fg.roots) > 3 else "")
        self.sub_title = (f"{self.source.name}: {len(fg.nodes):,} nodes, {len(fg.classes):,} classes; "
                          f"roots ({fg.roots_from}): {roots or 'none'}")
        self._show_classes()
        self.extract()

    # -- extraction ------------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="extract", exit_on_error=False)
    def extract(self) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
        self.child = child = subprocess.Popen([sys.executable, "-m", "zyx_explorer.foreign"], stdin=subprocess.PIPE,
                                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        assert child.stdin and child.stdout and child.stderr
        try:
            with child.stdin:
                pickle.dump((self.egraph, self.ilp_time_limit), child.stdin)
        except OSError:  # it died at once: its stderr says why, below
            pass
        results: list[ForeignResult] = []
        while len(results) < len(EXTRACTORS):
            try:
                results.append(pickle.load(child.stdout))
            except (EOFError, OSError, pickle.UnpicklingError):  # killed on quitting, or died
                break
            self.post_message(Extracted(list(results), False))
        why = "" if len(results) == len(EXTRACTORS) else child.stderr.read().decode(errors="replace").strip()
        child.wait()
        child.stdout.close()
        child.stderr.close()
        self.post_message(Extracted(results, True, why.splitlines()[-1] if why else ""))

    @on(Extracted)
    def _extracted(self, message: Extracted) -> None:
        self.results = message.results
        self.running = not message.done
        missing = [m for m in EXTRACTORS if m not in {r.method for r in self.results}]
        self.query_one("#foreign-results-title", Static).update(
            (f"running {', '.join(missing)}...  " if self.running else "") +
            (f"{', '.join(missing)} did not finish ({message.error or 'stopped'}); "
             if missing and not self.running else "") +
            f"extractors on {len(self.egraph.roots)} root(s): DAG cost counts each chosen class once, "
            "tree cost once per use (a root listed twice counts once)")
        self.query_one("#foreign-results", LineTable).set_rows(result_rows(self.results))
        self._show_classes()

    @property
    def extracted(self) -> bool:
        return not self.running

    # -- tables ----------------------------------------------------------------------------

    def _marks(self, cls: str, node: str | None = None) -> str:
        return "".join(MARKS[r.method] for r in self.results
                       if cls in r.chosen and (node is None or r.chosen[cls] == node))

    def _show_classes(self) -> None:
        fg = self.egraph
        roots = set(fg.roots)
        rows = [Row(c, (c, fg.type_of(c), str(len(ns)), str(self.parents.get(c, 0)), self._marks(c)),
                    "bold" if c in roots else "",
                    sort=(c, fg.type_of(c), -len(ns), -self.parents.get(c, 0), self._marks(c)))
                for c, ns in fg.classes.items()]
        self.query_one("#foreign-classes", LineTable).set_rows(rows)
        self._show_forms()

    def _show_forms(self) -> None:
        table = self.query_one("#foreign-classes", LineTable)
        cls = table.current_key
        forms = self.query_one("#foreign-forms", LineTable)
        if cls is None:
            forms.set_rows([])
            return
        fg = self.egraph
        rows = []
        for nid in fg.classes[str(cls)]:
            n = fg.nodes[nid]
            kids = ", ".join(fg.child_classes(n))
            rows.append(Row(nid, (nid, n.op, f"{n.cost:g}", self._marks(str(cls), nid), kids),
                            "dim" if n.subsumed else ""))
        forms.set_rows(rows)
        title = f"forms of {fg.root_name(str(cls))}" + (f": {fg.type_of(str(cls))}" if fg.type_of(str(cls)) else "")
        subsumed = sum(fg.nodes[n].subsumed for n in fg.classes[str(cls)])
        self.query_one("#foreign-forms-title", Static).update(Text(
            title + (f" ({subsumed} subsumed, never extracted)" if subsumed else "") + "; enter: go to a child class"))

    @on(LineTable.Highlighted, "#foreign-classes")
    def _class_highlighted(self) -> None:
        self._show_forms()

    @on(LineTable.Selected, "#foreign-forms")
    def _form_selected(self, message: LineTable.Selected) -> None:
        node = self.egraph.nodes[str(message.key)]
        if node.children:
            self.go_to(self.egraph.nodes[node.children[0]].eclass)

    def go_to(self, cls: str) -> None:
        """Put the classes cursor on ``cls`` (clearing the filter if it hides it), remembering where it was."""
        table = self.query_one("#foreign-classes", LineTable)
        here = table.current_key
        if not table.move_to(cls):
            table.set_filter("")
            table.move_to(cls)
        if here is not None and here != cls:
            self.history.append(str(here))
        table.focus()

    # -- actions ---------------------------------------------------------------------------

    def on_unmount(self) -> None:
        """Quit now: an extraction still running is killed, not waited for (its watcher would hold the exit)."""
        if self.child is not None and self.child.poll() is None:
            self.child.kill()

    def action_back(self) -> None:
        if self.history:
            self.query_one("#foreign-classes", LineTable).move_to(self.history.pop())

    def action_sort(self) -> None:
        table = self.query_one("#foreign-classes", LineTable)
        order = [None, 1, 2, 3, 4]
        table.sort_by(order[(order.index(table.sort_column) + 1) % len(order)])

    def action_filter(self) -> None:
        box = self.query_one("#foreign-filter", Input)
        box.value = self.query_one("#foreign-classes", LineTable).query_text
        box.display = True
        self.set_focus(box)  # at once: Widget.focus defers, and keys typed meanwhile would go to the table

    def action_close_filter(self) -> None:
        box = self.query_one("#foreign-filter", Input)
        if box.has_focus:
            box.value = ""
            self._hide_filter()

    def action_keep_filter(self) -> None:
        """Enter in the box (a priority key, like the main screen's: the next key must not reach the hidden box)."""
        if not self.query_one("#foreign-filter", Input).has_focus:
            raise SkipAction()
        self._hide_filter()

    def _hide_filter(self) -> None:
        self.query_one("#foreign-filter", Input).display = False
        self.set_focus(self.query_one("#foreign-classes", LineTable))  # at once, like the main screen's filter

    @on(Input.Changed, "#foreign-filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.query_one("#foreign-classes", LineTable).set_filter(event.value)


if __name__ == "__main__":  # the extraction process (ForeignApp.extract)
    extract_into(sys.stdin.buffer, sys.stdout.buffer)

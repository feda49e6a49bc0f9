"""The class detail: every form of the selected class, why one is chosen, links to children, explanations."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Static

from engine import (
    ClassId,
    EGraph,
    Extraction,
    Kernelization,
    KernelNode,
    NodeId,
    Stage,
    Term,
    Why,
    explain,
    format_explanation,
)
from zyx_explorer.messages import ShowClass, ShowKernel
from zyx_explorer.model import plural, seconds_text, shape_text, term_text
from zyx_explorer.view import View
from zyx_explorer.widgets.text_list import TextList

HEAD_LINES = 5
"""The head's least height: the class line and a why line of up to four lines."""


class ClassDetail(Vertical):
    """Header (shape, chosen form and why), a line per form and per child class, and an explanation.

    The forms' keys are ``("form", node)`` and ``("child", class)``."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.egraph: EGraph | None = None
        self.cid: ClassId | None = None
        self.marked: NodeId | None = None
        self.chosen: set[NodeId] = set()
        self.explanation = ""
        self._head = (0, HEAD_LINES)
        """(width, height) of the head: see ``_show_head``."""
        self._measured: Callable[[KernelNode], bool] = lambda kn: False
        self._kz: Kernelization | None = None
        self._short: Mapping[str, str] = {}
        self._kernel_lines: Callable[[str], list[str]] = lambda cand_id: []
        self._explain_lines = -1
        """Lines the explanation took when last shown (see ``_show_explanation``)."""
        self.view: View | None = None

    def compose(self) -> ComposeResult:
        yield Static(id="detail-head")
        yield TextList(id="forms")
        yield Static(id="explain")

    @property
    def forms(self) -> TextList:
        return self.query_one("#forms", TextList)

    def highlighted_form(self) -> NodeId | None:
        key = self.forms.current_key
        return key[1] if isinstance(key, tuple) and key[0] == "form" else None

    def _show_head(self, head: Text) -> None:
        """The head grows to fit its text at this width (the why line is never cut) and does not shrink back, so
        that moving the classes cursor lays nothing out again (a relayout repaints the whole screen)."""
        static = self.query_one("#detail-head", Static)
        width = static.content_size.width
        if width:
            lines = len(head.wrap(self.app.console, width))
            if width != self._head[0] or lines > self._head[1]:
                self._head = (width, max(HEAD_LINES, lines))
                static.styles.height = self._head[1]
        static.update(head, layout=False)

    def _show_explanation(self, text: Text) -> None:
        """Show ``text`` below the forms, laying the screen out again only when its height changes (a relayout
        repaints every widget: it is what makes a key on a big e-graph slow)."""
        static = self.query_one("#explain", Static)
        width = static.content_region.width
        lines = len(text.wrap(self.app.console, width)) if width and text.plain else 0
        static.update(text, layout=lines != self._explain_lines)
        self._explain_lines = lines

    def clear(self, message: str) -> None:
        self.egraph, self.cid = None, None
        self.query_one("#detail-head", Static).update(Text(message, "dim"), layout=False)
        self.forms.set_items([])
        self._show_explanation(Text(""))

    def show(self, view: View, cid: ClassId | None) -> None:
        """Class ``cid`` of the view's e-graph: its forms, why one is chosen (in the extractor's objective, each
        kernel's time measured or predicted), its kernels as of the view's stage."""
        self.view = view
        s, stage, eg = view.session, view.stage, view.egraph()
        if eg is None or cid is None or cid >= eg.num_added:
            self.clear("no e-graph at this stage yet" if eg is None else "no class selected")
            return
        c, current = s.compilation, s.current()
        kz = c.kernelization if c is not None and view.reached(Stage.KERNELIZED) else None
        self._show_class(eg, cid, s.extraction(stage), s.prices(stage), kz, s.pins, s.why(stage, cid),
                         current.measured if current is not None else lambda kn: False, s.short(),
                         lambda cand_id: s.kernel_lines(stage, cand_id))

    def _show_class(self, eg: EGraph, cid: ClassId, extraction: Extraction | None,
                    prices: Mapping[KernelNode, float], kz: Kernelization | None, pins: Mapping[ClassId, object],
                    why: Why | None, measured: Callable[[KernelNode], bool], short: Mapping[str, str],
                    kernel_lines: Callable[[str], list[str]]) -> None:
        same = self.egraph is eg and self.cid == eg.find(cid)
        keep = self.forms.cursor if same else 0
        cid = eg.find(cid)
        self.egraph, self.cid = eg, cid
        if not same:
            self.marked, self.explanation = None, ""
        cls = eg.eclass(cid)
        choices = {pool: ch for (c, pool), ch in extraction.choices.items() if c == cid} if extraction else {}
        self.chosen = {ch.node for ch in choices.values()}
        roots: dict[NodeId, list[str]] = {}
        if kz is not None:
            for cand_id in kz.by_class.get(cid, []):
                roots.setdefault(kz.candidates[cand_id].root, []).append(kz.name(cand_id))
        self._measured, self._kz, self._short, self._kernel_lines = measured, kz, short or {}, kernel_lines
        costs = why.form_costs() if why is not None else {}
        head = Text()
        head.append(f"c{cid}", "bold")
        head.append(f" {shape_text(cls.shape)} {cls.dtype}, {plural(len(cls.nodes), 'form')}")
        if cls.splat is not None:
            head.append(f", every element = {cls.splat}")
        outputs = [name for name, c in eg.output_classes().items() if c == cid]
        if outputs:
            head.append(f", output {', '.join(outputs)}", "green")
        if isinstance(pins.get(cid), str):
            head.append(f", 📌 pinned to {pins[cid]}", "bold magenta")
        head.append("\n")
        head.append_text(self._why(eg, why, bool(pins)) if choices else Text("no extraction at this stage", "dim"))
        self._show_head(head)
        items: list[tuple[tuple[str, int], Text]] = [
            (("form", n), self._form_text(eg, n, cid, costs, prices, kz, roots, pins)) for n in cls.nodes]
        for ch in dict.fromkeys(ch for n in cls.nodes for ch in eg.node(n).children if ch != cid):
            child = eg.eclass(ch)
            items.append((("child", ch), Text.assemble(
                ("→ ", "bold cyan"), (f"c{ch}", "underline cyan"),
                f" {shape_text(child.shape)} {child.dtype}, {plural(len(child.nodes), 'form')}")))
        self.forms.set_items(items, keep)
        self._show_explanation(Text(self.explanation))

    def _term(self, eg: EGraph, t: Term) -> str:
        return term_text(eg, self._kz, t, self._short, self._measured)

    def _device(self, name: str) -> str:
        return self._short.get(name, name.split(":")[0])

    def _with_short_names(self, text: str) -> str:
        """``text`` with each device's full name replaced by its short one (the legend is in the costs pane)."""
        for full, short in self._short.items():
            text = text.replace(full, short)
        return text

    def _why(self, eg: EGraph, why: Why | None, pinned: bool) -> Text:
        """The choice in DAG cost (the extractor's objective): the plan's, and the best rival's with its terms."""
        if why is None:
            return Text("not in the plan", "dim")
        text = Text.assemble(("★ chosen ", "bold yellow"), " + ".join(self._term(eg, t) for t in why.chosen),
                             f": plan DAG cost {seconds_text(why.dag_cost)}")
        if not why.rivals:
            return text.append("; the only way to make it", "dim")
        best = why.rivals[0]
        delta = best.dag_cost - why.dag_cost
        terms = [f"+{self._term(eg, t)}" for t in best.added] + [f"-{self._term(eg, t)}" for t in best.dropped]
        text.append(f"\nnext best {' + '.join(self._term(eg, t) for t in best.via)}: plan "
                    f"{seconds_text(best.dag_cost)} ({'+' if delta >= 0 else '-'}{seconds_text(abs(delta))}: "
                    f"{', '.join(terms)})", "dim" if delta >= 0 else "red")
        if delta < 0:
            text.append("; the pins cost that" if pinned else
                        "; a cheaper plan is known: the DAG extractor is a heuristic (p pins it)", "red")
        return text

    def _form_text(self, eg: EGraph, n: NodeId, cid: ClassId, costs, prices, kz, roots, pins) -> Text:
        param = eg.node(n).param
        text = Text()
        text.append("★ " if n in self.chosen else "  ", "bold yellow")
        text.append("📌" if pins.get(cid) == n else "  ")
        text.append("A " if n == self.marked else "  ", "bold magenta")
        text.append(f"n{n} ", "dim")
        described = eg.describe(n)
        if isinstance(param, KernelNode) and kz is not None:  # by its readable name (the source pane shows the hash)
            described = described.replace(param.candidate.split("@")[0], kz.name(param.candidate), 1)
        text.append(self._with_short_names(described), "bold" if n in self.chosen else "")
        if isinstance(param, KernelNode) and param in prices:
            mark = "m" if self._measured(param) else "p"
            text.append(f"  {self._device(param.device)} {seconds_text(prices[param])} {mark}", "cyan")
            if n in costs:
                delta = costs[n]
                text.append(f" (plan {'+' if delta >= 0 else '-'}{seconds_text(abs(delta))})", "dim")
        elif kz is not None and kz.defaults.get(cid) == n:
            text.append("  default inline form", "dim")
        if n in roots:
            text.append(f"  root of {', '.join(dict.fromkeys(roots[n]))}", "dim green")
        return text

    def explain_forms(self, a: NodeId, b: NodeId) -> str:
        """Why forms ``a`` and ``b`` are equal, as text (shown below the forms)."""
        assert self.egraph is not None
        eg = self.egraph
        if a == b:
            text = f"n{a} is n{b}"
        else:
            steps = explain(eg, a, b)
            text = f"why n{a} = n{b} ({plural(len(steps), 'step')}):\n" + "\n".join(format_explanation(eg, steps))
        param = eg.node(b).param
        if isinstance(param, KernelNode) and self._kz is not None and param.candidate in self._kz.candidates:
            text += f"\n\nwhy kernel {self._kz.name(param.candidate)} is shaped so:\n" + "\n".join(
                f"  {line}" for line in self._kernel_lines(param.candidate))
        self.explanation = text
        self._show_explanation(Text(text))
        return text

    def explain(self) -> bool:
        """Explain the highlighted form against the marked (or chosen) one; False if no form is highlighted."""
        n = self.highlighted_form()
        if n is None or self.egraph is None:
            return False
        other = self.marked if self.marked is not None else min(self.chosen, default=self.egraph.eclass(n).nodes[0])
        self.explain_forms(other, n)
        return True

    @on(TextList.Selected)
    def _selected(self, event: TextList.Selected) -> None:
        """Enter on a child link follows it; on a form, explains it."""
        event.stop()
        if isinstance(event.key, tuple) and event.key[0] == "child":
            self.post_message(ShowClass(event.key[1]))
        elif self.cid is not None:
            self.explain()

    @on(TextList.Highlighted)
    def _highlighted(self, event: TextList.Highlighted) -> None:
        """A kernel form shows its source (the variant the view's stage gives it)."""
        event.stop()
        n, eg, view = self.highlighted_form(), self.egraph, self.view
        param = eg.node(n).param if n is not None and eg is not None else None
        if isinstance(param, KernelNode) and view is not None:
            self.post_message(ShowKernel(param.candidate, (param.device, view.session.variant(view.stage, param))))

    def mark(self) -> NodeId | None:
        """Mark the highlighted form as the left side of the next explanation."""
        self.marked = self.highlighted_form()
        return self.marked

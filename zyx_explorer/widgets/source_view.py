"""The source pane: the kernel IR and what the selected variant's device runs (OpenCL C, the native C function,
the numpy program or the BLAS call), highlighted."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rich.console import Group, RenderableType
from rich.syntax import Syntax
from rich.text import Text
from textual.widgets import Static

from engine import DEFAULT_VARIANT, Candidate, Device, Variant, device_source
from zyx_explorer.model import seconds_text
from zyx_explorer.view import View
from zyx_explorer.widgets.ir_lexer import KernelIRLexer

PLAN_EXTRA = "plus its fresh outputs' first touch and its inputs read from memory"
"""What a plan's launch pays beyond a kernel's timed trial (``Compilation.output_cost``)."""


def times_text(times: Mapping[str, tuple[float, bool, float]], short: Mapping[str, str]) -> Text:
    """A line per device: the kernel's time, measured or predicted, and what extraction prices a plan's launch of
    it at where that reads differently (what the difference pays for is said once, below)."""
    text, priced = Text(), False
    for device, (s, measured, price) in times.items():
        more = seconds_text(price) != seconds_text(s)
        priced |= more
        text.append(f"  {short.get(device, device)}: {seconds_text(s)} {'measured' if measured else 'predicted'}"
                    + (f", {seconds_text(price)} in a plan" if more else "") + "\n", "cyan" if measured else "dim cyan")
    if priced:
        text.append(f"  in a plan: {PLAN_EXTRA} (what extraction prices)\n", "dim")
    return text


class SourceView(Static):
    """One kernel candidate: where it comes from, its times per device, its IR and what one variant runs."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.cand_id: str | None = None
        self.variant: tuple[str, Variant] | None = None
        self.source_text = ""
        """The device source shown (plain)."""

    def show(self, view: View, cand_id: str | None, variant: tuple[str, Variant] | None = None) -> None:
        """Candidate ``cand_id`` as of the view's stage; ``variant``: (device, variant) to show (None: the one the
        plan launches)."""
        s, current = view.session, view.session.current()
        prices = s.prices(view.stage)
        times = {k.device: (t, current is not None and current.measured(k), prices.get(k, t))
                 for k, t in s.kernel_times(view.stage).items() if k.candidate == cand_id}
        launched = view.launched(cand_id) if cand_id else None
        c, name = s.compilation, cand_id or ""
        self._show(cand_id, s.candidate(cand_id) if cand_id else None, times,
                   "monokai" if self.app.current_theme.dark else "default", variant or launched, launched,
                   {d.name: d for d in c.devices} if c is not None else {}, s.short(), s.kernel_name(name),
                   s.tensors_of(name), s.kernel_lines(view.stage, name))

    def _show(self, cand_id: str | None, cand: Candidate | None, times: Mapping[str, tuple[float, bool, float]],
              theme: str, variant: tuple[str, Variant] | None, launched: tuple[str, Variant] | None,
              devices: Mapping[str, Device], short: Mapping[str, str], name: str, tensors: Sequence[str],
              decisions: Sequence[str]) -> None:
        """``times``: (seconds, measured, what extraction prices it at) by device name; ``variant``: (device,
        variant) to show, ``launched``: the plan's; ``devices``: by name (what runs depends on the device); ``short``:
        the devices' short names; ``name``: the kernel's readable name, ``tensors``: the program tensors it computes,
        ``decisions``: why it is shaped so."""
        self.cand_id, self.variant = cand_id, variant
        if cand is None:
            self.source_text = ""
            self.update(Text("no kernel selected: highlight a kernel form, a costs row or a Launch step", "dim"))
            return
        head = Text.assemble((name or cand.kernel.name, "bold"), f" ({cand.kernel.name})  computes c{cand.output} from ",
                             ", ".join(f"c{i}" for i in cand.inputs) or "nothing", f", root form n{cand.root}\n")
        if tensors:
            head.append(f"  program tensors: {', '.join(tensors)}  (t: show in the program)\n", "green")
        head.append_text(times_text(times, short))
        where = ""
        if variant is not None:
            which = "launched by the plan" if variant == launched else "highlighted in costs"
            where = f" of variant {variant[1]} on {short.get(variant[0], variant[0])} ({which})"
        try:
            what = device_source(devices.get(variant[0]) if variant else None, cand.kernel,
                                 variant[1] if variant else DEFAULT_VARIANT)
            title = what.title + where
            self.source_text = what.text
            code: RenderableType = Syntax(what.text, what.language, theme=theme, line_numbers=True, word_wrap=True)
        except Exception as e:  # an unsupported kernel or variant is shown, not raised
            title, self.source_text = "source" + where, ""
            code = Text(f"no source{where}: {e}", "yellow")
        ir = Syntax(str(cand.kernel), KernelIRLexer(), theme=theme, word_wrap=True)
        why = Text("\n".join(f"  {line}" for line in decisions) + "\n") if decisions else Text("")
        self.update(Group(head, Text("fusion decisions", "bold underline"), why, Text("kernel IR", "bold underline"), ir, Text(""),
                          Text(title, "bold underline"), code))

"""The source pane: the kernel IR and the OpenCL C (or native C) of the selected kernel variant, highlighted."""

from __future__ import annotations

from collections.abc import Mapping

from rich.console import Group, RenderableType
from rich.syntax import Syntax
from rich.text import Text
from textual.widgets import Static

from engine.devices.base import Variant
from engine.kernel import opencl
from engine.kernel.kernelize import Candidate
from zyx_explorer.model import seconds_text
from zyx_explorer.widgets.ir_lexer import KernelIRLexer


class SourceView(Static):
    """One kernel candidate: where it comes from, its times per device, its IR and the OpenCL C of one variant."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.cand_id: str | None = None
        self.variant: tuple[str, Variant] | None = None
        self.opencl_source = ""

    def show(self, cand_id: str | None, cand: Candidate | None, times: Mapping[str, float], theme: str,
             variant: tuple[str, Variant] | None = None, launched: tuple[str, Variant] | None = None) -> None:
        """``times``: seconds by device name; ``variant``: (device, variant) to show, ``launched``: the plan's."""
        self.cand_id, self.variant = cand_id, variant
        if cand is None:
            self.opencl_source = ""
            self.update(Text("no kernel selected: highlight a kernel form, a costs row or a Launch step", "dim"))
            return
        head = Text.assemble((cand.kernel.name, "bold"), f"  computes c{cand.output} from ",
                             ", ".join(f"c{i}" for i in cand.inputs) or "nothing", f", root form n{cand.root}\n")
        for device, s in times.items():
            head.append(f"  {device}: {seconds_text(s)}\n", "cyan")
        native = variant is not None and variant[0] == "native"
        title = "C (native)" if native else "OpenCL C"
        if variant is not None:
            which = "launched by the plan" if variant == launched else "highlighted in costs"
            title += f" of variant {variant[1]} on {variant[0]} ({which})"
        try:
            if native:
                from engine.devices import native as c

                self.opencl_source = c.generate(cand.kernel, variant[1])
            else:
                self.opencl_source = opencl.generate(cand.kernel, variant[1]) if variant else opencl.generate(cand.kernel)
            c_code: RenderableType = Syntax(self.opencl_source, "c", theme=theme, line_numbers=True, word_wrap=True)
        except Exception as e:  # an unsupported kernel or variant is shown, not raised
            self.opencl_source = ""
            c_code = Text(f"no {title}: {e}", "yellow")
        ir = Syntax(str(cand.kernel), KernelIRLexer(), theme=theme, word_wrap=True)
        self.update(Group(head, Text("kernel IR", "bold underline"), ir, Text(""),
                          Text(title, "bold underline"), c_code))

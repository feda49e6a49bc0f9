"""The source pane: the kernel IR and the generated OpenCL C of the selected kernel, syntax highlighted."""

from __future__ import annotations

from collections.abc import Mapping

from rich.console import Group, RenderableType
from rich.syntax import Syntax
from rich.text import Text
from textual.widgets import Static

from engine.kernel import opencl
from engine.kernel.kernelize import Candidate
from zyx_explorer.model import seconds_text


class SourceView(Static):
    """Shows one kernel candidate: where it comes from, its times per device, its IR and OpenCL C."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.cand_id: str | None = None
        self.opencl_source = ""

    def show(self, cand_id: str | None, cand: Candidate | None, times: Mapping[str, float], theme: str) -> None:
        """``times``: seconds by device name."""
        self.cand_id = cand_id
        if cand is None:
            self.opencl_source = ""
            self.update(Text("no kernel selected: highlight a kernel form, a costs row or a Launch step", "dim"))
            return
        head = Text.assemble((cand.kernel.name, "bold"), f"  computes c{cand.output} from ",
                             ", ".join(f"c{i}" for i in cand.inputs) or "nothing", f", root form n{cand.root}\n")
        for device, s in times.items():
            head.append(f"  {device}: {seconds_text(s)}\n", "cyan")
        try:
            self.opencl_source = opencl.generate(cand.kernel)
            c_code: RenderableType = Syntax(self.opencl_source, "c", theme=theme, line_numbers=True, word_wrap=True)
        except Exception as e:  # an unsupported kernel is shown, not raised
            self.opencl_source = ""
            c_code = Text(f"no OpenCL C: {e}", "yellow")
        ir = Syntax(str(cand.kernel), "python", theme=theme, word_wrap=True)
        self.update(Group(head, Text("kernel IR", "bold underline"), ir, Text(""),
                          Text("OpenCL C", "bold underline"), c_code))

"""The program pane: every input and node of the program as a row (virtualised, like every table here)."""

from __future__ import annotations

from engine import Program
from zyx_explorer.model import shape_text
from zyx_explorer.rows import Row
from zyx_explorer.widgets.line_table import Column, LineTable

COLUMNS = (Column("name", 12), Column("op", 10), Column("args", 22, flex=True), Column("shape", 14), Column("dtype", 5))


class ProgramTable(LineTable):
    """Inputs first, then nodes in dependency order; the row key is the tensor name (outputs marked ``->``)."""

    def __init__(self, program: Program, **kwargs) -> None:
        super().__init__(COLUMNS, **kwargs)
        self.program = program

    def on_mount(self) -> None:
        outputs = set(self.program.outputs)
        rows = [Row(i.name, (i.name, "input", "", shape_text(i.shape), str(i.dtype)), "dim")
                for i in self.program.inputs]
        rows += [Row(n.id, (f"{n.id} ->" if n.id in outputs else n.id, n.op, ", ".join(n.args), shape_text(n.shape),
                            str(n.dtype)), "bold" if n.id in outputs else "") for n in self.program.nodes]
        self.set_rows(rows)

"""The program pane: every input and node of the program as a table row."""

from __future__ import annotations

from textual.widgets import DataTable

from engine import Program


class ProgramTable(DataTable):
    """Inputs first, then nodes in dependency order; the row key is the tensor name."""

    def __init__(self, program: Program, **kwargs) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kwargs)
        self.program = program

    def on_mount(self) -> None:
        for key in ("name", "op", "args", "shape", "dtype"):
            self.add_column(key, key=key)
        outputs = set(self.program.outputs)
        for i in self.program.inputs:
            self.add_row(i.name, "input", "", _shape(i.shape), str(i.dtype), key=i.name)
        for n in self.program.nodes:
            name = f"{n.id} ->" if n.id in outputs else n.id
            self.add_row(name, n.op, ", ".join(n.args), _shape(n.shape), str(n.dtype), key=n.id)


def _shape(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"

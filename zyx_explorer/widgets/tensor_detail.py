"""The detail pane: one tensor of the program, its attributes, neighbours and primitive lowering."""

from __future__ import annotations

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from engine import PrimGraph, Program, to_json_value


def _shape(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"


class TensorDetail(Static):
    """Shows what the selected tensor is, what it reads and feeds, and what it lowers to."""

    def __init__(self, program: Program, prims: PrimGraph, **kwargs) -> None:
        super().__init__(**kwargs)
        self.program = program
        self.prims = prims
        self.types = program.types()
        self.summary = Text()
        self.lowering = Table()

    def show(self, name: str, where: str = "") -> None:
        """Render the detail of tensor ``name``; ``where``: where it went in the compilation (one line)."""
        node = next((n for n in self.program.nodes if n.id == name), None)
        shape, dtype = self.types[name]
        text = Text()
        call = f"{node.op}({', '.join(node.args)})" if node else "input"
        text.append(f"{name} = {call}", "bold")
        text.append(f": {_shape(shape)} {dtype}\n")
        if node is None:
            spec = next(i for i in self.program.inputs if i.name == name)
            text.append(f"init: {spec.init.kind} {dict(spec.init.params)}\n")
        else:
            for key, value in node.attrs.items():
                text.append(f"  {key} = {to_json_value(value)}\n", "dim")
            for arg in node.args:
                text.append(f"  reads {arg} {_shape(self.types[arg][0])}\n")
        users = [n.id for n in self.program.nodes if name in n.args]
        if users:
            text.append(f"  used by {', '.join(users)}\n")
        if name in self.program.outputs:
            text.append("  output of the program\n", "green")
        if where:
            text.append(f"  compiled: {where} (enter goes there)\n", "cyan")
        table = Table(title="lowers to", title_justify="left", box=None)
        for column in ("#", "primitive", "param", "shape", "dtype"):
            table.add_column(column, no_wrap=True)
        for i, (origin, prim) in enumerate(zip(self.prims.origins, self.prims.nodes)):
            if origin == name:
                param = "" if prim.param is None else str(to_json_value(prim.param))
                table.add_row(str(i), prim.op, Text(param), _shape(prim.shape), str(prim.dtype))
        if not table.row_count:
            text.append("\n(not used by any output: not lowered)", "yellow")
        self.summary, self.lowering = text, table
        self.update(Group(text, table) if table.row_count else text)

"""The results pane: headline numbers, problems worked around, each output (shape, dtype, stats, first values),
the verification."""

from __future__ import annotations

import numpy as np
from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.widgets import Static

from zyx_explorer.model import result_summary, shape_text
from zyx_explorer.view import View


def _stats(a: np.ndarray) -> tuple[str, str, str, str]:
    if a.size == 0:
        return ("", "", "", "")
    f = np.asarray(a, np.float64)
    low, high, mean, std = (f"{x:.4g}" for x in (f.min(), f.max(), f.mean(), f.std()))
    return low, high, mean, std


class ResultsView(Static):
    """Filled once the ``executed`` stage exists; before that, the numbers known so far."""

    def show(self, view: View) -> None:
        """The view's compilation (the what-if's when a pin is set) as far as it got."""
        c = view.session.current() if view.session.compilation is not None else None
        if c is None:
            self.update(Text("compiling…", "dim"))
            return
        parts: list = []
        stats = Table.grid(padding=(0, 2))
        stats.add_column(style="bold")
        stats.add_column()
        for key, value in result_summary(c).items():
            stats.add_row(key, Text(str(value)))
        parts += [Text("Compilation", "bold underline"), stats, Text("")]
        if c.problems:
            parts.append(Text(f"Problems worked around ({len(c.problems)})", "bold underline yellow"))
            parts += [Text(f"  ! {p}", "yellow") for p in c.problems]
            parts.append(Text(""))
        if c.execution is None:
            parts.append(Text("not executed yet (the executed stage is still to come)", "dim"))
            self.update(Group(*parts))
            return
        outputs = Table("output", "shape", "dtype", "min", "max", "mean", "std", "first values",
                        title="Outputs", title_justify="left")
        for name, output in c.execution.outputs.items():
            a = np.asarray(output)
            first = ", ".join(f"{x:.4g}" for x in a.reshape(-1)[:4].astype(np.float64))
            outputs.add_row(Text(name), shape_text(a.shape), str(a.dtype), *_stats(a), first)
        parts.append(outputs)
        if c.verification is not None:
            check = Table("output", "max error", "rtol", "atol", "verdict", title="Verification against the reference",
                          title_justify="left")
            for o in c.verification.outputs:
                check.add_row(Text(o.name), f"{o.max_error:.3g}", f"{o.rtol:g}", f"{o.atol:g}",
                              Text("ok", "green") if o.ok else Text("WRONG", "bold red"))
            parts.append(check)
        self.update(Group(*parts))

"""``zyx-explore compile FILE``: compile, tune, execute and verify headless; print the plan summary or JSON.

Exit codes: 0 verified, 1 the plan's outputs differ from the reference, 2 bad input.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress as Bar
from rich.progress import TextColumn, TimeElapsedColumn
from rich.table import Table

from engine import RESIDENT_NOTE, Program, Progress, compile_stages, summary, units

DESCRIPTION = ("Compile FILE for the devices found (tuning within the budget), run the plan, verify it against the "
               "reference and print the plan: each launch's device, variant, predicted (m: measured by the tuner, "
               "p: the calibrated cost model) and measured time.")


def arguments(p: argparse.ArgumentParser, compile_arguments) -> None:
    """The arguments of a headless command on FILE (``compile``, ``why``): ``--json`` and the compilation options."""
    p.add_argument("file", type=Path, help="the graph.json file or ONNX model")
    p.add_argument("--json", action="store_true", help="print one JSON object (docs/tuning.md describes compile's)")
    compile_arguments(p)


def progress_text(p: Progress, names: dict[str, str], short: dict[str, str] | None = None) -> str:
    """What is being timed now: kernel, device (by its ``short`` name), variant, trials done, seconds spent of the
    budget."""
    now = "timing" if p.trial is None else f"timed ({p.trial.status})"
    device = (short or {}).get(p.device, p.device)
    return (f"{names.get(p.kernel, p.kernel[:10])} on {device}: {now} {p.variant}, "
            f"{p.done}/{p.total} variants, {p.elapsed:.1f} of {p.budget:.1f} s")


def run(program: Program, args: argparse.Namespace, devices: list, options: Any, console: Console,
        err: Console) -> int:
    names: dict[str, str] = {}
    with Bar(TextColumn("{task.description}"), TimeElapsedColumn(), console=err, transient=True) as bar:
        task = bar.add_task("compiling", total=None)

        def tuning(p: Progress) -> None:
            bar.update(task, description=progress_text(p, names))

        for c in compile_stages(program, devices, options, progress=tuning):
            if c.kernelization is not None and not names:
                names.update(c.kernelization.names_by_key())
            bar.update(task, description=f"{c.stage} done")
    out = summary(c)
    if args.json:
        console.print_json(json.dumps(out))
    else:
        _print(out, console)
    return 0 if out["verified"] else 1


def _print(out: dict[str, Any], console: Console) -> None:
    table = Table(title="plan launches", title_justify="left")
    for col in ("kernel", "device", "variant", "predicted", "measured"):
        table.add_column(col, justify="right" if col in ("predicted", "measured") else "left")
    for launch in out["plan"]:
        predicted = f"{units.seconds(launch['predicted_s'])} {'m' if launch['timed'] else 'p'}"
        table.add_row(launch["name"], launch["device"], launch["variant"], predicted,
                      units.seconds(launch["measured_s"]))
    console.print(table)
    budget = "" if out["budget_s"] is None else f" of a {units.seconds(out['budget_s'])} budget"
    first = ("" if out["first_run_s"] is None else f" (median of {units.plural(out['reruns'], 'rerun')}; "
                                                    f"first run {units.seconds(out['first_run_s'])})")
    resident = f" {RESIDENT_NOTE}" if out["resident_inputs"] else ""
    console.print(f"plan{resident}: {out['launches']} launches ({out['coverage']}), predicted {units.seconds(out['predicted_s'])},"
                  f" measured {units.seconds(out['measured_s'])}{first}; tuning {units.seconds(out['tune_s'])}{budget}"
                  + (" (stopped)" if out["tuning_cancelled"] else ""), highlight=False)
    for problem in out["problems"]:
        console.print(f"[yellow]worked around[/yellow]: {problem}", highlight=False)
    console.print("[green]verified[/green]" if out["verified"] else "[bold red]outputs differ from the reference[/]")

"""The ``zyx-explore`` command: open the explorer, or validate a file with ``check``.

Exit codes: 0 success, 2 bad input (a located, one-paragraph message; never a
traceback), 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

import sample_graphs
from engine import GraphError, Program, load
from zyx_explorer import __version__

EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130


def _main_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="zyx-explore",
        description="Explore how a tensor program is compiled: e-graph, fusion, tuning, plan.",
        epilog="commands:\n  check FILE    validate FILE and print a summary (zyx-explore check --help)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("file", nargs="?", type=Path, help="a graph.json file (default: the bundled MLP sample)")
    parser.add_argument("--version", action="version", version=f"zyx-explore {__version__}")
    return parser


def _check_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="zyx-explore check", description="Validate a graph.json file and summarise it."
    )
    parser.add_argument("file", type=Path, help="the graph.json file")
    return parser


def default_file() -> Path:
    """The sample opened when no file is given."""
    return sample_graphs.path(sample_graphs.DEFAULT)


def _fmt_shape(shape: Sequence[int]) -> str:
    return "[" + ", ".join(map(str, shape)) + "]"


def _fmt_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError


def summary(program: Program, source: Path) -> list[Table | str]:
    """The renderables ``check`` prints: inputs, outputs, op counts and totals."""
    title = program.name or source.name
    head = f"[bold]{title}[/bold]" + (f": {program.description}" if program.description else "")
    inputs = Table("input", "shape", "dtype", "init", title="Inputs", title_justify="left")
    for i in program.inputs:
        params = ", ".join(f"{k}={v}" for k, v in i.init.params.items() if k != "values")
        inputs.add_row(i.name, _fmt_shape(i.shape), str(i.dtype), f"{i.init.kind}({params})")
    types = program.types()
    outputs = Table("output", "shape", "dtype", title="Outputs", title_justify="left")
    for name in program.outputs:
        shape, dtype = types[name]
        outputs.add_row(name, _fmt_shape(shape), str(dtype))
    ops = Table("op", "count", title="Ops", title_justify="left")
    for op, count in sorted(Counter(n.op for n in program.nodes).items(), key=lambda kv: (-kv[1], kv[0])):
        ops.add_row(op, str(count))
    prims = program.lower()
    live = len(program.live_nodes())
    dead = len(program.nodes) - live
    totals = (
        f"{len(program.inputs)} inputs ({_fmt_bytes(program.parameter_bytes())}), {len(program.nodes)} nodes"
        + (f" ({dead} not used by any output)" if dead else "")
        + f", {len(prims.nodes)} primitive ops after lowering"
    )
    return [head, inputs, outputs, ops, totals]


def _check(args: argparse.Namespace, console: Console) -> int:
    program = load(args.file)
    for item in summary(program, args.file):
        console.print(item)
    console.print(f"[green]ok[/green]: {args.file} is a valid graph.json")
    return 0


def _explore(args: argparse.Namespace) -> int:
    path = args.file or default_file()
    program = load(path)  # load before the UI starts: a bad file exits 2 with its message
    from zyx_explorer.app import ExplorerApp  # textual is only imported for the UI

    ExplorerApp(program, path).run()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    try:
        if argv[:1] == ["check"]:
            return _check(_check_parser().parse_args(argv[1:]), Console(highlight=False))
        return _explore(_main_parser().parse_args(argv))
    except GraphError as e:
        err.print(f"[bold red]error[/bold red]: {e}", markup=True)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())

"""The ``zyx-explore`` command: open the explorer, validate a file with ``check``, or ``export`` its stages.

An egraph-serialize file (egg, egglog, extraction-gym) is detected: the explorer opens it
in its foreign-e-graph view, and ``extract`` runs greedy, DAG and ILP extraction on it.

An ONNX model (``.onnx``) is imported first (``--dim NAME=VALUE`` sets symbolic dimensions);
``import`` writes it as graph.json with its weights as .npy files.

``check --semantic`` also lowers the program to an e-graph, saturates it and
checks that every form of every class computes the same values on random inputs.

Exit codes: 0 success, 1 the semantic check found forms that disagree (a rule is
unsound), 2 bad input or an output that cannot be written (a located, one-paragraph
message; never a traceback), 3 ``export`` wrote its files but the plan's outputs
differ from the reference interpreter, 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.markup import escape

import sample_graphs
from engine import (
    EXTRACTORS,
    FORMATS,
    Budget,
    ExportOptions,
    GraphError,
    Limits,
    Options,
    Program,
    Runner,
    SizeLimits,
    Stage,
    StepError,
    check_memory,
    check_semantics,
    compile_program,
    compile_stages,
    default_rules,
    detect,
    discover,
    egraph_document,
    export_all,
    extract_all,
    from_program,
    load,
    load_onnx,
    load_serialized,
    problem_document,
    random_inputs,
    special_inputs,
    stage_names,
    units,
    write_atomic,
)
from zyx_explorer import __version__, compile_cmd, render, serve, why_cmd

EXIT_DISAGREEMENT = 1
EXIT_BAD_INPUT = 2
EXIT_VERIFY_FAILED = 3
EXIT_INTERRUPTED = 130

SEMANTIC_MAX_ELEMENTS = 1 << 22
"""Forms bigger than this are not materialised by the semantic check (they are counted as skipped)."""


def _main_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="zyx-explore",
        description="Explore how a tensor program is compiled: e-graph, fusion, tuning, plan.",
        epilog=(
            "commands:\n"
            "  check FILE              validate FILE and print a summary (zyx-explore check --help)\n"
            "  check --semantic FILE   also saturate its e-graph and check every rewrite numerically\n"
            "  compile FILE [--json]   compile, tune, run and verify headless; print the plan (zyx-explore compile --help)\n"
            "  why FILE TENSOR_OR_CLASS  a tensor's or class's classes, chosen form, kernel, fusion decisions, costs "
            "(zyx-explore why --help)\n"
            "  export FILE -o OUTDIR   write every stage as Graphviz (svg/png/pdf/dot) + report.html/.md "
            "(zyx-explore export --help)\n"
            "  extract EGRAPH.json     greedy, DAG and ILP extraction of an egraph-serialize file "
            "(zyx-explore extract --help)\n"
            "  serialize FILE -o OUT   write a stage's e-graph as egraph-serialize JSON (zyx-explore serialize --help)\n"
            "  import MODEL.onnx -o G.json  write an ONNX model as graph.json (+ .npy weights) (zyx-explore import --help)\n"
            "  serve FILE [--port N]   the explorer in a web browser, on 127.0.0.1 (zyx-explore serve --help)\n\n"
            "FILE may be an ONNX model (.onnx): it is imported first (--dim NAME=VALUE for symbolic dimensions).\n"
            "FILE may also be an egraph-serialize JSON e-graph (egg, egglog, extraction-gym): it is detected\n"
            "and opened in the foreign e-graph view (classes, forms with costs, the three extractors)."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("file", nargs="?", type=Path,
                        help="a graph.json, ONNX (.onnx) or egraph-serialize file (default: the bundled MLP sample)")
    parser.add_argument("--version", action="version", version=f"zyx-explore {__version__}")
    _compile_arguments(parser)
    return parser


def _compile_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of the compilation itself, shared by the explorer and ``export``."""
    group = parser.add_argument_group("compilation")
    group.add_argument("--no-tune", action="store_true",
                       help="do not time kernels on the devices: use the cost model's predictions")
    group.add_argument("--tune-variants", type=_at_least(1), default=12, metavar="N",
                       help="variants timed per kernel and device at most (default 12)")
    group.add_argument("--budget", type=_seconds, default=None, metavar="SECONDS",
                       help="seconds of tuning per compilation at most (default 15; 4 per kernel and device)")
    group.add_argument("--extractor", choices=["dag", "greedy", "ilp"], default="dag",
                       help="dag (default: shared kernels counted once), greedy (tree cost) or ilp (exact, small graphs)")
    group.add_argument("--resident", action="store_true",
                       help="plan for inputs kept on the devices between runs (a Session): their uploads are priced "
                            "at nothing and the plan's runs reuse them")
    group.add_argument("--no-opencl", action="store_true", help="no OpenCL devices")
    group.add_argument("--no-native", action="store_true", help="no native C device (it needs a C compiler)")
    group.add_argument("--no-cuda", action="store_true", help="no CUDA device (cuBLAS and NVRTC through cupy)")
    _dim_argument(group)
    _npy_argument(group)


def _dim(text: str) -> tuple[str, int]:
    name, sep, value = text.partition("=")
    if not sep or not name or not value.strip().isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE with a value >= 1, got {text!r}")
    return name, int(value)


def _dim_argument(parser) -> None:
    parser.add_argument("--dim", type=_dim, action="append", default=[], metavar="NAME=VALUE",
                        help="the size of a symbolic dimension of an ONNX model (repeatable)")


def _npy_argument(parser: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    parser.add_argument("--npy-anywhere", action="store_true",
                        help="let .npy paths lead outside the graph's folder (off: a shared file cannot read others)")


def load_program(path: Path, args: argparse.Namespace, runs: bool = True) -> Program:
    """A graph.json file, or an ONNX model (by its .onnx suffix) imported with ``args.dim``; when it ``runs``
    here, also checked to fit in the memory available."""
    if path.suffix.lower() == ".onnx":
        program = load_onnx(path, dict(args.dim))
    elif args.dim:
        raise GraphError("--dim is for ONNX models (.onnx files) only", source=str(path))
    else:
        program = load(path, SizeLimits(npy_anywhere=args.npy_anywhere))
    if runs:
        check_memory(program, str(path))
    return program


def _devices(args: argparse.Namespace, err: Console) -> list:
    """The devices the options allow; why one kind is missing (no C compiler) is printed as a note."""
    notes: list[str] = []
    devices = discover(opencl=not args.no_opencl, native=not args.no_native, notes=notes, cuda=not args.no_cuda)
    for note in notes:
        err.print(f"note: {note}", markup=False, highlight=False)
    return devices


def _options(args: argparse.Namespace) -> Options:
    default = Options().tune_budget
    total = default.total if args.budget is None else args.budget
    budget = Budget(variants=args.tune_variants, seconds=min(default.seconds, total), total=total)
    return Options(tune=not args.no_tune, tune_budget=budget, extractor=args.extractor, resident_inputs=args.resident)


def _at_least(minimum: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return parse


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, got {text}")
    return value


SEMANTIC_OPTIONS = ("fast_math", "seed", "iterations", "nodes", "seconds")


CHECK_DESCRIPTION = ("Validate a graph.json file and summarise it. With --semantic, also lower it to an e-graph, "
                     "saturate it with the rewrite rules and check that every form of every class computes the same values "
                     "on random inputs (exit 1 if any disagree: a rule is unsound).")


def _check_arguments(parser: argparse.ArgumentParser) -> None:
    limits = Limits()
    parser.add_argument("file", type=Path, help="the graph.json file (or an ONNX model)")
    _dim_argument(parser)
    _npy_argument(parser)
    semantic = parser.add_argument_group("semantic check (these options need --semantic)")
    semantic.add_argument("--semantic", action="store_true", help="saturate the e-graph and check it numerically")
    semantic.add_argument("--fast-math", action="store_true",
                          help="add the fast-math rules (valid for finite values) and compare finite values only")
    semantic.add_argument("--seed", type=_at_least(0), default=None, metavar="N",
                          help="seed of the random inputs (default 0)")
    semantic.add_argument("--iterations", type=_at_least(0), default=None, metavar="N",
                          help=f"stop saturating after N iterations (default {limits.iterations})")
    semantic.add_argument("--nodes", type=_at_least(1), default=None, metavar="N",
                          help=f"stop saturating beyond N e-nodes (default {limits.nodes})")
    semantic.add_argument("--seconds", type=_seconds, default=None, metavar="S",
                          help=f"stop saturating after S seconds (default {limits.seconds:g})")


def _check_needs_semantic(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """The semantic check's options without ``--semantic``: a usage error."""
    if not args.semantic:
        given = [name for name in SEMANTIC_OPTIONS if getattr(args, name) not in (None, False)]
        if given:
            names = ", ".join("--" + name.replace("_", "-") for name in given)
            parser.error(f"{names} {'needs' if len(given) == 1 else 'need'} --semantic")


def default_file() -> Path:
    """The sample opened when no file is given."""
    return sample_graphs.path(sample_graphs.DEFAULT)


def _check_foreign(args: argparse.Namespace, console: Console) -> int:
    """``check`` on an egraph-serialize file: parse it (a located message on error) and summarise it."""
    if args.semantic:
        raise GraphError("--semantic checks a graph.json program's rewrites; this is an egraph-serialize e-graph "
                         "(zyx-explore extract FILE runs the extractors on it)", source=str(args.file))
    for item in render.foreign_summary(load_serialized(args.file)):
        console.print(item)
    console.print(f"[green]ok[/green]: {args.file} is a valid egraph-serialize e-graph "
                  "(zyx-explore FILE opens it, zyx-explore extract FILE runs the extractors)")
    return 0


def _check(args: argparse.Namespace, console: Console, err: Console) -> int:
    if args.file.suffix.lower() != ".onnx" and detect(args.file) == "egraph-serialize":
        return _check_foreign(args, console)
    program = load_program(args.file, args, runs=args.semantic)
    for item in render.summary(program, args.file):
        console.print(item)
    kind = "ONNX model (imported)" if args.file.suffix.lower() == ".onnx" else "graph.json"
    console.print(f"[green]ok[/green]: {escape(str(args.file))} is a valid {kind}")
    return _semantic(program, args, console, err) if args.semantic else 0


def _limits(args: argparse.Namespace) -> Limits:
    default = Limits()
    return Limits(
        iterations=default.iterations if args.iterations is None else args.iterations,
        nodes=default.nodes if args.nodes is None else args.nodes,
        seconds=default.seconds if args.seconds is None else args.seconds,
    )


def _semantic(program: Program, args: argparse.Namespace, console: Console, err: Console) -> int:
    """``check --semantic``: saturate the program's e-graph, print what happened, check it numerically."""
    seed = args.seed or 0
    rules = default_rules(fast_math=args.fast_math)
    limits = _limits(args)
    egraph = from_program(program)
    # drawn before saturation: the same seed gives the same inputs for any rules
    inputs = [random_inputs(egraph, seed), special_inputs(egraph, seed)]
    with console.status("saturating the e-graph"):
        result = Runner(rules, limits).run(egraph)
    for item in render.saturation_summary(result, len(rules), args.fast_math):
        console.print(item)
    began = time.perf_counter()
    with console.status("checking every form of every class"):
        report = check_semantics(egraph, inputs, seed=seed, max_elements=SEMANTIC_MAX_ELEMENTS,
                                 finite_only=args.fast_math)
    for item in render.semantic_summary(egraph, report, seed, args.fast_math, time.perf_counter() - began):
        console.print(item)
    return 0 if report.ok else EXIT_DISAGREEMENT


def _class_id(text: str) -> int:
    try:
        value = int(text.removeprefix("c"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a class id (like c12 or 12): {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"not a class id: {text!r}")
    return value


EXPORT_DESCRIPTION = ("Compile FILE for every device found and write each stage as a Graphviz graph (DOT, and SVG, "
                      "PNG or PDF through `dot`) plus report.html and report.md (plan, costs per device, rewrite statistics, "
                      "verification). Big graphs are cut to a readable size; each graph's label says what was cut and why.")


def _export_arguments(parser: argparse.ArgumentParser) -> None:
    max_nodes = ExportOptions().max_nodes
    parser.add_argument("file", type=Path, help="the graph.json file")
    parser.add_argument("--stage", default="all", choices=["all", *stage_names()], help="the stage to export")
    parser.add_argument("--format", default="svg", choices=FORMATS, help="svg, png, pdf or dot (default svg)")
    parser.add_argument("-o", "--output", type=Path, required=True, metavar="OUTDIR", help="folder to write into")
    parser.add_argument("--force", action="store_true", help="write into OUTDIR even if it is not empty")
    parser.add_argument("--neighbourhood", type=_class_id, metavar="CLASS",
                        help="only the classes within --depth edges of CLASS (e.g. c12)")
    parser.add_argument("--depth", type=_at_least(0), default=None, metavar="N", help="neighbourhood depth (default 2)")
    parser.add_argument("--plan-only", action="store_true", help="only what the chosen plan uses")
    parser.add_argument("--collapse", action="store_true", help="draw a class with one form (a kernel) as one node")
    parser.add_argument("--max-nodes", type=_at_least(1), default=max_nodes, metavar="N",
                        help="above N drawn nodes a graph is cut to the chosen plan, collapsed (default "
                             f"{max_nodes}); each graph's label says what was cut")
    _compile_arguments(parser)


def _check_depth(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.depth is not None and args.neighbourhood is None:
        parser.error("--depth needs --neighbourhood")


def _export(args: argparse.Namespace, console: Console, err: Console) -> int:
    """``export``: compile the file and write its stages and the report into the output folder."""
    out: Path = args.output
    problem = output_problem(out, folder=True, force=args.force)
    if problem:
        return _error(err, problem)
    program = load_program(args.file, args)
    with err.status("compiling (and tuning)" if not args.no_tune else "compiling"):
        compilation = compile_program(program, _devices(args, err), _options(args))
    assert compilation.egraph is not None
    if args.neighbourhood is not None and args.neighbourhood >= compilation.egraph.num_added:
        return _error(err, f"--neighbourhood c{args.neighbourhood}: no such class "
                           f"(ids go up to c{compilation.egraph.num_added - 1})")
    options = ExportOptions(neighbourhood=args.neighbourhood, depth=2 if args.depth is None else args.depth,
                            plan_only=args.plan_only, collapse=args.collapse,
                            max_nodes=args.max_nodes)
    stages = None if args.stage == "all" else [args.stage]
    with err.status("rendering"):
        result = export_all(compilation, stages, out, args.format, options, source=str(args.file))
    for note in dict.fromkeys(result.notes):
        err.print(f"[yellow]note[/yellow]: {escape(note)}")
    console.print(f"[green]wrote[/green] {units.plural(len(result.paths), 'file')} to {escape(str(out))}: "
                  + escape(", ".join(p.name for p in result.paths)))
    if compilation.verification is not None and not compilation.verification.ok:
        wrong = ", ".join(o.name for o in compilation.verification.outputs if not o.ok)
        err.print(f"[bold red]verification failed[/bold red]: {escape(str(args.file))}: the plan's outputs "
                  f"{escape(wrong)} differ from the reference interpreter (see report.md)")
        return EXIT_VERIFY_FAILED
    return 0


EXTRACT_DESCRIPTION = ("Read an egraph-serialize JSON e-graph (egg, egglog, extraction-gym) and run extractors on it: "
                       "print each one's DAG cost (each chosen class counted once), tree cost (once per use) and time.")


def _extract_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, help="the egraph-serialize file")
    parser.add_argument("--extractor", action="append", choices=list(EXTRACTORS), metavar="NAME",
                        help=f"one of {', '.join(EXTRACTORS)} (repeatable; default: all)")
    parser.add_argument("--time-limit", type=_seconds, default=10.0, metavar="S",
                        help="seconds each extractor may take before it returns its best (default 10)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON (with the chosen nodes)")


SERIALIZED_STAGES = tuple(s.value for s in (Stage.EGRAPH, Stage.SATURATED, Stage.KERNELIZED, Stage.TUNED))


SERIALIZE_DESCRIPTION = ("Compile FILE up to a stage and write its e-graph as egraph-serialize JSON (for egg/egglog tools, "
                         "extraction-gym, egraph-visualizer). egraph and saturated: every class and node, each node costing 1. "
                         "kernelized and tuned: the extraction problem, a class per value (class@pool) whose nodes are its kernels and "
                         "copies costing their microseconds (nominal estimates, or tuned/predicted times), structural forms subsumed.")


def _serialize_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, help="the graph.json file")
    parser.add_argument("-o", "--output", type=Path, required=True, metavar="OUT", help="the JSON file to write")
    parser.add_argument("--stage", choices=SERIALIZED_STAGES, default=Stage.TUNED.value, help="the stage (default tuned)")
    parser.add_argument("--force", action="store_true", help="replace OUT if it exists")
    _compile_arguments(parser)


def _serialize(args: argparse.Namespace, console: Console, err: Console) -> int:
    """``serialize``: compile up to ``--stage`` and write that e-graph as egraph-serialize JSON."""
    problem = output_problem(args.output, folder=False, force=args.force)
    if problem:
        return _error(err, problem)
    program = load_program(args.file, args)
    options = _options(args)
    with err.status("compiling" + (" (and tuning)" if args.stage == Stage.TUNED and options.tune else "")):
        for c in compile_stages(program, _devices(args, err), options):
            if c.stage == args.stage:
                break
    shown = c.view(args.stage)
    assert shown.egraph is not None
    if shown.kernelization is None:
        doc = egraph_document(shown.egraph)
    else:
        doc = problem_document(shown.egraph, c.device_pools, shown.prices.__getitem__, c.transfer_time(), c.resident)
    write_atomic(args.output, json.dumps(doc, indent=1, allow_nan=False))
    console.print(f"[green]wrote[/green] {escape(str(args.output))}: the {args.stage} e-graph, {len(doc['nodes']):,} nodes")
    return 0


def _load_foreign(path: Path):
    if detect(path) == "graph.json":
        raise GraphError("a graph.json program, not an egraph-serialize e-graph: open it with zyx-explore FILE, "
                         "or use check or export", source=str(path))
    return load_serialized(path)


def _extract(args: argparse.Namespace, console: Console, err: Console) -> int:
    """``extract``: every chosen extractor on a foreign e-graph, as a table or JSON."""
    fg = _load_foreign(args.file)
    results = extract_all(fg, args.extractor or EXTRACTORS, time_limit=args.time_limit)
    if args.json:
        console.print_json(json.dumps({"file": str(args.file), "nodes": len(fg.nodes), "classes": len(fg.classes),
                                       "roots": list(fg.roots), "results": [
                                           {"extractor": r.method, "dag_cost": None if r.error else r.dag_cost,
                                             "tree_cost": None if r.error else r.tree_cost,
                                            "seconds": r.seconds, "status": r.status, "note": r.note,
                                            "error": r.error, "chosen": dict(r.chosen)} for r in results]}))
        return _extract_errors(args.file, results, err)
    roots = ", ".join(fg.root_name(r) for r in fg.roots)
    console.print(f"[bold]{escape(str(args.file))}[/bold]: {len(fg.nodes):,} nodes, {len(fg.classes):,} classes, "
                  f"roots ({fg.roots_from}): {escape(roots) or 'none'}")
    console.print(render.extract_table(results))
    return _extract_errors(args.file, results, err)


def _extract_errors(path: Path, results: list, err: Console) -> int:
    """Each extractor's error as a located line on stderr (also beside ``--json``); the exit code."""
    for r in results:
        if r.error:
            _error(err, f"{path}: {r.method}: {r.error}")
    return 0 if all(not r.error for r in results) else EXIT_BAD_INPUT


IMPORT_DESCRIPTION = ("Import an ONNX model and write it as graph.json, to read or edit. Tensor ids are the model's "
                      "value names (sanitised); initializers become inputs whose values are written beside the output as "
                      "OUT_STEM.ID.npy (up to 16 elements inline).")


def _import_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", type=Path, help="the ONNX model")
    parser.add_argument("-o", "--output", type=Path, required=True, metavar="OUT", help="the graph.json file to write")
    parser.add_argument("--force", action="store_true", help="replace OUT if it exists")
    _dim_argument(parser)


def _import(args: argparse.Namespace, console: Console, err: Console) -> int:
    """``import``: an ONNX model as graph.json plus its weights as .npy files beside it."""
    out: Path = args.output
    problem = output_problem(out, folder=False, force=args.force)
    if problem:
        return _error(err, problem)
    program = load_onnx(args.file, dict(args.dim), weights_dir=out.parent, weights_prefix=out.stem)
    write_atomic(out, program.dumps())
    files = sum(1 for i in program.inputs if i.init.kind == "npy")
    console.print(f"[green]wrote[/green] {escape(str(out))}: {len(program.nodes)} nodes, {len(program.inputs)} inputs "
                  f"({files} .npy files beside it)")
    return 0


def _need_terminal() -> None:
    """The explorer reads keys from a terminal: without one it would wait forever, so say so (exit 2).  Served
    to a browser (``serve``), textual-serve names a web driver instead, which needs none."""
    if not os.environ.get("TEXTUAL_DRIVER") and not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise GraphError("the explorer needs a terminal (stdin and stdout are not both one); "
                         "use zyx-explore check, export or extract in scripts")


def _load_any(path: Path, args: argparse.Namespace):
    """What ``path`` holds: a program, or a foreign e-graph; loaded before any UI starts, so that a bad file
    exits 2 with its message."""
    return _load_foreign(path) if detect(path) == "egraph-serialize" else load_program(path, args)


def _explore(args: argparse.Namespace) -> int:
    path = args.file or default_file()
    loaded = _load_any(path, args)
    _need_terminal()
    if not isinstance(loaded, Program):
        from zyx_explorer.foreign import ForeignApp

        ForeignApp(loaded, path).run()
        return 0
    program = loaded
    from zyx_explorer.app import ExplorerApp  # textual is only imported for the UI

    restricted = args.no_opencl or args.no_native or args.no_cuda
    devices = _devices(args, Console(stderr=True)) if restricted else None  # None: the app discovers them
    ExplorerApp(program, path, devices=devices, options=_options(args)).run()
    return 0


def _serve(args: argparse.Namespace, console: Console, err: Console) -> int:
    """``serve``: check FILE and the explorer's options (the arguments ``serve`` does not know) here (a bad one
    exits 2 at once, not in the browser), then serve the explorer on them."""
    _load_any(args.file, _main_parser().parse_args([str(args.file), *args.rest]))
    try:
        serve.serve(args.file, args.rest, args.host, args.port)
    except OSError as e:
        return _error(err, f"cannot listen on {args.host}:{args.port}: {e.strerror or e}")
    return 0


def _error(err: Console, message: str) -> int:
    """Print one error paragraph (user text is never read as markup); the bad-input exit code."""
    err.print(f"[bold red]error[/bold red]: {escape(message)}")
    return EXIT_BAD_INPUT


def _subject(argv: list[str], *options: str) -> str:
    """What a failure that has no place of its own is about: the value of the first of ``options`` in ``argv``,
    else the file argument."""
    for option in options:
        if option in argv[:-1]:
            return argv[argv.index(option) + 1]
    files = [a for a in argv if not a.startswith("-") and a not in COMMANDS]
    return files[0] if files else "zyx-explore"


def output_problem(path: Path, folder: bool, force: bool) -> str | None:
    """Why ``path`` cannot take the output (a folder, or a regular file), checked before any compiling; None if it can."""
    if path.exists():
        if folder and not path.is_dir():
            return f"{path}: exists and is not a folder"
        if not folder and path.is_dir():
            return f"{path}: is a folder; give a file name"
        if not folder and not path.is_file():
            return f"{path}: is not a regular file (a device, a pipe?); give a file name"
        if not force and (not folder or any(path.iterdir())):
            return f"{path}: {'is not empty' if folder else 'exists'}; use --force to {'write into' if folder else 'replace'} it"
    folder_path = path if folder else path.parent
    existing = next((p for p in (folder_path, *folder_path.parents) if p.exists()), Path("."))
    if not existing.is_dir():
        return f"{path}: {existing} is not a folder"
    try:  # a real write tells what permissions cannot (root, read-only mounts, /proc)
        fd, probe = tempfile.mkstemp(prefix=".zyx-explore-probe-", dir=existing)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        return f"{path}: cannot write into {existing} ({e.strerror or e})"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    for stream in (sys.stdout, sys.stderr):  # a file name that is not valid UTF-8 is printed escaped, not raised
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors="backslashreplace")
    err = Console(stderr=True, highlight=False, soft_wrap=True)
    with warnings.catch_warnings():  # warnings (a corrupt cache being rebuilt) as one line each
        warnings.showwarning = lambda message, *_: err.print(f"warning: {message}", markup=False)
        return _run(argv, err)


def _compile(args: argparse.Namespace, console: Console, err: Console) -> int:
    """``compile``: compile, tune, run and verify headless; print the plan."""
    program = load_program(args.file, args)
    return compile_cmd.run(program, args, _devices(args, err), _options(args), console, err)


def _why(args: argparse.Namespace, console: Console, err: Console) -> int:
    """``why``: compile, then say what a tensor or class became."""
    program = load_program(args.file, args)
    why_cmd.check_target(program, args.target, str(args.file))
    with err.status("compiling (and tuning)" if not args.no_tune else "compiling"):
        compilation = compile_program(program, _devices(args, err), _options(args))
    return why_cmd.run(compilation, args, console)


@dataclass(frozen=True)
class Command:
    """A subcommand: its parser's description and arguments, a check of the parsed arguments that argparse cannot
    express, and what it runs on (args, stdout console, stderr console)."""

    description: str
    arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, Console, Console], int]
    check: Callable[[argparse.ArgumentParser, argparse.Namespace], None] | None = None
    soft_wrap: bool = True
    """Long lines of its output wrap softly (file names, JSON stay whole)."""
    rest: bool = False
    """The arguments it does not know are passed on (``serve``: the explorer's), in ``args.rest``."""


COMMANDS = {
    "check": Command(CHECK_DESCRIPTION, _check_arguments, _check, _check_needs_semantic, soft_wrap=False),
    "compile": Command(compile_cmd.DESCRIPTION, lambda p: compile_cmd.arguments(p, _compile_arguments), _compile,
                       soft_wrap=False),
    "why": Command(why_cmd.DESCRIPTION, lambda p: why_cmd.arguments(p, _compile_arguments), _why),
    "export": Command(EXPORT_DESCRIPTION, _export_arguments, _export, _check_depth),
    "serialize": Command(SERIALIZE_DESCRIPTION, _serialize_arguments, _serialize),
    "import": Command(IMPORT_DESCRIPTION, _import_arguments, _import),
    "serve": Command(serve.DESCRIPTION, serve.arguments, _serve, rest=True),
    "extract": Command(EXTRACT_DESCRIPTION, _extract_arguments, _extract),
}
"""``zyx-explore COMMAND ...``; without a command, ``zyx-explore [FILE]`` opens the explorer (``_main_parser``)."""


def _command_parser() -> tuple[argparse.ArgumentParser, dict[str, argparse.ArgumentParser]]:
    """The parser of ``zyx-explore COMMAND ...`` (argparse subcommands) and each command's own parser."""
    root = argparse.ArgumentParser(prog="zyx-explore")
    commands = root.add_subparsers(dest="command", required=True)
    parsers = {}
    for name, command in COMMANDS.items():
        parsers[name] = commands.add_parser(name, prog=f"zyx-explore {name}", description=command.description)
        command.arguments(parsers[name])
    return root, parsers


def _parse_command(argv: list[str]) -> tuple[Command, argparse.Namespace]:
    """``argv`` (a command and its arguments) parsed: usage errors exit 2 with the command's own usage."""
    root, parsers = _command_parser()
    args, rest = root.parse_known_args(argv)
    command, parser = COMMANDS[args.command], parsers[args.command]
    if rest and not command.rest:
        parser.error(f"unrecognized arguments: {' '.join(rest)}")
    args.rest = rest
    if command.check is not None:
        command.check(parser, args)
    return command, args


def _run(argv: list[str], err: Console) -> int:
    """The command of ``argv``; every failure a user can cause becomes a message and an exit code."""
    try:
        if argv[:1] and argv[0] in COMMANDS:
            command, args = _parse_command(argv)
            return command.run(args, Console(highlight=False, soft_wrap=command.soft_wrap), err)
        return _explore(_main_parser().parse_args(argv))
    except GraphError as e:
        return _error(err, str(e))
    except (MemoryError, StepError) as e:  # a plan's step that ran out of memory is a StepError caused by one
        if isinstance(e, StepError) and not isinstance(e.__cause__, MemoryError):
            raise
        return _error(err, f"{_subject(argv)}: out of memory: the program needs more memory than "
                           "this machine has free")
    except OSError as e:  # an output that became unwritable while compiling (a full disk, a folder removed)
        return _error(err, f"{e.filename or _subject(argv, '-o', '--output')}: cannot be written ({e.strerror or e})")
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())

"""Hostile input, corrupt caches and unwritable outputs (issue 18): each gives a located message, a warning and
a rebuild, or a refusal before any work; never a traceback, a crash, a hang or a silent degradation."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import time
import warnings
from pathlib import Path

import numpy as np
import pytest

import sample_graphs
from engine import GraphError, load, loads
from engine.devices.base import Link
from engine.errors import FormatError, InitError, ShapeError
from engine.fileio import STALE_SECONDS, CacheWarning, UnsafeFileError, read_bounded, write_atomic
from engine.interop import loads_serialized
from engine.program.loader import SizeLimits
from engine.tuning import TuneCache, links, tune
from engine.tuning.links import LinkCache
from tests.fuzzing import device_node
from tests.test_autotune import matmul
from zyx_explorer.cli import main, output_problem

MLP = json.loads(sample_graphs.path("mlp.small").read_text())


def _graph(tmp_path: Path, **changes) -> Path:
    doc = {**MLP, **changes}
    path = tmp_path / "g.json"
    path.write_text(json.dumps(doc))
    return path


def _unary(init: object, shape: list | None = None, dtype: str = "f32") -> dict:
    return {"inputs": {"x": {"shape": shape or [8, 16], "dtype": dtype, "init": init}},
            "nodes": [{"id": "a", "op": "relu", "args": ["x"]}], "outputs": ["a"]}


# -- 1, 2: user text is printed as text ------------------------------------------------------------

@pytest.mark.parametrize("text", ["[/x]", "[/]", "[b]bold[/b]", "[link=http://evil.example]here[/link]"])
def test_markup_in_names_is_printed_literally(tmp_path, capsys, text):
    doc = json.loads(json.dumps(MLP).replace('"w1"', json.dumps(text + "w1")))
    path = tmp_path / "g.json"
    path.write_text(json.dumps({**doc, "name": text, "description": text}))
    assert main(["check", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"{text}: {text}" in out and "\x1b]8;" not in out  # name and description; no hyperlink escape


def test_markup_in_an_error_is_printed_literally(tmp_path, capsys):
    path = _graph(tmp_path, outputs=["[/x]"])
    assert main(["check", str(path)]) == 2
    assert "outputs[0]: unknown tensor '[/x]'" in capsys.readouterr().err


@pytest.mark.parametrize(("text", "where"), [
    ('{"name": "\\udc00", "inputs": {}, "nodes": [], "outputs": []}', "name"),
    ('{"inputs": {"a\\udc00": {"shape": [1]}}, "nodes": [], "outputs": ["x"]}', "inputs.a\\udc00"),
    ('{"inputs": {}, "nodes": [{"id": "n", "op": "const", "attrs": {"dtype": "\\ud800"}}], "outputs": ["n"]}',
     "nodes[0].attrs.dtype"),
])
def test_lone_surrogates_are_rejected_at_their_place(text, where):
    with pytest.raises(FormatError, match="lone surrogate") as info:
        loads(text, source="s.json")
    assert info.value.location == where
    str(info.value).encode("utf-8")  # the message itself prints


def test_a_surrogate_pair_is_a_character():
    program = loads('{"name": "\\ud83d\\ude00", "inputs": {"x": {"shape": [1]}}, "nodes": [], "outputs": ["x"]}')
    assert program.name == "\U0001f600"


def test_the_tui_shows_hostile_names(tmp_path):
    import asyncio

    from engine.devices import NumpyDevice
    from engine.pipeline import Options
    from zyx_explorer.app import ExplorerApp

    text = json.dumps(MLP)
    for name in [*MLP["inputs"], *(n["id"] for n in MLP["nodes"])]:
        text = text.replace(f'"{name}"', f'"[/x]{name}[/]"')
    path = tmp_path / "g.json"
    path.write_text(text)

    async def visit() -> None:
        app = ExplorerApp(load(path), path, devices=[NumpyDevice()], options=Options(tune=False, tune_cache=False))
        async with app.run_test(size=(120, 40)) as pilot:
            for key in "1234567":
                await pilot.press(key)
                await pilot.pause(0.2)
            await app.workers.wait_for_complete()
            await pilot.pause(0.5)
            # where a tensor went, back to the tensors of its kernel, the timeline, a pin's what-if: all name tensors
            for keys in (["1", "down", "down", "enter"], ["4", "down", "down", "down", "t"], ["T"], ["escape"],
                         ["3", "d"], ["2", "enter"], ["5"]):
                await pilot.press(*keys)
                await pilot.pause(0.2)
        assert app._exception is None

    asyncio.run(visit())


# -- 3: numbers out of range -------------------------------------------------------------------------

@pytest.mark.parametrize(("init", "where", "message"), [
    ({"kind": "uniform", "seed": 1, "low": 1, "high": -1}, "low", "low must be <= high"),
    ({"kind": "normal", "seed": 1, "std": 1e308}, "std", r"at most 1e\+300"),
    ({"kind": "normal", "seed": 1, "mean": 10**400}, "mean", "an integer of 1329 bits"),
    ({"kind": "full", "value": 10**320}, "value", "beyond any float or integer dtype"),
])
def test_init_parameters_out_of_range(init, where, message):
    with pytest.raises(InitError, match=message) as info:
        loads(json.dumps(_unary(init)).replace("Infinity", "1e400"))
    assert info.value.location == f"inputs.x.init.{where}"


def test_an_infinite_literal_bound_is_refused_where_it_is_written():
    text = json.dumps(_unary({"kind": "uniform", "seed": 1, "low": 0.5, "high": 1})).replace("0.5", "-1e400")
    with pytest.raises(FormatError, match="too large for f64") as info:
        loads(text)
    assert info.value.location == f"line 1 column {text.index('-1e400') + 1}"


def test_a_negative_zero_std_is_zero():
    program = loads(json.dumps(_unary({"kind": "normal", "seed": 1, "std": -0.0})))
    assert not program.input_values()["x"].any()


def test_a_huge_shape_is_refused_with_a_printable_message():
    with pytest.raises(ShapeError, match=r"needs about 2\^\d+ bytes: more than the limit") as info:
        loads(json.dumps(_unary("zeros", [10**320, 10**320])))
    assert info.value.location == "inputs.x.shape"


@pytest.mark.parametrize(("cost", "shown"), [("1" + "0" * 400, "an integer of 1329 bits"), ("1.7e308", r"1.7e\+308"),
                                             ("-1", "-1")])
def test_egraph_costs_out_of_range(cost, shown):
    with pytest.raises(FormatError, match=f"finite cost >= 0 and <= 1e\\+100, got \"?{shown}") as info:
        loads_serialized('{"nodes": {"a": {"op": "x", "eclass": "A", "cost": COST}}}'.replace("COST", cost), "e.json")
    assert info.value.location == "nodes.a.cost"


def test_an_egraph_without_roots_is_refused():
    cyclic = {"nodes": {"a": {"op": "f", "eclass": "A", "children": ["b"]},
                        "b": {"op": "g", "eclass": "B", "children": ["a"]}}}
    with pytest.raises(FormatError, match="no root class") as info:
        loads_serialized(json.dumps(cyclic), "e.json")
    assert info.value.location == "root_eclasses"
    with pytest.raises(FormatError, match="no nodes") as info:
        loads_serialized('{"nodes": {}}', "e.json")
    assert info.value.location == "nodes"


# -- 4: memory ----------------------------------------------------------------------------------------

def test_a_long_description_is_scanned_in_constant_memory():
    import tracemalloc

    text = json.dumps({**MLP, "description": "d" * 5_000_000})
    tracemalloc.start()
    loads(text)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 20 * len(text)  # the depth scan used to take ~125 bytes per character


def test_many_repeated_outputs_are_refused_quickly():
    began = time.perf_counter()
    with pytest.raises(GraphError, match=r"'y' is listed twice \(also outputs\[0\]\)") as info:
        loads(json.dumps({**MLP, "outputs": ["y"] * 100_000}))
    assert info.value.location == "outputs[1]" and time.perf_counter() - began < 5


# -- 7: .npy paths ------------------------------------------------------------------------------------

def _npy_graph(folder: Path, path: str, dtype: str = "f32") -> Path:
    graph = folder / "g.json"
    graph.write_text(json.dumps(_unary({"kind": "npy", "path": path}, dtype=dtype)))
    return graph


@pytest.mark.parametrize("path", ["/etc/passwd", "/etc/shadow", "../outside.npy", "/no/such/file.npy", "out.npy"])
def test_npy_paths_stay_in_the_graphs_folder(tmp_path, path):
    folder = tmp_path / "g"
    folder.mkdir()
    np.save(tmp_path / "outside.npy", np.ones((8, 16), np.float32))
    (folder / "out.npy").symlink_to(tmp_path / "outside.npy")
    with pytest.raises(InitError, match="is outside the graph's folder") as info:
        load(_npy_graph(folder, path))
    assert info.value.location == "inputs.x.init.path"  # the same message whether the file exists or not
    assert load(_npy_graph(folder, path), SizeLimits(npy_anywhere=True)) if path.endswith("outside.npy") else True


@pytest.mark.parametrize(("make", "path"), [
    (lambda f: (f / "loop.npy").symlink_to(f / "loop.npy"), "loop.npy"),
    (lambda f: None, "n" * 5000),
    (lambda f: None, "a\x00b.npy"),
    (lambda f: os.mkfifo(f / "fifo.npy"), "fifo.npy"),
])
def test_unopenable_npy_paths_are_located(tmp_path, make, path):
    make(tmp_path)
    with pytest.raises(InitError) as info:
        load(_npy_graph(tmp_path, path))
    assert info.value.location == "inputs.x.init.path"


def test_npy_integers_that_do_not_fit_are_refused(tmp_path):
    np.save(tmp_path / "wide.npy", np.full((8, 16), 2**40, np.int64))
    with pytest.raises(InitError, match="do not fit dtype i32"):
        load(_npy_graph(tmp_path, "wide.npy", "i32"))


def test_a_replaced_npy_is_checked_again_when_the_program_runs(tmp_path):
    np.save(tmp_path / "w.npy", np.ones((8, 16), np.float32))
    program = load(_npy_graph(tmp_path, "w.npy"))
    np.save(tmp_path / "w.npy", np.ones((3,), np.float32))
    with pytest.raises(InitError, match=r"holds shape \[3\]") as info:
        program.input_values()
    assert info.value.location == "inputs.x.init.path"


# -- 5: caches ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("make", [lambda p: os.mkfifo(p), lambda p: p.symlink_to("/dev/zero"), lambda p: p.mkdir()])
def test_read_bounded_never_reads_a_fifo_a_device_or_a_folder(tmp_path, make):
    path = tmp_path / "c.json"
    make(path)
    with pytest.raises(UnsafeFileError, match="not a regular file"):
        read_bounded(path, 1 << 20)


def test_read_bounded_refuses_a_file_over_its_limit(tmp_path):
    path = tmp_path / "c.json"
    path.write_bytes(b"x" * 100)
    assert read_bounded(path, 100) == b"x" * 100
    with pytest.raises(UnsafeFileError, match="100 bytes, more than the 99"):
        read_bounded(path, 99)


def _tuned(cache_dir: Path):
    from engine.devices import NumpyDevice

    device = NumpyDevice()
    cache = TuneCache(cache_dir)
    first = tune(matmul(), device, 2, cache)
    return device, cache.path(device), first


@pytest.mark.parametrize("damage", ["not-utf8", "fifo", "dev-zero", "negative-seconds", "huge-tile", "string-seconds"])
def test_a_damaged_tuning_cache_is_reported_and_rebuilt(tmp_path, damage):
    device, path, _ = _tuned(tmp_path)
    data = json.loads(path.read_text())
    entry = next(iter(data["entries"].values()))
    if damage in ("not-utf8", "fifo", "dev-zero"):
        path.unlink()
        {"not-utf8": lambda: path.write_bytes(b'{"format": 1, "\xff": 2}'), "fifo": lambda: os.mkfifo(path),
         "dev-zero": lambda: path.symlink_to("/dev/zero")}[damage]()
    else:
        entry.update({"negative-seconds": {"seconds": -1}, "string-seconds": {"seconds": "x"},
                      "huge-tile": {"best": {**entry["best"], "tile": 2**40}}}[damage])
        path.write_text(json.dumps(data))
    with pytest.warns(CacheWarning, match="corrupt"):
        again = tune(matmul(), device, 2, TuneCache(tmp_path))
    assert again.cache == "corrupt" and again.ok and again.seconds >= 0
    assert path.is_file() and json.loads(path.read_text())["format"] == 1  # rebuilt, a regular file again
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tune(matmul(), device, 2, TuneCache(tmp_path)).cache == "hit"


GOOD_WAY = [[4096, 1e-5], [1 << 24, 2e-3]]


@pytest.mark.parametrize("way", [[[4096, -1.0], [1 << 24, 2e-3]], [[4096, 1e-5], [1 << 24, 1e-5]],
                                 [[4096, 2e-3], [1 << 24, 1e-5]], [[1 << 24, 1e-5], [4096, 2e-3]],
                                 [[4096, 10**400], [1 << 24, 2e-3]], [[4096, True], [1 << 24, 2e-3]],
                                 [[4096, 1e-5]], [[4096, 1e-5, 0], [1 << 24, 2e-3]], {"overhead": 1e-5}, None])
@pytest.mark.parametrize("bad", ["up", "down"])
def test_invalid_links_are_dropped_and_measured_again(tmp_path, monkeypatch, way, bad):
    from engine.devices import NumpyDevice

    monkeypatch.setattr(links, "measure", functools.partial(links.measure, sizes=(1 << 12, 1 << 16)))
    entry = {"up": GOOD_WAY, "down": GOOD_WAY, bad: way}
    (tmp_path / "links.json").write_text(json.dumps({"format": links.FORMAT, "links": {"numpy|x": entry}}))
    with pytest.warns(CacheWarning, match="invalid entries"):
        link = LinkCache(tmp_path).link(NumpyDevice())  # measured again (host pool)
    for one in (link.up, link.down):
        assert one.overhead >= 0 and 0 < one.bandwidth < float("inf")


def test_links_of_an_older_layout_are_measured_again_without_a_warning(tmp_path, monkeypatch):
    from engine.devices import NumpyDevice
    from engine.tuning.cache import driver

    monkeypatch.setattr(links, "measure", functools.partial(links.measure, sizes=(1 << 12, 1 << 16)))
    device = NumpyDevice()
    old = {f"{device.name}|{driver(device)}|{device.copies}": {"up": {"overhead": 1e-5, "bandwidth": 1e9},
                                                               "down": {"overhead": 1e-5, "bandwidth": 1e9}}}
    (tmp_path / "links.json").write_text(json.dumps({"format": 2, "links": old}))
    with warnings.catch_warnings():
        warnings.simplefilter("error", CacheWarning)
        link = LinkCache(tmp_path).link(device)
    assert link.up != Link.line(1e-5, 1e9)
    assert json.loads((tmp_path / "links.json").read_text())["format"] == links.FORMAT


def test_a_corrupt_native_object_is_rebuilt_not_loaded(tmp_path):
    from engine.devices import native

    found = native.find_compiler(tmp_path)
    if isinstance(found, str):
        pytest.skip(found)
    text = "int zx_f(void) { return 7; }\n"
    path, built = native.build(found, text, tmp_path)
    assert built and native.build(found, text, tmp_path) == (path, False)
    good = path.read_bytes()
    assert path.with_suffix(".sha256").read_text() == hashlib.sha256(good).hexdigest()
    path.write_bytes(good[: len(good) // 2])  # loading this would kill the process with SIGBUS
    with pytest.warns(CacheWarning, match="do not match its checksum"):
        assert native.build(found, text, tmp_path) == (path, True)
    assert path.read_bytes() == good
    path.unlink()
    os.mkfifo(path)
    with pytest.warns(CacheWarning, match="not a regular file"):
        assert native.build(found, text, tmp_path) == (path, True)


def test_a_hanging_compiler_is_given_up_on(tmp_path, monkeypatch):
    from engine.devices import native

    slow = tmp_path / "slowcc"
    slow.write_text("#!/bin/sh\nsleep 60\n")
    slow.chmod(0o755)
    monkeypatch.setenv(native.ENV, str(slow))
    monkeypatch.setattr(native, "PROBE_SECONDS", 1.0)
    began = time.monotonic()
    found = native.find_compiler(tmp_path / "cache")
    assert isinstance(found, str) and "does not work" in found and time.monotonic() - began < 5


# -- 6: outputs ---------------------------------------------------------------------------------------

def test_outputs_are_checked_before_compiling(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert "is not a folder" in output_problem(blocker / "sub", folder=True, force=False)
    assert "exists and is not a folder" in output_problem(blocker, folder=True, force=True)
    assert "is a folder" in output_problem(tmp_path, folder=False, force=True)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert "not a regular file" in output_problem(fifo, folder=False, force=True)
    assert "cannot write into /proc" in output_problem(Path("/proc/zx/out"), folder=True, force=False)
    assert output_problem(tmp_path / "new" / "out", folder=True, force=False) is None
    assert output_problem(blocker, folder=False, force=True) is None


def test_write_atomic_replaces_only_regular_files(tmp_path):
    node = device_node(tmp_path)  # never the machine's own /dev/full: a regression would replace it
    with pytest.raises(OSError, match="not a regular file"):
        write_atomic(node, "x")
    assert not node.is_file()


def test_write_atomic_removes_what_killed_writers_left(tmp_path):
    target = tmp_path / "r.md"
    stale, fresh = tmp_path / ".r.md.abc.tmp", tmp_path / ".r.md.def.tmp"
    for p in (stale, fresh):
        p.write_text("half")
    past = time.time() - STALE_SECONDS - 10
    os.utime(stale, (past, past))
    write_atomic(target, "whole")
    assert target.read_text() == "whole" and not stale.exists() and fresh.exists()


def test_serialize_onto_a_device_is_refused_before_compiling(tmp_path, capsys):
    graph = str(sample_graphs.path("mlp.small"))
    began = time.perf_counter()
    node = device_node(tmp_path)
    assert main(["serialize", graph, "-o", str(node), "--force"]) == 2
    assert f"{node}: is not a regular file" in capsys.readouterr().err and time.perf_counter() - began < 2
    assert not node.is_file()


def test_a_full_disk_is_one_located_line(tmp_path, capsys):
    import resource
    import signal
    import subprocess
    import sys

    def small_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (1024, 1024))

    out = tmp_path / "out.json"
    run = subprocess.run([sys.executable, "-m", "zyx_explorer", "serialize", str(sample_graphs.path("mlp.small")),
                          "-o", str(out), "--no-tune", "--no-opencl", "--no-native"], capture_output=True, text=True,
                         preexec_fn=small_files, cwd=Path(__file__).parents[1], timeout=300)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert f"error: {out}: cannot be written (File too large)" in run.stderr and not out.exists()


def test_a_program_bigger_than_the_memory_available_is_refused_before_running(tmp_path, capsys):
    from engine.program.memory import available_bytes, check_memory, needed_bytes

    program = loads(json.dumps(_unary("zeros", [1024, 1024])))
    assert needed_bytes(program) == 4 * 4 * 2**20  # the input twice, the relu as the plan's output and as a value
    check_memory(program, "g.json", available=4 * 4 * 2**20)
    with pytest.raises(GraphError, match=r"needs at least 16.0 MiB .* only 16.0 MiB") as info:
        check_memory(program, "g.json", available=4 * 4 * 2**20 - 1)
    assert str(info.value).startswith("g.json: inputs: ")
    assert (available_bytes() or 1) > 0
    path = tmp_path / "big.json"
    chain = [{"id": f"s{i}", "op": "add", "args": ["a", f"s{i - 1}" if i else "b"]} for i in range(10)]
    path.write_text(json.dumps({"inputs": {k: {"shape": [4 << 30]} for k in "abc"}, "nodes": chain,
                                "outputs": ["s9"]}))
    assert main(["check", str(path)]) == 0  # validating needs no memory
    assert main(["check", "--semantic", str(path)]) == 2  # 2 x 32 GiB of inputs, 10 x 16 GiB of values
    assert "of memory are available" in capsys.readouterr().err


def test_a_plan_that_runs_out_of_memory_is_one_message_not_a_traceback(capsys, monkeypatch):
    """The check before running is a lower bound: a plan's step may still find no memory (threads' stacks and
    arenas count against ``ulimit -v``; found by the fuzz harness: a 16000 x 16000 softmax under 4 GiB)."""
    import engine.pipeline as pipeline
    from engine.plan import StepError

    def out_of_memory(plan, devices, inputs, timed=True):
        try:
            raise MemoryError("Unable to allocate 977. MiB for an array")
        except MemoryError as e:
            raise StepError(0, plan.steps[0], "host", e) from e

    monkeypatch.setattr(pipeline, "execute", out_of_memory)
    path = str(sample_graphs.path("mlp.small"))
    assert main(["compile", path, "--no-tune", "--no-opencl", "--no-native"]) == 2
    err = capsys.readouterr().err
    assert f"error: {path}: out of memory: the program needs more memory than this machine has free" in err

    def broken(plan, devices, inputs, timed=True):
        raise StepError(0, plan.steps[0], "host", ValueError("a bug"))

    monkeypatch.setattr(pipeline, "execute", broken)
    with pytest.raises(StepError):  # any other failure of a step is not dressed up as a lack of memory
        main(["compile", path, "--no-tune", "--no-opencl", "--no-native"])


@pytest.mark.parametrize("command", [["check"], ["extract"], []])
def test_a_fifo_or_a_device_as_the_file_is_refused_not_read(tmp_path, capsys, command, monkeypatch):
    import zyx_explorer.cli

    monkeypatch.setattr(zyx_explorer.cli, "_need_terminal", lambda: None)  # never reached: the load fails first
    fifo = tmp_path / "g.json"
    os.mkfifo(fifo)
    for path in (str(fifo), "/dev/zero"):
        assert main([*command, path]) == 2
        assert f"error: {path}: not " in capsys.readouterr().err


def test_export_exits_3_when_the_plan_computes_wrong_values(tmp_path, capsys, monkeypatch):
    import zyx_explorer.cli
    from engine.devices import NumpyDevice

    class OffByOne(NumpyDevice):
        """Every kernel's outputs come out one too big: the plan disagrees with the reference."""

        def launch(self, compiled, inputs, outputs):
            seconds = super().launch(compiled, inputs, outputs)
            for out in outputs:
                out += 1
            return seconds

    monkeypatch.setattr(zyx_explorer.cli, "_devices", lambda args, err: [OffByOne()])
    out = tmp_path / "out"
    assert main(["export", str(sample_graphs.path("mlp.small")), "-o", str(out), "--no-tune", "--format", "dot"]) == 3
    err = capsys.readouterr().err
    assert "verification failed" in err and "differ from the reference" in err
    assert "FAILED" in (out / "report.md").read_text()  # the files are written all the same

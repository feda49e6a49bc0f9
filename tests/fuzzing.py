"""The robustness fuzz harness: the ``zyx-explore`` command fed what an attacker or a clumsy user would feed it.

Categories (each case is deterministic given its seed):

- ``check``: structure-aware mutations of the sample graphs (hostile strings: rich markup, lone surrogates,
  long text; numbers out of range; .npy paths out of the folder, to devices, FIFOs, symlink loops; deep
  nesting; duplicated outputs), run through ``check`` (some ``check --semantic``);
- ``extract``: mutations of egraph-serialize files (costs of 10**400 or near 1.7e308, no roots, cycles,
  hostile names) through ``extract``;
- ``compile``: mutations of numbers only (so more programs load), through ``export`` without tuning;
- ``cache``: a corrupt native object, tuning cache or links.json (truncated, garbage, not UTF-8, a FIFO,
  a link to /dev/zero, out-of-range entries), each run twice in fresh processes: the first run must say
  so, the second must find the cache rebuilt;
- ``output``: output locations that cannot be written (a file's subfolder, /proc, a device node of our own, a FIFO, a folder for
  a file, a full disk through RLIMIT_FSIZE) and stale temporary files left by a killed writer.

check, extract and compile cases run in worker processes (one import for many cases) under a memory cap
and a per-case timeout; a worker that dies is a crash, one that does not answer in time a hang, and it
is replaced.  An outcome is ``ok`` (exit 0, or 1/3: a finding, not a failure), ``located`` (exit 2 with
one ``error:`` paragraph naming the file), or a failure: ``traceback``, ``unlocated``, ``hang``,
``crash``, ``silent`` (a cache fault nobody was told of, or not rebuilt).

    python -m tests.fuzzing --cases 1000          # by hand: 1000 per category (cache/output: all scenarios)
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import io
import json
import os
import random
import re
import resource
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
MEMORY_CAP = 4 << 30
CASE_SECONDS = 60.0
COMMAND_SECONDS = 300.0
"""A whole command of a cache or output scenario (a fresh process, tuning included)."""
SMALL = ["mlp.small", "attention.small", "conv_relu.small", "layernorm.small", "softmax.small", "swiglu_mlp.small"]
FAILURES = ("traceback", "unlocated", "hang", "crash", "silent")

HOSTILE_STRINGS = ["[/x]", "[/]", "[b]bold", "[link=http://evil.example]x[/link]", "<b>x</b>\n# h", "\udc00",
                   "a\udcffb", "x" * 70_000, "", " ", "\u202e", "$(rm -rf ~)", "%s%n", "../../etc/passwd", "\\"]
HOSTILE_NUMBERS = [0, -1, 1, 2**31, 2**40, 2**63, -(2**63), 10**320, 10**4000, float("nan"), float("inf"),
                   -float("inf"), 1.7e308, -1.7e308, 5e-324, -0.0, 0.5, 1e300]
NPY_PATHS = ["/etc/passwd", "/etc/shadow", "../../../../etc/hostname", "/dev/zero", "a\x00b.npy", "n" * 5000,
             "loop.npy", "fifo.npy", "outside.npy", "w.npy", "wide.npy", "missing.npy", "sub", "/"]


# -- mutations ---------------------------------------------------------------------------------------

def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list) and len(value) <= 64:
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


def _set(doc: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    box = doc
    for p in path[:-1]:
        box = box[p]
    box[path[-1]] = value
    return doc


def _get(doc: Any, path: tuple) -> Any:
    for p in path:
        doc = doc[p]
    return doc


def hostile_value(rng: random.Random) -> Any:
    kind = rng.randrange(8)
    if kind == 0:
        return rng.choice(HOSTILE_STRINGS)
    if kind == 1:
        return rng.choice(HOSTILE_NUMBERS)
    if kind == 2:
        return {"kind": "npy", "path": rng.choice(NPY_PATHS)}
    if kind == 3:
        return rng.choice([{"kind": "uniform", "seed": 1, "low": 1.0, "high": -1.0},
                           {"kind": "uniform", "seed": 1, "low": -float("inf"), "high": 1.0},
                           {"kind": "normal", "seed": 1, "std": 1e308}, {"kind": "normal", "seed": 10**40},
                           {"kind": "arange", "start": 1e308, "step": 1e308}, {"kind": "full", "value": 10**320}])
    if kind == 4:
        return [rng.choice([10**320, 2**40, 0, 1, -1]) for _ in range(rng.randrange(1, 5))]
    if kind == 5:
        depth = rng.choice([5, 150, 5000])
        return json.loads("[" * depth + "]" * depth) if depth < 900 else "[" * depth  # a text splice below
    if kind == 6:
        return rng.choice([None, True, {}, [], [[]], {"": None}])
    return rng.random() * 10 ** rng.randrange(-5, 6)


def mutate(doc: Any, rng: random.Random, numbers_only: bool = False) -> Any:
    """``doc`` with 1-3 random changes; ``numbers_only`` keeps its structure (numbers changed, a few at a time)."""
    doc = copy.deepcopy(doc)
    for _ in range(rng.randint(1, 3)):
        paths = _paths(doc)
        if numbers_only:
            numeric = [p for p in paths if p and isinstance(_get(doc, p), int | float) and not isinstance(_get(doc, p), bool)]
            if numeric:
                where = rng.choice(numeric)
                old = _get(doc, where)
                doc = _set(doc, where, rng.choice([old * 2, old + 1, max(old - 1, 0), 0, 1, old * 1000, -old]))
            continue
        where = rng.choice(paths)
        action = rng.randrange(6)
        if action == 0 and where:
            parent = _get(doc, where[:-1])
            del parent[where[-1]]
        elif action == 1 and where and isinstance(where[-1], str):  # rename a key to a hostile string
            parent = _get(doc, where[:-1])
            parent[rng.choice(HOSTILE_STRINGS)] = parent.pop(where[-1])
        elif action == 2 and isinstance(_get(doc, where), list) and _get(doc, where):
            box = _get(doc, where)
            box.extend([box[0]] * rng.choice([1, 1, 1000]))  # repeated outputs, args, ...
        else:
            doc = _set(doc, where, hostile_value(rng))
    return doc


def graph_case(rng: random.Random, folder: Path, numbers_only: bool = False) -> Path:
    """A mutated sample graph in ``folder`` (beside the .npy files and links its paths may name)."""
    import sample_graphs

    doc = json.loads(sample_graphs.path(rng.choice(SMALL)).read_text())
    if rng.random() < 0.3 and not numbers_only:
        doc[rng.choice(["name", "description"])] = rng.choice(HOSTILE_STRINGS)
    text = json.dumps(mutate(doc, rng, numbers_only))
    path = folder / f"case{rng.randrange(10**9)}.json"
    path.write_text(text.replace('"' + "[" * 5000 + '"', "[" * 5000))
    return path


SERIAL_BASES: list[dict] = []


def serial_bases() -> list[dict]:
    """egraph-serialize documents to mutate: the interop tests' hand-made e-graphs and an MLP's kernelized one."""
    if not SERIAL_BASES:
        from tests.interop.graphs import CYCLE, SHARING

        SERIAL_BASES.extend([SHARING, CYCLE, {"nodes": {"a": {"op": "x", "eclass": "A"}}}])
    return SERIAL_BASES


def serial_case(rng: random.Random, folder: Path) -> Path:
    doc = mutate(rng.choice(serial_bases()), rng)
    if rng.random() < 0.3 and isinstance(doc, dict) and isinstance(doc.get("nodes"), dict) and doc["nodes"]:
        node = doc["nodes"][rng.choice(list(doc["nodes"]))]
        if isinstance(node, dict):
            node["cost"] = rng.choice([10**400, 1.7e308, 1e308, -1, float("nan"), 2**1100])
    if rng.random() < 0.1 and isinstance(doc, dict):
        doc["root_eclasses"] = []
    path = folder / f"egraph{rng.randrange(10**9)}.json"
    path.write_text(json.dumps(doc))
    return path


def prepare_folder(folder: Path) -> None:
    """What the hostile .npy paths name: a FIFO, a symlink loop, links out of the folder, a wide int64 file."""
    import numpy as np

    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "w.npy", np.ones((16, 32), np.float32))
    np.save(folder / "wide.npy", np.full((8, 16), 2**40, np.int64))
    outside = folder.parent / f"{folder.name}-outside.npy"
    np.save(outside, np.ones((8, 16), np.float32))
    for name, target in (("outside.npy", outside), ("loop.npy", folder / "loop.npy")):
        with contextlib.suppress(FileExistsError):
            (folder / name).symlink_to(target)
    with contextlib.suppress(FileExistsError):
        os.mkfifo(folder / "fifo.npy")
    (folder / "sub").mkdir(exist_ok=True)


# -- running one case in a worker ---------------------------------------------------------------------

def argv_for(category: str, rng: random.Random, folder: Path) -> list[str]:
    if category == "check":
        path = graph_case(rng, folder)
        semantic = ["--semantic", "--seconds", "2", "--nodes", "2000"] if rng.random() < 0.1 else []
        return ["check", str(path), *semantic]
    if category == "extract":
        return ["extract", str(serial_case(rng, folder)), "--time-limit", "2", *(["--json"] if rng.random() < 0.3 else [])]
    if category == "compile":
        path = graph_case(rng, folder, numbers_only=rng.random() < 0.7)
        return ["export", str(path), "-o", str(folder / "out"), "--force", "--no-tune", "--no-opencl", "--no-native",
                "--format", "dot"]
    raise ValueError(category)


def classify(argv: list[str], rc: int | None, out: str, err: str, escaped: str = "") -> str:
    """The outcome of a finished command (see the module docstring)."""
    if escaped or "Traceback (most recent call last)" in out + err:
        return "traceback"
    if rc in (0, 1, 3):
        return "ok"
    if rc == 2:
        errors = [line for line in err.splitlines() if line.startswith("error: ")]
        named = [a for a in argv[1:] if not a.startswith("-")]
        located = len(errors) >= 1 and all(any(n in line for n in named) for line in errors)
        return "located" if located else "unlocated"
    return "crash"


def replay(category: str, seed: int, folder: Path) -> list[str]:
    """The argv of one case, its files written into ``folder`` (to reproduce a failure by hand)."""
    prepare_folder(folder)
    return argv_for(category, random.Random(seed), folder)


def run_in_process(argv: list[str]) -> dict[str, Any]:
    """``zyx-explore argv`` in this process, its output captured; an exception escaping it is recorded."""
    from zyx_explorer.cli import main

    out, err = io.StringIO(), io.StringIO()
    escaped = ""
    rc: int | None = None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except BaseException as e:  # the harness records whatever escapes
            escaped = f"{type(e).__name__}: {str(e)[:300]}"
    try:  # a terminal would have to encode it: a lone surrogate printed is a UnicodeEncodeError there
        (out.getvalue() + err.getvalue()).encode("utf-8")
    except UnicodeEncodeError as e:
        escaped = escaped or f"UnicodeEncodeError when printed: {e}"
    outcome = classify(argv, rc, out.getvalue(), err.getvalue(), escaped)
    return {"outcome": outcome, "rc": rc, "escaped": escaped, "err": err.getvalue()[-600:]}


def worker() -> None:
    """Read (category, seed, folder) lines on stdin; answer one JSON line per case."""
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))
    for line in sys.stdin:
        category, seed, folder = json.loads(line)
        rng = random.Random(seed)
        argv = argv_for(category, rng, Path(folder))
        result = run_in_process(argv)
        sys.__stdout__.write(json.dumps({"seed": seed, "argv": [a[:200] for a in argv], **result}) + "\n")
        sys.__stdout__.flush()


class Workers:
    """One worker process, replaced when it crashes or hangs."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.proc: subprocess.Popen | None = None

    def _start(self) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "tests.fuzzing", "--worker"], cwd=ROOT, env=self.env,
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                start_new_session=True)

    def run(self, category: str, seed: int, folder: Path, timeout: float) -> dict[str, Any]:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps([category, seed, str(folder)]) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        if line:
            return json.loads(line)
        hung = self.proc.poll() is None
        self.close()
        code = self.proc.returncode
        return {"outcome": "hang" if hung else "crash", "rc": code, "argv": [category, str(seed)],
                "err": f"no answer in {timeout:g} s" if hung else f"worker died ({code})"}

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


# -- cache and output scenarios (fresh processes) -----------------------------------------------------

def cli(argv: list[str], env: dict[str, str], timeout: float = COMMAND_SECONDS, fsize: int | None = None) -> tuple[str, int | None, str]:
    """Run ``python -m zyx_explorer argv``: (outcome, exit code, stderr)."""
    def limits() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))
        if fsize is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes beyond the limit fail with EFBIG: a full disk
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))

    try:
        run = subprocess.run([sys.executable, "-m", "zyx_explorer", *argv], cwd=ROOT, env=env, capture_output=True,
                             text=True, timeout=timeout, preexec_fn=limits, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return "hang", None, ""
    if run.returncode < 0:
        return "crash", run.returncode, run.stderr
    return classify(argv, run.returncode, run.stdout, run.stderr), run.returncode, run.stderr


def _tuning_file(cache: Path, device: str) -> Path:
    return cache / "autotune" / f"{device}.json"


def _corrupt(path: Path, how: str) -> None:
    """Damage the cache file ``path`` in the way ``how`` names."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = path.read_bytes() if path.is_file() else b""
    path.unlink(missing_ok=True)
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "garbage":
        path.write_bytes(bytes(random.Random(len(data)).randrange(256) for _ in range(max(len(data), 4096))))
    elif how == "not-utf8":
        path.write_bytes(b'{"format": 1, "entries": {"\xff\xfe": 1}}')
    elif how == "fifo":
        os.mkfifo(path)
    elif how == "dev-zero":
        path.symlink_to("/dev/zero")
    elif how == "folder":
        path.mkdir()
    else:
        raise ValueError(how)


def _entries_edited(path: Path, edit) -> None:
    data = json.loads(path.read_text())
    for entry in data["entries"].values():
        edit(entry)
    path.write_text(json.dumps(data))


ENTRY_EDITS = {
    "tile-2^40": lambda e: e["best"].update(tile=2**40),
    "unroll-10^7": lambda e: e["best"].update(unroll=10**7),
    "seconds-negative": lambda e: e.update(seconds=-1),
    "seconds-string": lambda e: e.update(seconds="fast"),
    "trials-not-a-list": lambda e: e.update(trials=7),
}
LINK_EDITS = {
    "overhead-negative": {"overhead": -1.0, "bandwidth": 1e9},
    "bandwidth-zero": {"overhead": 0.0, "bandwidth": 0},
    "overhead-10^400": {"overhead": 10**400, "bandwidth": 1e9},
    "overhead-string": {"overhead": "x", "bandwidth": 1e9},
}
FILE_FAULTS = ["truncated", "empty", "garbage", "not-utf8", "fifo", "dev-zero", "folder"]


def cache_scenarios() -> list[tuple[str, str, Any]]:
    """(target, fault, detail): every corruption of every cache file kind."""
    out = [("native", f, None) for f in ("truncated", "empty", "garbage", "fifo", "dev-zero", "checksum-missing")]
    out += [("tuning", f, None) for f in FILE_FAULTS] + [("tuning", k, v) for k, v in ENTRY_EDITS.items()]
    out += [("links", f, None) for f in FILE_FAULTS] + [("links", k, v) for k, v in LINK_EDITS.items()]
    return out


def run_cache_scenario(target: str, fault: str, detail: Any, work: Path, base_env: dict[str, str]) -> dict[str, Any]:
    """Build a good cache, damage it, run twice: the first run must say so, the second must find it rebuilt."""
    cache = work / "cache"
    env = {**base_env, "ZYX_EXPLORE_CACHE": str(cache)}
    # a tuning cache is read only for the kernels a run tunes, which follow measured times: one kernel on one
    # device (elementwise on numpy) is tuned, and so read, by every run
    graph = str(ROOT / "sample_graphs" / f"{'elementwise' if target == 'tuning' else 'softmax'}.small.json")
    devices = {"links": [], "tuning": ["--no-opencl", "--no-native"]}.get(target, ["--no-opencl"])
    argv = ["export", graph, "-o", str(work / "out"), "--force", "--format", "dot", "--tune-variants", "2", *devices]
    first = cli(argv, env)
    if first[0] not in ("ok", "located"):
        return {"outcome": first[0], "err": "building the good cache: " + first[2][-400:]}
    if target == "native":  # every object: those of variants the second run does not load are never read
        for victim in (cache / "native").glob("*.so"):
            if fault == "checksum-missing":
                victim.with_suffix(".sha256").unlink(missing_ok=True)
            else:
                _corrupt(victim, fault)
    elif target == "tuning":
        victim = _tuning_file(cache, "numpy")
        _entries_edited(victim, detail) if callable(detail) else _corrupt(victim, fault)
    else:
        victim = cache / "autotune" / "links.json"
        if not victim.exists():
            return {"outcome": "ok", "err": "no device with its own pool: no links.json (skipped)"}
        if detail is not None:
            data = json.loads(victim.read_text())
            data["links"] = {k: detail for k in data["links"]}
            victim.write_text(json.dumps(data))
        else:
            _corrupt(victim, fault)
    results = [cli(argv, env) for _ in range(2)]
    for outcome, _, err in results:
        if outcome != "ok":
            return {"outcome": outcome, "err": err[-600:]}
    said = "corrupt" in results[0][2] or "invalid" in results[0][2] or "unreadable" in results[0][2] \
        or "not a regular file" in results[0][2]
    if not said:
        return {"outcome": "silent", "err": "the first run did not say the cache was damaged: " + results[0][2][-300:]}
    again = _warned_files(results[0][2]) & _warned_files(results[1][2])
    if "native device not offered" in results[1][2] or again:
        return {"outcome": "silent", "err": "not rebuilt: the second run still degraded: " + results[1][2][-300:]}
    return {"outcome": "ok", "err": ""}


def _warned_files(stderr: str) -> set[str]:
    """The cache files a run's warnings name.  A damaged file the first run did not read (a native object of a
    variant it did not load) is reported when a later run first reads it: only a file reported twice was not
    rebuilt."""
    return {path for line in stderr.splitlines() if line.startswith("warning:")
            for path in re.findall(r"/\S+?(?=[\s:;,]|$)", line)}


def output_scenarios(work: Path) -> list[tuple[str, list[str], int | None]]:
    """(name, argv, RLIMIT_FSIZE) of outputs that cannot be written; each must be a located exit 2, nothing left."""
    graph = str(ROOT / "sample_graphs" / "mlp.small.json")
    blocker = work / "a-file"
    blocker.write_text("x")
    full = work / "full"
    fifo = work / "fifo"
    os.mkfifo(fifo)
    compile_args = ["--no-tune", "--no-opencl", "--no-native"]
    return [
        ("export into a file's subfolder", ["export", graph, "-o", str(blocker / "sub"), *compile_args], None),
        ("export onto a file", ["export", graph, "-o", str(blocker), *compile_args], None),
        ("export under /proc", ["export", graph, "-o", "/proc/zx-fuzz/out", *compile_args], None),
        ("export to a full disk", ["export", graph, "-o", str(full), "--format", "dot", *compile_args], 2048),
        ("serialize onto a folder", ["serialize", graph, "-o", str(work), "--force", *compile_args], None),
        ("serialize onto a device", ["serialize", graph, "-o", str(device_node(work)), "--force", *compile_args], None),
        ("serialize onto a FIFO", ["serialize", graph, "-o", str(fifo), "--force", *compile_args], None),
        ("serialize into a file's subfolder", ["serialize", graph, "-o", str(blocker / "x.json"), *compile_args], None),
        ("serialize to a full disk", ["serialize", graph, "-o", str(work / "s.json"), *compile_args], 1024),
    ]


def device_node(work: Path) -> Path:
    """A character device of our own (``/dev/full``'s numbers) when we may make one, else a FIFO: the machine's
    own devices are never the target, so a build that replaces its output node damages nothing outside ``work``."""
    path = work / "device"
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 7))
    except OSError:  # not root
        os.mkfifo(path)
    return path


def run_output_scenario(argv: list[str], fsize: int | None, env: dict[str, str]) -> dict[str, Any]:
    nodes = [Path(a) for a in argv if Path(a).name in ("device", "fifo")]
    outcome, _, err = cli(argv, env, fsize=fsize)
    changed = [str(p) for p in nodes if stat.S_ISREG(os.lstat(p).st_mode)]
    if changed:
        return {"outcome": "crash", "err": f"replaced {changed} by a regular file"}
    if outcome == "ok":
        return {"outcome": "unlocated", "err": "exit 0 for an output that cannot be written"}
    return {"outcome": outcome, "err": err[-400:]}


def stale_temporaries(work: Path, env: dict[str, str]) -> dict[str, Any]:
    """A killed writer's ``.report.md.*.tmp`` (old) is removed by the next export; a fresh one is kept."""
    out = work / "stale"
    out.mkdir()
    old, fresh = out / ".report.md.dead.tmp", out / ".report.md.live.tmp"
    for p in (old, fresh):
        p.write_text("half")
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    outcome, _, err = cli(["export", str(ROOT / "sample_graphs" / "mlp.small.json"), "-o", str(out), "--force",
                           "--no-tune", "--no-opencl", "--no-native", "--format", "dot"], env)
    if outcome != "ok":
        return {"outcome": outcome, "err": err[-400:]}
    return {"outcome": "ok" if not old.exists() and fresh.exists() else "silent", "err": "stale .tmp handling"}


# -- the driver ---------------------------------------------------------------------------------------

QUICK = {"native truncated", "tuning unroll-10^7", "export into a file's subfolder", "serialize onto a device",
         "serialize to a full disk"}
"""The scenarios CI runs (each is a few fresh processes)."""


def run(cases: int, seed: int = 0, scenarios: str = "all", log: Any = None) -> dict[str, Counter]:
    """``cases`` per worker category and the cache and output ``scenarios`` (``all``, ``quick``: QUICK, ``none``):
    outcome counts by category."""
    wanted = (lambda name: True) if scenarios == "all" else (lambda name: scenarios == "quick" and name in QUICK)
    counts: dict[str, Counter] = {}

    def record(category: str, result: dict[str, Any], **about: str) -> None:
        """Count ``result``; a failure is logged at once (a long run interrupted keeps what it found)."""
        counts.setdefault(category, Counter())[result["outcome"]] += 1
        if result["outcome"] in FAILURES and log is not None:
            log.write(json.dumps({"category": category, **about, **result}, default=str) + "\n")
            log.flush()
    with tempfile.TemporaryDirectory(prefix="zx-fuzz-") as tmp:
        work = Path(tmp)
        env = {**os.environ, "PYTHONPATH": str(ROOT), "ZYX_EXPLORE_CACHE": str(work / "shared-cache")}
        folder = work / "graphs"
        prepare_folder(folder)
        workers = Workers(env)
        try:
            for category in ("check", "extract", "compile"):
                counts[category] = Counter()
                for k in range(cases):
                    record(category, workers.run(category, seed * 1_000_003 + k, folder, CASE_SECONDS))
                    for p in folder.glob("case*.json"):
                        p.unlink()
                    for p in folder.glob("egraph*.json"):
                        p.unlink()
        finally:
            workers.close()
        if scenarios != "none":
            counts["cache"] = Counter()
            for k, (target, fault, detail) in enumerate(cache_scenarios()):
                if not wanted(f"{target} {fault}"):
                    continue
                scenario = work / f"cache{k}"
                scenario.mkdir()
                record("cache", run_cache_scenario(target, fault, detail, scenario, env), scenario=f"{target} {fault}")
                shutil.rmtree(scenario, ignore_errors=True)
            counts["output"] = Counter()
            outputs = [(name, lambda a=argv, f=fsize: run_output_scenario(a, f, env))
                       for name, argv, fsize in output_scenarios(work)]
            for name, scenario_run in [*outputs, ("stale temporary files", lambda: stale_temporaries(work, env))]:
                if not wanted(name):
                    continue
                record("output", scenario_run(), scenario=name)
    return counts


def failures_in(counts: dict[str, Counter]) -> int:
    return sum(c[f] for c in counts.values() for f in FAILURES)


def _main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzzing", description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=50, help="cases per worker category (default 50)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--scenarios", choices=["all", "quick", "none"], default="all",
                        help="the cache and output scenarios to run (default all)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker()
        return 0
    began = time.perf_counter()
    counts = run(args.cases, args.seed, args.scenarios, log=sys.stderr)
    for category, c in counts.items():
        print(f"{category:8} {sum(c.values()):6} cases: " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())))
    print(f"{failures_in(counts)} failures in {time.perf_counter() - began:.0f} s")
    return 1 if failures_in(counts) else 0


if __name__ == "__main__":
    sys.exit(_main())

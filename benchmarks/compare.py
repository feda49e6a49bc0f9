"""Our plans side by side with numpy eager, tinygrad and torch: ``python benchmarks/compare.py [SAMPLE ...]``.

CPU mode (default; samples: every full-size sample graph).  For each sample it
compiles three plans, tuned without the disk cache: ``host`` (numpy and BLAS
devices), ``native`` (those plus the native C device, when a C compiler works)
and ``all`` (those plus every OpenCL device found, e.g. PoCL; extraction
chooses), verifies each against the reference once, then times
``engine.plan.execute`` (transfers included, compile and tuning excluded)
next to numpy eager (the reference interpreter: one numpy call per primitive
op, matmuls through einsum/BLAS): best of ``--repeats`` after a warm-up, eager
and every plan taking turns (``race``), so that a shared machine's drifting
load falls on all of them alike.
The bandwidth column counts each input read once and each output written once,
as a fraction of a numpy copy measured in the same run.  ``in place``: the same
plans run by a ``Session`` with the inputs put once and the output buffers kept
between runs (``reuse_outputs``), as tinygrad's TinyJit replays into its own
buffers; the plan column's fresh output arrays pay their first-touch page faults.

``--gpu``: large workloads (8192^2 elementwise, softmax, layernorm, sum; 4096^3
matmul) and every full-size sample on the first OpenCL GPU plus the CUDA
device where cupy finds a CUDA GPU (extraction chooses, for inputs resident on
the devices: ``Options.resident_inputs``, as torch's timed calls have their
tensors on the GPU; ``fresh`` runs that plan from host arrays): the plan's kernel time
(profiled events, data on the device), its bandwidth as a fraction of a
device-to-device ``clEnqueueCopyBuffer`` measured in the same run, and torch
eager and ``torch.compile`` (CUDA, fp32, TF32 off) where torch is importable;
then end to end from host arrays to host arrays, three ways, beside torch eager's
``.cuda()`` + call + ``.cpu()``: ``fresh`` (``execute(timed=False)``: every input
uploaded, launches queued), ``resident`` (a ``Session`` given the same arrays
again: each compared byte for byte with what it holds, none uploaded) and
``put`` (a ``Session`` given ``Session.put``'s read-only arrays: reused without a
comparison).  Each device's copy link is measured both ways first, through
pinned staging and from pageable arrays.

``--tinygrad``: tinygrad columns (the same primitive graph rebuilt from
tinygrad Tensor ops, run under TinyJit, best of N after warm-up): CPU (clang)
and OpenCL in CPU mode, CUDA (or OpenCL) in GPU mode; ``--beam N`` adds a
BEAM=N column (its search time is reported separately).  tinygrad is not a
dependency: run this script from an environment that has it.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import numpy as np

import sample_graphs
from engine import Init, Program, Tensor, from_tensors, load
from engine.devices import LibraryDevice, NumpyDevice, cuda_blas
from engine.devices.base import Device
from engine.devices.native import discover as native_devices
from engine.pipeline import Options, compile_program, run
from engine.plan import Launch, Session, execute
from engine.program.primitives import PrimGraph
from engine.program.reference import evaluate
from engine.tuning import Budget
from engine.tuning.links import measure as measure_link

BANDWIDTH_BOUND = ("elementwise", "softmax", "layernorm", "sum")


def best_of(fn: Callable[[], object], repeats: int, warmup: int = 1) -> float:
    """Best wall-clock seconds of ``fn`` over ``repeats`` calls after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def race(fns: Mapping[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Best wall-clock seconds of each function, after a warm-up call each, the functions taking turns
    ``repeats`` times: a shared machine's load drifts by more than the differences measured, and taking turns
    lets every function see the same drift."""
    for fn in fns.values():
        fn()
    best = dict.fromkeys(fns, math.inf)
    for _ in range(repeats):
        for key, fn in fns.items():
            start = time.perf_counter()
            fn()
            best[key] = min(best[key], time.perf_counter() - start)
    return best


def io_bytes(program: Program) -> int:
    """Bytes every input read once and every output written once."""
    graph = program.lower()
    outs = sum(graph.nodes[i].dtype.itemsize * int(np.prod(graph.nodes[i].shape)) for i in graph.outputs.values())
    return sum(i.dtype.itemsize * int(np.prod(i.shape)) for i in program.inputs) + outs


def flops(program: Program) -> float:
    """2 * multiply-adds of the program's contractions (sums of products), 0 if it has none."""
    graph = program.lower()
    total = 0.0
    for node in graph.nodes:
        if node.op == "reduce_sum" and graph.nodes[node.args[0]].op == "mul":
            total += 2 * float(np.prod(graph.nodes[node.args[0]].shape))
    return total


# -- workloads built at GPU size ----------------------------------------------------


def gpu_workloads(n: int, m: int) -> dict[str, Program]:
    """The issue's five workloads at ``n`` x ``n`` (matmul ``m``^3), built with the Tensor API."""

    def x(name: str = "x", *shape: int) -> Tensor:
        return Tensor.input(name, shape or (n, n), init=Init.normal(seed=len(name)))

    a = x()
    return {
        "elementwise": from_tensors([((a * 2 + 1).relu() * a - (-a).exp()).named("y")], "elementwise"),
        "softmax": from_tensors([x().softmax(-1).named("y")], "softmax"),
        "layernorm": from_tensors([x().layernorm(x("gamma", n), x("beta", n)).named("y")], "layernorm"),
        "sum": from_tensors([x().sum().named("y")], "sum"),
        "matmul": from_tensors([(x("a", m, m) @ x("b", m, m)).named("y")], "matmul"),
    }


# -- our plans ----------------------------------------------------------------------


@dataclass
class Measured:
    seconds: float
    """Best wall-clock seconds of the whole plan (CPU) or of its kernel launches (GPU)."""
    compile_seconds: float
    tune_seconds: float
    kernels: str
    """Kernel launches per device, e.g. ``numpy:2 blas:1``."""
    ok: bool
    details: list[str]
    """Per launched kernel: device, shape, variant, measured milliseconds."""
    moved: int
    """Bytes the plan's kernels read and write (each kernel's inputs and outputs once)."""
    note: str
    """Empty when the outputs verified; else the largest error against the reference and the tolerance."""
    end_to_end: float
    """Best wall-clock seconds of the whole plan from host inputs to host outputs (copies included)."""
    resident: float | None = None
    """``--gpu``: the same with the inputs kept on the devices by a ``Session`` (compared byte for byte)."""
    put: float | None = None
    """The same given the read-only arrays ``Session.put`` returned (no comparison); on the CPU also with the
    outputs' buffers kept between runs."""
    runs: dict[str, Callable[[], object]] = field(default_factory=dict)
    """CPU: the plan run fresh (``execute``) and in place (its session), for ``race`` to time beside the peers;
    ``seconds``, ``end_to_end`` and ``put`` are filled in from its result."""
    session: Session | None = None
    """CPU: the session ``runs["put"]`` uses, left open for ``race``; the caller closes it."""


def _short(device: str) -> str:
    """A device or pool name cut to the table's width."""
    return device.removeprefix("opencl:")[:12]


def measure_plan(program: Program, devices: list[Device], inputs: Mapping[str, np.ndarray], budget: Budget,
                 repeats: int, kernels_only: bool) -> Measured:
    """``program``'s plan on ``devices``, compiled and verified. ``kernels_only`` (``--gpu``): planned for inputs
    resident on the devices and timed by its launches, then end to end three ways; else its runs for ``race``."""
    start = time.perf_counter()
    c = compile_program(program, devices, Options(execute=False, tune_cache=False, tune_budget=budget,
                                                  resident_inputs=kernels_only))
    compile_seconds = time.perf_counter() - start
    tune_seconds = sum(r.elapsed for r in c.tuning.values())
    verification = run(c, inputs)
    ok = verification.ok
    worst = max(verification.outputs, key=lambda o: o.max_error / (o.atol + o.rtol))
    plan = c.plan
    assert plan is not None
    counts: dict[str, int] = {}
    for s in plan.launches():
        counts[_short(s.device)] = counts.get(_short(s.device), 0) + 1
    kernels = " ".join(f"{d}:{k}" for d, k in counts.items())
    tuned = {(r.kernel, r.device): r for r in c.tuning.values()}  # a candidate is tuned once per device
    details = []
    resident = put = None
    runs: dict[str, Callable[[], object]] = {}
    kept: Session | None = None
    if kernels_only:
        times = []
        for _ in range(repeats + 1):
            steps = execute(plan, devices, inputs).step_times
            times.append(sum(t for s, t in zip(plan.steps, steps) if isinstance(s, Launch)))
        seconds = min(times[1:])
        end_to_end = best_of(lambda: execute(plan, devices, inputs, timed=False), repeats)
        with Session(plan, devices) as session:
            frozen = {k: session.put(k, inputs[k]) for k in session.inputs}
            resident = best_of(lambda: session.run(inputs), repeats)
            put = best_of(lambda: session.run(frozen), repeats)
            same = session.run(inputs).outputs
        fresh = execute(plan, devices, inputs).outputs
        if any(not np.array_equal(fresh[k], same[k]) for k in fresh):
            raise SystemExit(f"{program.name}: a session's outputs differ from a fresh execution's")
    else:
        seconds = end_to_end = math.nan
        session = Session(plan, devices, reuse_outputs=True)  # as TinyJit runs: in place, into kept buffers
        frozen = {k: session.put(k, inputs[k]) for k in session.inputs}
        same = {k: v.copy() for k, v in session.run(frozen).outputs.items()}
        fresh = execute(plan, devices, inputs).outputs
        if any(not np.array_equal(fresh[k], same[k], equal_nan=True) for k in fresh):
            raise SystemExit(f"{program.name}: a session's outputs differ from a fresh execution's")
        runs = {"fresh": lambda: execute(plan, devices, inputs), "put": lambda: session.run(frozen)}
        kept = session
    for s in plan.launches():
        r = tuned.get((s.kernel.key, s.device))
        shape = "x".join(map(str, s.kernel.shape)) or "()"
        red = "+".join(str(r.size) for r in s.kernel.reduces) or "1"  # a row kernel: one per stage
        timed = f"{r.seconds * 1e3:.3f} ms of {len(r.trials)} tried" if r is not None else "untuned"
        details.append(f"{_short(s.device)} {shape} reduce {red}: {s.variant}, {timed}")
        if r is not None:
            details.append("    " + "; ".join(f"{t.variant}: {ms(t.seconds) if t.seconds else t.status}"
                                            for t in r.trials))
    launched = {(s.kernel.key, s.device) for s in plan.launches()}
    details += [f"timed, not launched: {_short(r.device)} {r.kernel}: {r.seconds * 1e3:.3f} ms of "
                f"{len(r.trials)} tried" for key, r in tuned.items() if key not in launched]
    details += [f"{_short(kn.device)} {kn.candidate}: {skip}" for kn, skip in c.skipped.items()]
    details += [f"problem: {p}" for p in c.problems]
    details += [f"copies priced: {_short(pool)} {link.describe()}" for pool, link in c.links.items()]
    note = "" if ok else f" (max error {worst.max_error:.1e} > rtol {worst.rtol:g} atol {worst.atol:g})"
    moved = sum(s.kernel.moved_bytes for s in plan.launches())
    return Measured(seconds, compile_seconds, tune_seconds, kernels, ok, details, moved, note, end_to_end, resident, put,
                    runs, kept)


# -- peers --------------------------------------------------------------------------


def tinygrad_runner(graph: PrimGraph, inputs: Mapping[str, np.ndarray], device: str, beam: int = 0
                    ) -> tuple[Callable[[], object], float]:
    """A function running ``graph`` in tinygrad on ``device`` under TinyJit, and the seconds its capture took."""
    from tinygrad import Context, TinyJit, dtypes
    from tinygrad import Tensor as TT  # noqa: N814

    names = [n.param for n in graph.nodes if n.op == "leaf"]
    args = [TT(np.ascontiguousarray(inputs[k]), device=device).realize() for k in names]
    unary = {"neg": lambda a: -a, "relu": TT.relu, "exp2": TT.exp2, "log2": TT.log2, "sin": TT.sin, "cos": TT.cos,
             "sqrt": TT.sqrt, "recip": TT.reciprocal, "not": lambda a: a.logical_not()}
    binary = {"add": TT.add, "sub": TT.sub, "mul": TT.mul, "div": TT.div, "pow": TT.pow, "max": TT.maximum,
              "cmplt": TT.__lt__, "cmpgt": TT.__gt__, "eq": TT.__eq__, "noteq": TT.__ne__,
              "and": TT.bitwise_and, "or": TT.bitwise_or}

    def build(*leaves: TT) -> tuple[TT, ...]:
        by_name = dict(zip(names, leaves))
        v: list[TT] = []
        for node in graph.nodes:
            a = [v[i] for i in node.args]
            op, p = node.op, node.param
            if op == "leaf":
                out = by_name[p]
            elif op == "const":
                out = TT(np.asarray(p, node.dtype.numpy), device=device)
            elif op in unary:
                out = unary[op](a[0])
            elif op in binary:
                out = binary[op](a[0], a[1])
            elif op == "cast":
                out = a[0].cast(getattr(dtypes, node.dtype.numpy.name))
            elif op in ("reduce_sum", "reduce_max"):
                out = a[0].sum(axis=p) if op == "reduce_sum" else a[0].max(axis=p)
            elif op == "expand":
                out = a[0].expand(p)
            elif op == "permute":
                out = a[0].permute(p)
            elif op == "reshape":
                out = a[0].reshape(p)
            else:
                assert op == "pad", op
                pads, value = p
                grown = a[0].pad(tuple((max(lo, 0), max(hi, 0)) for lo, hi in pads), value=value)
                out = grown.shrink(tuple((max(-lo, 0), s - max(-hi, 0)) for (lo, hi), s in zip(pads, grown.shape)))
            v.append(out)
        return tuple(v[i].realize() for i in graph.outputs.values())

    jit = TinyJit(build)

    def call() -> object:
        out = jit(*args)
        out[0].numpy() if out[0].numel() == 1 else TT.realize(*out)
        from tinygrad import Device

        Device[device].synchronize()
        return out

    start = time.perf_counter()
    with Context(BEAM=beam):
        for _ in range(3):  # TinyJit captures on the second call, replays from the third
            call()
    return call, time.perf_counter() - start


def tinygrad_time(graph: PrimGraph, inputs: Mapping[str, np.ndarray], device: str, repeats: int, beam: int = 0
                  ) -> tuple[float | None, float, str]:
    """(best seconds or None, capture seconds, error) of ``graph`` in tinygrad."""
    try:
        call, capture = tinygrad_runner(graph, inputs, device, beam)
        return best_of(call, repeats, warmup=0), capture, ""
    except Exception as e:  # a backend that does not run here is reported, not fatal
        return None, 0.0, f"{type(e).__name__}: {str(e).splitlines()[0][:80] if str(e) else ''}"


def numpy_copy_bandwidth(nbytes: int = 256 << 20, repeats: int = 5) -> float:
    """Bytes/s (read + written) of ``np.copyto`` of ``nbytes``."""
    src = np.ones(nbytes // 4, np.float32)
    dst = np.empty_like(src)
    return 2 * nbytes / best_of(lambda: np.copyto(dst, src), repeats)


def ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.2f}" if seconds < 0.1 else f"{seconds * 1e3:.1f}"


def ratio(base: float | None, other: float | None) -> str:
    return "-" if base is None or other is None or other == 0 else f"{base / other:.2f}x"


# -- modes --------------------------------------------------------------------------


def cpu_mode(args: argparse.Namespace, budget: Budget) -> None:
    from engine.devices.opencl import discover as opencl_devices

    copy = numpy_copy_bandwidth()
    print(f"numpy copy of 256 MiB: {copy / 1e9:.1f} GB/s (read + write)\n")
    host = [NumpyDevice(), LibraryDevice()]
    found, note = native_devices()
    if note:
        print(note)
    native = host + found
    every = native + [d for d in opencl_devices() if args.device in d.name]
    print("devices:", ", ".join(d.name for d in every), "\n")
    tg = [("tinygrad CPU", "CPU", 0), ("tinygrad CL", "CL", 0)] if args.tinygrad else []
    if args.tinygrad and args.beam:
        tg.append((f"tinygrad CPU BEAM={args.beam}", "CPU", args.beam))
    head = ["sample", "numpy eager ms", "host plan ms", "x eager", "native plan ms", "x eager", "native kernels",
            "all plan ms", "x eager", "all kernels", "GB/s (copy %)", "tune s host/native/all",
            "in place ms host/native/all"] + [f"{name} ms" for name, _, _ in tg] + [
            "best/tinygrad", "in place best/tinygrad"] * bool(tg)
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---" for _ in head) + "|")
    for name in args.samples:
        program = load(sample_graphs.path(name))
        graph = program.lower()
        inputs = program.input_values()
        a = measure_plan(program, host, inputs, budget, args.repeats, kernels_only=False)
        n = measure_plan(program, native, inputs, budget, args.repeats, kernels_only=False)
        b = measure_plan(program, every, inputs, budget, args.repeats, kernels_only=False)
        plans = {"host": a, "native": n, "all": b}
        best_times = race({"eager": lambda g=graph, i=inputs: evaluate(g, i)} | {
            f"{label} {how}": fn for label, m in plans.items() for how, fn in m.runs.items()}, args.repeats)
        eager = best_times["eager"]
        for label, m in plans.items():
            m.seconds = m.end_to_end = best_times[f"{label} fresh"]
            m.put = best_times[f"{label} put"]
            assert m.session is not None
            m.session.close()
        best = min(a.seconds, n.seconds, b.seconds)
        bw = io_bytes(program) / best
        row = [name, ms(eager), ms(a.seconds) + a.note, ratio(eager, a.seconds),
               ms(n.seconds) + n.note, ratio(eager, n.seconds), n.kernels,
               ms(b.seconds) + b.note, ratio(eager, b.seconds), b.kernels,
               f"{bw / 1e9:.1f} ({100 * bw / copy:.0f}%)",
               f"{a.tune_seconds:.1f}/{n.tune_seconds:.1f}/{b.tune_seconds:.1f}",
               "/".join(ms(m.put) for m in (a, n, b))]
        peer = []
        for _, device, beam in tg:
            seconds, capture, error = tinygrad_time(graph, inputs, device, args.repeats, beam)
            peer.append(seconds)
            row.append(ms(seconds) + (f" (beam {capture:.0f} s)" if beam and seconds else "") + (
                f" ({error})" if error else ""))
        if tg:
            found = [s for s in peer if s is not None]
            row.append(ratio(min(found), best) if found else "-")
            row.append(ratio(min(found), min(a.put, n.put, b.put)) if found else "-")
        print("| " + " | ".join(row) + " |", flush=True)
        if args.verbose:
            for label, m in (("host", a), ("native", n), ("all", b)):
                print(f"  {label}: " + "\n    ".join(m.details))
    if "matmul" in args.samples:
        program = load(sample_graphs.path("matmul"))
        ins = program.input_values()
        a_, b_ = ins["a"], ins["b"]
        blas = best_of(lambda: a_ @ b_, args.repeats)
        print(f"\nnumpy BLAS a @ b ({a_.shape[0]}^3): {ms(blas)} ms, {flops(program) / blas / 1e9:.1f} GFLOP/s")


def gpu_mode(args: argparse.Namespace, budget: Budget) -> None:
    import pyopencl as cl

    from engine.devices.opencl import discover as opencl_devices

    gpus = [d for d in opencl_devices() if d.is_gpu and args.device in d.name]
    if not gpus:
        raise SystemExit("no OpenCL GPU found")
    gpu = gpus[0]
    print(f"device: {gpu.name} ({gpu.driver_version})")
    nbytes = 1 << 30
    src = cl.Buffer(gpu.context, cl.mem_flags.READ_WRITE, nbytes)
    dst = cl.Buffer(gpu.context, cl.mem_flags.READ_WRITE, nbytes)
    cl.enqueue_fill_buffer(gpu.queue, src, np.float32(1), 0, nbytes).wait()
    copies = []
    for _ in range(args.repeats + 2):
        event = cl.enqueue_copy(gpu.queue, dst, src)
        event.wait()
        copies.append((event.profile.end - event.profile.start) * 1e-9)
    copy = 2 * nbytes / min(copies[2:])
    src.release()
    dst.release()
    print(f"clEnqueueCopyBuffer of 1 GiB: {copy / 1e9:.0f} GB/s (read + write)\n")
    notes: list[str] = []
    devices = [gpu, *cuda_blas.discover(notes)]
    print("devices:", ", ".join(d.name for d in devices), *notes)
    for d in devices:
        pinned = getattr(d, "pinned", None)
        for way in (False, True) if pinned is not None else (None,):
            if way is not None:
                d.pinned = way  # type: ignore[attr-defined]
            link = measure_link(d)
            print(f"{d.name} ({d.driver_version}): host<->device copies measured {link.describe()} (copies {d.copies})")
        if pinned is not None:
            d.pinned = pinned  # type: ignore[attr-defined]
    torch = _torch()
    tg = []
    if args.tinygrad:
        tg = [("tinygrad CUDA", "CUDA", 0), ("tinygrad CL", "CL", 0)]
        if args.beam:
            tg.append((f"tinygrad CUDA BEAM={args.beam}", "CUDA", args.beam))
    head = ["workload", "ours ms", "GB/s", "% copy", "kernels' GB/s (% copy)", "GFLOP/s", "torch ms", "torch/ours",
            "torch.compile ms", "compile/ours", "tune s", "kernels", "end to end ms: fresh", "resident", "put",
            "torch round trip ms", "torch resident ms"]
    head += [f"{name} ms" for name, _, _ in tg] + ["tinygrad/ours"] * bool(tg)
    print("| " + " | ".join(head) + " |")
    print("|" + "|".join("---" for _ in head) + "|")
    programs = {k: p for k, p in gpu_workloads(args.n, args.m).items() if k in (args.only or k).split(",")}
    work = [(f"{k} {args.m if k == 'matmul' else args.n}", p, k) for k, p in programs.items()]
    work += [(name, load(sample_graphs.path(name)), "") for name in args.samples]
    details: list[str] = []
    for label, program, kind in work:
        inputs = program.input_values()
        ours = measure_plan(program, devices, inputs, budget, args.repeats, kernels_only=True)
        f = flops(program)
        theirs = _torch_time(torch, kind or program, inputs, args.repeats) if torch else None
        compiled = (_torch_time(torch, kind or program, inputs, args.repeats, compiled=True)
                    if torch and not args.no_torch_compile else None)
        trip = _torch_round_trip(torch, kind or program, inputs, args.repeats) if torch else None
        kept = _torch_round_trip(torch, kind or program, inputs, args.repeats, resident=True) if torch else None
        row = [label, ms(ours.seconds) + ours.note, f"{io_bytes(program) / ours.seconds / 1e9:.0f}",
               f"{100 * io_bytes(program) / ours.seconds / copy:.0f}%" if kind in BANDWIDTH_BOUND else "-",
               f"{ours.moved / ours.seconds / 1e9:.0f} ({100 * ours.moved / ours.seconds / copy:.0f}%)",
               f"{f / ours.seconds / 1e9:.0f}" if f and kind in ("matmul", "") else "-", ms(theirs), ratio(theirs, ours.seconds),
               ms(compiled), ratio(compiled, ours.seconds), f"{ours.tune_seconds:.1f}", ours.kernels,
               ms(ours.end_to_end), ms(ours.resident), ms(ours.put), ms(trip), ms(kept)]
        peer = []
        for _, device, beam in tg:
            seconds, _, error = tinygrad_time(program.lower(), inputs, device, args.repeats, beam)
            peer.append(seconds)
            row.append(ms(seconds) + (f" ({error})" if error else ""))
        if tg:
            found = [s for s in peer if s is not None]
            row.append(ratio(min(found), ours.seconds) if found else "-")
        print("| " + " | ".join(row) + " |", flush=True)
        details.extend(f"{label}: {d}" for d in ours.details)
    if args.verbose:
        print("\nkernels:\n" + "\n".join(details))


TORCH_OPS = frozenset({"matmul", "add", "sub", "mul", "relu", "gelu", "silu", "exp", "reshape", "permute", "attention",
                       "rmsnorm", "softmax", "layernorm", "conv2d", "sum", "mean", "max"})
"""The sample ops ``_torch_program`` translates."""


def _torch():
    try:
        import torch
    except ImportError:
        print("torch: not importable here")
        return None
    if not torch.cuda.is_available():
        print("torch: no CUDA device")
        return None
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}, TF32 off")
    return torch


def _torch_program(torch, program: Program, t: Mapping[str, object]) -> Callable[[], object]:
    """``program``'s ops as the torch calls a user would write (F.scaled_dot_product_attention, F.conv2d, ...)."""
    F = torch.nn.functional  # noqa: N806
    ops = {
        "matmul": lambda a, b: a @ b, "add": torch.add, "sub": torch.sub, "mul": torch.mul, "relu": torch.relu,
        "gelu": F.gelu, "silu": F.silu, "exp": torch.exp,
        "reshape": lambda x, shape: x.reshape(shape), "permute": lambda x, axes: x.permute(axes),
        "attention": lambda q, k, v, scale: _sdpa(F, q, k, v, scale),
        "rmsnorm": lambda x, w, axis, eps: F.rms_norm(x, x.shape[axis:], w, eps),
        "softmax": lambda x, axis: torch.softmax(x, axis),
        "layernorm": lambda x, w, b, axis, eps: F.layer_norm(x, x.shape[axis:], w, b, eps),
        "conv2d": lambda x, w, b, stride, padding, dilation, groups: F.conv2d(x, w, b, stride, padding, dilation, groups),
        "sum": lambda x, axes, keepdim: x.sum(axes, keepdim), "mean": lambda x, axes, keepdim: x.mean(axes, keepdim),
        "max": lambda x, axes, keepdim: x.amax(axes, keepdim),
    }

    def fn() -> tuple:
        v = dict(t)
        for node in program.nodes:
            v[node.id] = ops[node.op](*(v[a] for a in node.args), **node.attrs)
        return tuple(v[o] for o in program.outputs)

    return fn


def _sdpa(F, q, k, v, scale: float | None):  # noqa: N803
    """``F.scaled_dot_product_attention`` with (heads, sequence, d) inputs given a batch axis of 1: its fused
    kernels take only 4-D inputs, and a torch model's attention has one, so the peer is torch's fastest."""
    if q.dim() == k.dim() == v.dim() == 3:
        return F.scaled_dot_product_attention(q[None], k[None], v[None], scale=scale)[0]
    return F.scaled_dot_product_attention(q, k, v, scale=scale)


def _torch_fn(torch, kind: str | Program, t: Mapping[str, object]) -> Callable[[], object] | None:
    """``kind`` written as plain torch (fp32) over the device tensors ``t``; a sample program through
    ``_torch_program`` (None when it uses an op that has no translation there)."""
    if isinstance(kind, Program):
        return _torch_program(torch, kind, t) if all(n.op in TORCH_OPS for n in kind.nodes) else None
    return {
        "elementwise": lambda: (t["x"] * 2 + 1).relu() * t["x"] - torch.exp(-t["x"]),
        "softmax": lambda: torch.softmax(t["x"], -1),
        "layernorm": lambda: torch.nn.functional.layer_norm(t["x"], t["x"].shape[-1:], t["gamma"], t["beta"]),
        "sum": lambda: t["x"].sum(),
        "matmul": lambda: t["a"] @ t["b"],
    }[kind]


def _torch_time(torch, kind: str | Program, inputs: Mapping[str, np.ndarray], repeats: int,
                compiled: bool = False) -> float | None:
    """Best CUDA-event seconds of ``_torch_fn``, eager or through ``torch.compile`` (data on the GPU), queued
    behind a ``cuda_blas.HOLD``-long busy kernel as our device's launches are (``cuda_blas.launch``): the events time the GPU's
    work, not the host's dispatch of the first call."""
    fn = _torch_fn(torch, kind, {k: torch.from_numpy(np.ascontiguousarray(v)).cuda() for k, v in inputs.items()})
    if fn is None:
        return None
    fn = torch.compile(fn) if compiled else fn
    fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(int(cuda_blas.HOLD * 2e9))  # cycles of at most 2 GHz: at least HOLD, as our launches
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) * 1e-3)
    return best


def _torch_round_trip(torch, kind: str | Program, inputs: Mapping[str, np.ndarray], repeats: int,
                      resident: bool = False) -> float | None:
    """Best wall seconds of torch eager from host arrays to host results: ``.cuda()``, the call, ``.cpu()``;
    ``resident``: from tensors already on the GPU (the call and ``.cpu()``)."""
    if _torch_fn(torch, kind, {}) is None:
        return None
    on_gpu = {k: torch.from_numpy(np.ascontiguousarray(v)).cuda() for k, v in inputs.items()}

    def trip() -> None:
        fn = _torch_fn(torch, kind, on_gpu if resident else {
            k: torch.from_numpy(np.ascontiguousarray(v)).cuda() for k, v in inputs.items()})
        out = fn()  # type: ignore[misc]
        for y in out if isinstance(out, tuple) else (out,):
            y.cpu()

    return best_of(trip, repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("samples", nargs="*", default=[n for n in sample_graphs.names() if not n.endswith(".small")])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--variants", type=int, default=12, help="variants timed per kernel (tuning budget)")
    parser.add_argument("--seconds", type=float, default=20.0, help="tuning seconds per kernel")
    parser.add_argument("--device", default="", help="only OpenCL devices whose name contains this")
    parser.add_argument("--gpu", action="store_true", help="large workloads on the first OpenCL GPU")
    parser.add_argument("--n", type=int, default=8192, help="--gpu: side of the square workloads")
    parser.add_argument("--m", type=int, default=4096, help="--gpu: side of the matmul")
    parser.add_argument("--tinygrad", action="store_true", help="add tinygrad columns")
    parser.add_argument("--beam", type=int, default=0, help="with --tinygrad: also BEAM=N")
    parser.add_argument("--only", default="", help="--gpu: comma-separated workloads (default all five)")
    parser.add_argument("--verbose", action="store_true", help="list each plan's kernels and variants")
    parser.add_argument("--no-torch-compile", action="store_true",
                        help="--gpu: leave out torch.compile (its compile takes tens of seconds per workload)")
    args = parser.parse_args()
    os.environ.setdefault("PYTHONHASHSEED", "0")
    budget = Budget(variants=args.variants, seconds=args.seconds)
    (gpu_mode if args.gpu else cpu_mode)(args, budget)


if __name__ == "__main__":
    main()

"""The native CPU device: kernels compiled to C by the system compiler, loaded with ctypes, run on host arrays.

A departure from DESIGN.md, which names numpy and OpenCL executors: on a CPU the numpy device pays a
memory pass per op and PoCL vectorises badly, so neither comes near the memory floor; one C loop nest
per kernel, vectorised by gcc, does (``engine.kernel.render.c`` explains the code and the variants). Buffers
are the host pool's numpy arrays, used in place (no transfers).

The compiler is ``$ZYX_EXPLORE_CC`` if set, else the first of ``cc``, ``gcc``, ``clang`` on PATH. It is
probed once with the flags of ``CONFIGS`` in order (OpenMP threads and libmvec's vector math first);
the first that builds and runs a test kernel is used. Without a working compiler the device is not
offered and ``discover`` says why in one line.

Shared objects are cached on disk under the tuning cache's root (``native/<hash>.so``), keyed by the
source, the compiler's version and the flags, and written atomically; ``compile_many`` builds many
kernels in one compiler call. Launches time the ctypes call with ``time.perf_counter``.

OpenMP threads sleep as soon as a kernel ends: importing this module sets ``OMP_WAIT_POLICY=PASSIVE`` unless
the environment already names a policy (it must be set before the OpenMP runtime loads, with the first
kernel). A plan alternates native kernels with BLAS calls on the same cores, and OpenMP's default of spinning
after a parallel loop took those cores from the next BLAS call, which then ran far slower than its trials
(benchmarks/RESULTS.md, "Threads that wait asleep"). The policy is part of ``driver_version``, so times
measured under another are not reused.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from engine.devices.base import Device, Source, sibling_refusal
from engine.devices.numpy_device import HostMemory
from engine.devices.source import fold_prelude
from engine.fileio import CacheWarning, cache_root, read_bounded, set_aside, write_atomic
from engine.kernel.cost import row_loop_ops, work
from engine.kernel.ir import HOST, Kernel
from engine.kernel.render.base import UnsupportedKernelError, check, function_name
from engine.kernel.render.c import (
    PARALLEL_STEPS,
    ROW_VECTOR,
    loop_steps,
    native_variant_error,
    source,
    strided_loads,
    uses_half,
)
from engine.kernel.schedule import DEFAULT_VARIANT, Variant

WAIT_POLICY = "PASSIVE"
"""OpenMP's wait policy unless the environment names one (see the module docstring)."""
os.environ.setdefault("OMP_WAIT_POLICY", WAIT_POLICY)

GENERATION = 2
"""Of the generated C, in the tuning cache's key: times measured of older code are not reused (2: 64-bit indices,
where ``int`` ones had rows vectorised as gathers and scatters)."""
CACHE_LINE = 64
"""Bytes a strided load brings in."""
LOOP_OPS = 12
"""Scalar ops to set up one reduce loop and store its result (as the work-item roofline's per-item overhead):
what a split reduce's many short pieces cost beyond their adds."""
ENV = "ZYX_EXPLORE_CC"
"""Environment variable naming the C compiler (a command on PATH or a path)."""
CANDIDATES = ("cc", "gcc", "clang")
BUILD_SECONDS = 300.0
"""A kernel build may take this long (a big joint build of many variants)."""
PROBE_SECONDS = 20.0
"""The compiler's probe (``--version`` and test builds) may take this long in all, so a hanging
``$ZYX_EXPLORE_CC`` costs seconds, not the build limit per flag set."""
MAX_OBJECT_BYTES = 256 << 20
"""A cached shared object beyond this is corrupt."""
BASE_FLAGS = ("-O3", "-march=native", "-fno-math-errno", "-ffp-contract=off", "-fwrapv", "-fPIC", "-shared", "-w")
"""Optimised for this CPU; no ``-ffast-math`` (NaN, infinities and rounding as the reference has them);
``-fwrapv``: integer overflow wraps as in numpy, so the optimiser may not assume it away."""
CONFIGS: tuple[tuple[tuple[str, ...], tuple[str, ...], bool, bool], ...] = (
    (("-mprefer-vector-width=512", "-fopenmp"), ("-lmvec", "-lm"), True, True),
    (("-fopenmp",), ("-lmvec", "-lm"), True, True),
    (("-fopenmp",), ("-lm",), True, False),
    (("-fopenmp-simd",), ("-lm",), False, False),
    ((), ("-lm",), False, False),
)
"""(compile flags, libraries, threads, libmvec vector math) to try in order."""

_PROBE = """#include <math.h>
#pragma omp declare simd notinbranch
float exp2f(float);
int zx_probe(float* x, int n) {
  #pragma omp parallel for num_threads(2) schedule(static)
  for (int i = 0; i < n; ++i) x[i] = exp2f(x[i]);
  return x[0] == 2.0f ? 0 : 2;
}
"""
_HALF_PROBE = "typedef _Float16 half;\nint zx_probe(half* x) { x[0] = (half)((float)x[0] * 2.0f); return 0; }\n"


class NativeBuildError(RuntimeError):
    """A C compilation failed (the message holds the compiler's output), or the device cannot run the kernel."""

    def __init__(self, message: str, source: str = "", log: str = "") -> None:
        super().__init__(message)
        self.source = source
        self.log = log


@dataclass(frozen=True)
class Compiler:
    """A working C compiler and the flags it was probed with."""

    path: str
    version: str
    """First line of ``--version``."""
    flags: tuple[str, ...]
    libs: tuple[str, ...]
    threads: bool
    """Whether OpenMP threads work (else one thread)."""
    simd_math: bool
    """Whether libmvec's vector variants link (``omp declare simd`` of exp2f and kin)."""
    half: bool = False
    """Whether ``_Float16`` works (f16 kernels)."""

    @property
    def key(self) -> str:
        return f"{self.version} | {' '.join(self.flags + self.libs)}"


def cache_dir() -> Path:
    """``native/`` in the cache root, beside the tuning cache."""
    return cache_root() / "native"


def build(compiler: Compiler, text: str, directory: Path, timeout: float = BUILD_SECONDS) -> tuple[Path, bool]:
    """The shared object of C source ``text`` and whether the compiler ran (else it came from the cache).

    A cached object is loaded only if its bytes match the checksum written beside it: a truncated or
    overwritten ``.so`` would crash the process (SIGBUS, SIGILL) when loaded, so it is rebuilt instead.
    """
    digest = hashlib.sha256(f"{compiler.key}\n{compiler.path}\n{text}".encode()).hexdigest()[:32]
    path = directory / f"{digest}.so"
    checksum = path.with_suffix(".sha256")
    if _intact(path, checksum):
        return path, False
    with tempfile.TemporaryDirectory(prefix="zx-native-") as tmp:
        src, out = Path(tmp) / "k.c", Path(tmp) / "k.so"
        src.write_text(text)
        cmd = [compiler.path, *BASE_FLAGS, *compiler.flags, "-o", str(out), str(src), *compiler.libs]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            raise NativeBuildError(f"{compiler.path} did not finish within {timeout:g} s", text) from e
        except OSError as e:
            raise NativeBuildError(f"{compiler.path} could not run: {e}", text) from e
        if done.returncode != 0 or not out.exists():
            log = (done.stderr or done.stdout).strip()
            raise NativeBuildError(f"C build failed ({compiler.path}, exit {done.returncode}):\n{log}", text, log)
        data = out.read_bytes()
        write_atomic(path, data)
        write_atomic(checksum, hashlib.sha256(data).hexdigest())
    return path, True


def _intact(path: Path, checksum: Path) -> bool:
    """Whether the cached ``path`` exists and its SHA-256 is the one in ``checksum``; a corrupt one is reported."""
    try:
        data = read_bounded(path, MAX_OBJECT_BYTES)
    except FileNotFoundError:
        return False
    except OSError as e:
        return _corrupt(path, str(e))
    try:
        expected = read_bounded(checksum, 256).decode("ascii").strip()
    except (OSError, ValueError):
        return _corrupt(path, "no valid checksum beside it")
    if hashlib.sha256(data).hexdigest() != expected:
        return _corrupt(path, "its bytes do not match its checksum")
    return True


def _corrupt(path: Path, why: str) -> bool:
    set_aside(path)
    warnings.warn(CacheWarning(f"native cache {path} is corrupt ({why}); rebuilding it"), stacklevel=4)
    return False


def _version(path: str) -> str | None:
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=PROBE_SECONDS / 2)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = done.stdout.strip().splitlines()
    return lines[0] if done.returncode == 0 and lines else None


def _runs(path: Path, half: bool) -> bool:
    """Whether the probe in ``path`` loads and computes the right thing."""
    try:
        fn = ctypes.CDLL(str(path)).zx_probe
    except OSError:
        return False
    if half:
        x = np.array([1.5], np.float16)
        fn.argtypes = [ctypes.c_void_p]
        return fn(x.ctypes.data) == 0 and bool(x[0] == 3.0)
    x = np.full(64, 1.0, np.float32)
    fn.argtypes = [ctypes.c_void_p, ctypes.c_int]
    return fn(x.ctypes.data, 64) == 0 and bool((x == 2.0).all())


@functools.lru_cache(maxsize=8)
def _probe(path: str, directory: Path) -> Compiler | str:
    version = _version(path)
    if version is None:
        return f"the C compiler {path} does not work ({path} --version failed)"
    last = ""
    deadline = time.monotonic() + PROBE_SECONDS
    for flags, libs, threads, simd in CONFIGS:
        compiler = Compiler(path, version, flags, libs, threads, simd)
        left = deadline - time.monotonic()
        if left <= 0:
            return f"the C compiler {path} did not build a test kernel within {PROBE_SECONDS:g} s ({last})"
        try:
            if _runs(build(compiler, _PROBE, directory, left)[0], half=False):
                try:
                    half = _runs(build(compiler, _HALF_PROBE, directory, max(deadline - time.monotonic(), 1))[0],
                                 half=True)
                except NativeBuildError:
                    half = False
                return Compiler(path, version, flags, libs, threads, simd, half)
        except (NativeBuildError, OSError) as e:
            last = str(e).splitlines()[-1] if str(e).strip() else type(e).__name__
    return f"the C compiler {path} cannot build a test kernel ({last})"


def find_compiler(directory: Path | None = None) -> Compiler | str:
    """The C compiler to use, probed; or why there is none (one line)."""
    wanted = os.environ.get(ENV)
    names = (wanted,) if wanted else CANDIDATES
    found = [p for p in (shutil.which(n) for n in names) if p]
    if not found:
        return f"${ENV}={wanted} is not a command" if wanted else "no C compiler (cc, gcc or clang) on PATH"
    directory = directory or cache_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        if not os.access(directory, os.W_OK | os.X_OK):
            raise PermissionError(13, "permission denied")
    except OSError as e:
        return f"its cache folder {directory} cannot be written ({e.strerror or e}); set $ZYX_EXPLORE_CACHE"
    return _probe(found[0], directory)


def default_threads() -> int:
    """The cores this process may run on, at most 8 (as the numpy device)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, 8))


@dataclass(frozen=True)
class NativeKernel:
    """A kernel built for the native device (what ``NativeDevice.compile`` returns)."""

    kernel: Kernel
    variant: Variant
    source: str
    function: Any = field(repr=False)
    """The ctypes function: pointers to the inputs then the outputs; returns 0 (1: out of memory)."""


class NativeDevice(HostMemory, Device):
    """Kernels as C functions over host arrays (see the module docstring).

    Nominal numbers for a small CPU: streams ~12 GB/s on all threads (about a numpy copy), ~1 G scalar
    ops/s per thread in a loop the compiler cannot vectorise (a reduce kept in order), ``lanes`` times
    that in one it does.
    """

    pool = HOST
    tunable = True
    bandwidth = 12e9
    """Nominal bytes/s streamed by all threads (one thread: ``single_bandwidth``)."""
    single_bandwidth = 8e9
    throughput = 1.0e9
    """Nominal scalar ops/s of one thread in a sequential loop."""
    lanes = 8
    """Speed-up of a vectorised loop over a sequential one (nominal)."""
    launch_overhead = 5e-6
    """Seconds per launch (the ctypes call, waking the threads)."""

    def __init__(self, compiler: Compiler, threads: int | None = None, directory: Path | None = None) -> None:
        self.compiler = compiler
        self.threads = (default_threads() if threads is None else threads) if compiler.threads else 1
        self.name = "native"
        self.directory = directory or cache_dir()
        self.libraries: dict[str, ctypes.CDLL] = {}
        """Loaded shared objects by the C source of each kernel they hold."""
        self.builds = 0
        """Compiler runs (disk cache misses)."""

    def __repr__(self) -> str:
        return f"NativeDevice({self.compiler.path!r}, threads={self.threads})"

    @property
    def driver_version(self) -> str:
        """Compiler, flags, threads, OpenMP's wait policy and the generated code's ``GENERATION`` (part of the
        tuning cache's and the calibration's keys)."""
        wait = os.environ.get("OMP_WAIT_POLICY", "default").lower()
        return f"{self.compiler.key} | threads {self.threads} | wait {wait} | code {GENERATION}"

    def unsupported(self, kernel: Kernel) -> str | None:
        if (refused := sibling_refusal(kernel)) is not None:
            return refused
        try:
            check(kernel)
        except UnsupportedKernelError as e:
            return str(e)
        if not self.compiler.half and uses_half(kernel):
            return f"{self.compiler.version} has no _Float16"
        return None

    def variant_error(self, kernel: Kernel, variant: Variant) -> str | None:
        return native_variant_error(kernel, variant)

    def seeds(self, kernel: Kernel) -> list[Variant]:
        """A row kernel's vectorised stages (the shared space has no such row variant)."""
        return [ROW_VECTOR] if kernel.stages else []

    def program_source(self, items: list[tuple[Kernel, Variant]]) -> str:
        """The C source of one shared object holding every kernel of ``items``."""
        return _source(tuple(items), self.threads, self.compiler.half, self.compiler.simd_math)

    def source(self, kernel: Kernel, variant: Variant = DEFAULT_VARIANT) -> Source:
        """The C function of ``kernel`` in ``variant``, the prelude every native kernel shares folded."""
        return Source("C (native)", "c", fold_prelude(self.program_source([(kernel, variant)]), kernel.name))

    def _load(self, text: str) -> ctypes.CDLL:
        path, built = build(self.compiler, text, self.directory)
        self.builds += built
        return ctypes.CDLL(str(path))

    def compile_many(self, items: list[tuple[Kernel, Variant]]) -> None:
        """Build every not yet loaded kernel of ``items`` in one compiler call; later ``compile`` calls find them.

        Items this device cannot run are left out; if the joint build fails, ``compile`` builds each alone.
        """
        todo: dict[str, tuple[Kernel, Variant]] = {}
        for kernel, variant in items:
            runs = self.unsupported(kernel) is None and self.variant_error(kernel, variant) is None
            if runs and self.program_source([(kernel, variant)]) not in self.libraries:
                todo.setdefault(function_name(kernel, variant), (kernel, variant))
        if len(todo) < 2:
            return
        try:
            library = self._load(self.program_source(list(todo.values())))
        except NativeBuildError:
            return
        for item in todo.values():
            self.libraries[self.program_source([item])] = library

    def compile(self, kernel: Kernel, variant: Variant = DEFAULT_VARIANT) -> NativeKernel:
        reason = self.unsupported(kernel) or self.variant_error(kernel, variant)
        if reason is not None:
            raise NativeBuildError(f"{self.name} cannot run {kernel.name} ({variant}): {reason}")
        text = self.program_source([(kernel, variant)])
        library = self.libraries.get(text)
        if library is None:
            library = self.libraries[text] = self._load(text)
        fn = getattr(library, function_name(kernel, variant))
        fn.argtypes = [ctypes.c_void_p] * (len(kernel.inputs) + len(kernel.outputs))
        fn.restype = ctypes.c_int
        return NativeKernel(kernel, variant, text, fn)

    def launch(self, compiled: NativeKernel, inputs: list[Any], outputs: list[Any]) -> float:
        """Run ``compiled`` on contiguous host arrays (others are copied first); returns seconds of the call."""
        kernel = compiled.kernel
        assert len(inputs) == len(kernel.inputs) and len(outputs) == len(kernel.outputs)
        if kernel.numel == 0:
            return 0.0
        for a, b in zip([*inputs, *outputs], [*kernel.inputs, *kernel.output_types]):
            if np.size(a) != b.numel:  # the C code indexes by the declared shapes: never let it past an end
                raise ValueError(f"{kernel.name}: a buffer of {np.size(a)} elements where {b} is declared")
        ins = [np.ascontiguousarray(a, b.dtype.numpy) for a, b in zip(inputs, kernel.inputs)]
        ins = [a if a.size else np.zeros(2, np.float64) for a in ins]  # a masked-off load still reads element 0
        outs = [o if o.flags.c_contiguous and o.dtype == b.dtype.numpy else np.empty(b.shape, b.dtype.numpy)
                for o, b in zip(outputs, kernel.output_types)]
        pointers = [a.ctypes.data for a in ins + outs]
        start = time.perf_counter()
        status = compiled.function(*pointers)
        seconds = time.perf_counter() - start
        if status != 0:
            raise MemoryError(f"{kernel.name} ({compiled.variant}) could not allocate its scratch space")
        for o, out in zip(outs, outputs):
            if o is not out:
                out[...] = o.reshape(out.shape)
        return seconds

    def predict(self, kernel: Kernel, variant: Variant = DEFAULT_VARIANT) -> float:
        """A roofline of ``variant``: parallel when worth threads, vector speed when its busiest loop vectorises."""
        if kernel.stages:
            return self._predict_rows(kernel, variant)
        w = work(kernel)
        red = kernel.reduce
        steps = loop_steps(kernel)
        split = variant.group > 1
        parallel = self.workers(kernel, variant)
        vector = red is None or not red.vars or variant.unroll > 1 or split
        bandwidth = self.bandwidth if parallel > 1 else self.single_bandwidth
        ops = self.throughput * (self.lanes if vector else 1) * max(parallel, 1)
        # strided reduce loads read a cache line each; lanes of an upcast or tile share their lines
        lines = steps * strided_loads(kernel) / min(variant.upcast * variant.tile, CACHE_LINE // 4)
        # each reduce loop (one per point, or per piece of a split reduce) is set up and stored in scalar code
        loops = kernel.numel * (variant.group if split else 1) if red is not None else 0
        compute = w.ops / ops + loops * LOOP_OPS / (self.throughput * max(parallel, 1))
        return self.launch_overhead + max((w.bytes + lines * CACHE_LINE) / bandwidth, compute)

    def _predict_rows(self, kernel: Kernel, variant: Variant) -> float:
        """A row kernel's roofline: rows in parallel, each row read from memory once (its later loops hit cache),
        the outputs' loop at vector speed and the stages' too when vectorised (else scalar, each set up once)."""
        *stages, outputs = row_loop_ops(kernel)
        threads = self.workers(kernel, variant)
        ops = self.throughput * threads
        vector = ops * self.lanes
        per_row = sum(stages) / (vector if variant == ROW_VECTOR else ops) + outputs / vector
        compute = kernel.numel * (per_row + len(stages) * LOOP_OPS / ops)
        bandwidth = self.bandwidth if threads > 1 else self.single_bandwidth
        return self.launch_overhead + max(work(kernel).bytes / bandwidth, compute)

    def workers(self, kernel: Kernel, variant: Variant = DEFAULT_VARIANT) -> int:
        """The threads of its OpenMP loop: none below PARALLEL_STEPS loop steps (as the C renderer decides), else
        as many as there are points, rows (or split reduce pieces) up to ``threads``."""
        if loop_steps(kernel) < PARALLEL_STEPS:
            return 1
        return max(min(self.threads, kernel.numel * (variant.group if variant.group > 1 else 1)), 1)

    def estimate(self, kernel: Kernel) -> float:
        """The best ``predict`` of the default, a vectorised reduce and a split reduce (the tuner measures)."""
        tries = [DEFAULT_VARIANT, Variant(unroll=4), Variant(group=64)]
        return min(self.predict(kernel, v) for v in tries if self.variant_error(kernel, v) is None)

    def transfer_estimate(self, nbytes: int) -> float:
        return 0.0


@functools.lru_cache(maxsize=1024)
def _source(items: tuple[tuple[Kernel, Variant], ...], threads: int, half: bool, simd_math: bool) -> str:
    return source(list(items), threads, half, simd_math)


def generate(kernel: Kernel, variant: Variant = DEFAULT_VARIANT) -> str:
    """The C source this process's native device builds for ``kernel`` in ``variant``."""
    found = find_compiler()
    if isinstance(found, str):
        raise NativeBuildError(found)
    return NativeDevice(found).program_source([(kernel, variant)])


def discover(threads: int | None = None) -> tuple[list[NativeDevice], str | None]:
    """The native device, or none and a one-line note saying why (never an error)."""
    try:
        found = find_compiler()
    except Exception as e:  # an unwritable cache folder, a compiler that hangs: no device, never a traceback
        return [], f"native device not offered: {e}"
    if isinstance(found, str):
        return [], f"native device not offered: {found}"
    return [NativeDevice(found, threads)], None

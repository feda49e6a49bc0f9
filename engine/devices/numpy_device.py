"""Host devices: generic numpy evaluation of any kernel, and the BLAS library kernel for contractions.

Both keep their buffers in the host pool as numpy arrays.  Their ``estimate``
is a roofline with nominal numbers for a small CPU; autotuning measures real
launches and replaces it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from engine.devices.base import DEFAULT_VARIANT, HOST, Variant
from engine.devices.evaluate import (
    MAX_ELEMENTS,
    Block,
    Frame,
    Plan,
    Reducer,
    plan,
    reduce_chunk,
    round_to,
    run,
)
from engine.kernel.cost import work
from engine.kernel.ir import Buffer, Kernel, Load, Op
from engine.program.reference import contract, widen


@dataclass(frozen=True)
class NumpyCompiled:
    """A kernel prepared for a host device: its evaluation plan (schedules, axes, chunks)."""

    kernel: Kernel
    variant: Variant
    plan: Plan


class NumpyDevice:
    """Runs any kernel with the vectorised numpy evaluator (``engine.devices.evaluate``).

    Generic numpy evaluation is slow: every node of every chunk is one numpy
    call (microseconds of overhead each) and materialises its array, so the
    nominal throughput is about 0.3 G element-ops/s.
    """

    name = "numpy"
    pool = HOST
    bandwidth = 5e9
    """Nominal bytes/s of host memory as numpy streams it."""
    throughput = 0.3e9
    """Nominal element-ops/s."""
    launch_overhead = 10e-6
    """Seconds per launch."""
    op_overhead = 4e-6
    """Seconds per numpy call (one per node per chunk)."""

    def __init__(self, max_elements: int = MAX_ELEMENTS) -> None:
        self.max_elements = max_elements

    def supports(self, kernel: Kernel) -> bool:
        return True

    def compile(self, kernel: Kernel, variant: Variant = DEFAULT_VARIANT) -> NumpyCompiled:
        return NumpyCompiled(kernel, variant, plan(kernel, self.max_elements))

    def alloc(self, buffer: Buffer) -> np.ndarray:
        return np.empty(buffer.shape, buffer.dtype.numpy)

    def upload(self, array: np.ndarray) -> np.ndarray:
        return np.array(array, order="C", copy=True)

    def download(self, handle: np.ndarray, buffer: Buffer) -> np.ndarray:
        return np.array(handle, dtype=buffer.dtype.numpy, order="C", copy=True).reshape(buffer.shape)

    def free(self, handle: Any) -> None:
        pass

    def _reducer(self) -> Reducer:
        return reduce_chunk

    def launch(self, compiled: NumpyCompiled, inputs: list[Any], outputs: list[Any]) -> float:
        start = time.perf_counter()
        run(compiled.plan, inputs, outputs, self._reducer())
        return time.perf_counter() - start

    def estimate(self, kernel: Kernel) -> float:
        p = plan(kernel, self.max_elements)
        chunks = max(1, math.prod(len(b) for b in p.global_blocks + p.reduce_blocks))
        calls = chunks * (len(p.body) + len(p.outputs))
        return work(kernel).roofline(self.bandwidth, self.throughput, self.launch_overhead + self.op_overhead * calls)

    def transfer_estimate(self, nbytes: int) -> float:
        return 0.0


def _is_contraction_load(e: object) -> bool:
    return isinstance(e, Load) and e.dtype.is_float and e.index.is_affine and not e.clamped


def contraction(kernel: Kernel) -> tuple[Load, Load] | None:
    """The two loads of a kernel whose reduce is ``sum(a * b)`` of affine unclamped float loads (a matmul)."""
    red = kernel.reduce
    if red is None or red.op != "sum" or not red.dtype.is_float:
        return None
    body = red.body
    if not (isinstance(body, Op) and body.op == "mul" and len(body.args) == 2):
        return None
    a, b = body.args
    if not (_is_contraction_load(a) and _is_contraction_load(b) and a.dtype == b.dtype == body.dtype):
        return None
    return a, b  # type: ignore[return-value]


def contract_chunk(p: Plan, chunk: tuple[Block, ...], flats: Sequence[np.ndarray]) -> np.ndarray:
    """The reduce of a contraction kernel over one global chunk, by ``reference.contract`` (BLAS via einsum)."""
    red = p.kernel.reduce
    loads = contraction(p.kernel)
    assert red is not None and loads is not None
    frame = Frame(p.axes, chunk + tuple((0, v.size) for v in red.vars))
    shape = tuple(n for _, n in chunk) + (1,) * len(red.vars)
    if red.size == 0:
        return np.zeros(shape, red.dtype.numpy)
    a, b = (np.broadcast_to(widen(frame.view(flats[x.input], x.index)), frame.shape) for x in loads)
    with np.errstate(all="ignore"):
        return round_to(contract(a, b, p.reduce_axes), red.dtype).reshape(shape)


class LibraryDevice(NumpyDevice):
    """The BLAS library kernel: a matmul-shaped reduce (any layout, batched or not) by ``np.einsum``.

    Elementwise ops after the reduce (bias, activation) run on the numpy
    evaluator.  Nominal numbers: about 40 GFLOP/s on a 2-core CPU (numpy's
    1024^3 matmul measured 48 ms).
    """

    name = "blas"
    pool = HOST
    bandwidth = 10e9
    throughput = 40e9
    launch_overhead = 20e-6

    def supports(self, kernel: Kernel) -> bool:
        return contraction(kernel) is not None

    def compile(self, kernel: Kernel, variant: Variant = DEFAULT_VARIANT) -> NumpyCompiled:
        assert self.supports(kernel), "not a contraction kernel"
        return NumpyCompiled(kernel, variant, plan(kernel, self.max_elements, chunk_reduce=False))

    def _reducer(self) -> Reducer:
        return contract_chunk

    def estimate(self, kernel: Kernel) -> float:
        p = plan(kernel, self.max_elements, chunk_reduce=False)
        chunks = max(1, math.prod(len(b) for b in p.global_blocks))
        calls = chunks * len(p.outputs)
        return work(kernel).roofline(self.bandwidth, self.throughput, self.launch_overhead + self.op_overhead * calls)

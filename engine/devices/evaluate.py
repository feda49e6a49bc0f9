"""A vectorised numpy evaluator of the kernel IR (what the numpy and BLAS devices run): planned kernels run
over threads.

``chunk_plan`` cuts a kernel into chunks, ``chunk_eval`` interprets one chunk,
``matmul`` is the BLAS path of contractions and ``row_plan`` runs a row kernel
as the kernels it fuses; this module spreads the chunks over ``threads``
threads (numpy releases the GIL in its loops): global chunks, each thread
taking the next when it is done with one, or, when there is one global chunk,
contiguous ranges of its reduce blocks whose partial results are combined in
thread order, so results do not depend on timing.

A contraction runs one global chunk at a time, materialised factors and output
chunk bounded by ``view_elements``: its matmul (itself multi-threaded) writes
into the output where the layouts allow, and the epilogue (bias, activation)
then runs in place, in pieces, on the calling thread alone: after a call, the
BLAS library's worker threads keep spinning on the other cores for a while, and
an epilogue spread over those cores ran slower than on one.
"""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

import numpy as np

from engine.devices.chunk_eval import (
    Workspace,
    combine,
    contract,
    flat_inputs,
    output_window,
    reduce_blocks,
    reduce_chunk,
    round_to,
    store_outputs,
)
from engine.devices.chunk_plan import CHUNK_ELEMENTS, EPILOGUE_ELEMENTS, MAX_ELEMENTS, Block, Plan, chunk_blocks, plan
from engine.devices.row_plan import RowPlan, plan_rows
from engine.kernel.ir import Acc, Kernel, Where

T = TypeVar("T")


@contextlib.contextmanager
def _borrowed(p: Plan, flats: Sequence[np.ndarray], outputs: Sequence[np.ndarray] = ()) -> Iterator[Workspace]:
    """One of ``p``'s workspaces, bound to this launch's arrays for the ``with`` block, then kept for the next."""
    ws = Workspace.acquire(p, flats, outputs)
    try:
        yield ws
    finally:
        ws.release()


def _spread(p: Plan, flats: Sequence[np.ndarray], outputs: Sequence[np.ndarray], items: Sequence[T], threads: int,
            do: Callable[[Workspace, T], None]) -> None:
    """``do(workspace, item)`` for every item, on up to ``threads`` threads (this one among them).

    Each thread has its own workspace and takes the next item when it is done with one, so a thread slowed by
    other processes takes fewer; the items must write disjoint outputs.
    """
    pending = iter(items)
    lock = threading.Lock()

    def worker() -> None:
        with _borrowed(p, flats, outputs) as ws, np.errstate(all="ignore"):
            while True:
                with lock:
                    item = next(pending, None)
                if item is None:
                    return
                do(ws, item)

    n = min(threads, len(items))
    if n <= 1:
        worker()
        return
    with ThreadPoolExecutor(n - 1) as pool:
        helpers = [pool.submit(worker) for _ in range(n - 1)]
        worker()
        for f in helpers:
            f.result()


def _chunk(ws: Workspace, chunk: tuple[Block, ...]) -> None:
    """Evaluate and store one global chunk of a kernel that is not a contraction."""
    store_outputs(ws, chunk, reduce_chunk(ws, chunk) if ws.plan.kernel.reduce is not None else None)


def _contract_chunk(p: Plan, flats: Sequence[np.ndarray], outputs: Sequence[np.ndarray], chunk: tuple[Block, ...]
                    ) -> None:
    """A contraction over one global chunk: the matmul (into the output where it can), then the epilogue.

    A contraction's chunk is BLAS-sized: its epilogue runs in pieces of ``EPILOGUE_ELEMENTS`` on this thread,
    in the workspace of the matmul (see the module docstring); it is skipped when the matmul wrote the output
    itself.  A single-output epilogue runs in place over the matmul's result unless its last node is a
    ``Where`` writing the output (whose first copy would overwrite the reduce values it reads); every other
    node reads a point's values before its output is written.
    """
    red = p.kernel.reduce
    assert red is not None
    (last, *more) = p.kernel.outputs
    window = None
    if not more and outputs[0].dtype == red.dtype.numpy and not (isinstance(last, Where) and p.slots.get(last) == -1):
        window = output_window(outputs[0], chunk, tuple(n for _, n in chunk) + (1,) * len(red.vars))
    with _borrowed(p, flats, outputs) as ws, np.errstate(all="ignore"):
        acc = contract(ws, chunk, window)
        if last == Acc(red.dtype) and window is not None and np.may_share_memory(acc, window):
            return
        for blocks in itertools.product(*chunk_blocks([n for _, n in chunk], EPILOGUE_ELEMENTS)):
            where = tuple(slice(s, s + n) for s, n in blocks)
            store_outputs(ws, tuple((s0 + s, n) for (s0, _), (s, n) in zip(chunk, blocks)), acc[where])


def _reduce_part(p: Plan, chunk: tuple[Block, ...], rblocks: Sequence[tuple[Block, ...]],
                 flats: Sequence[np.ndarray]) -> np.ndarray:
    with _borrowed(p, flats) as ws, np.errstate(all="ignore"):
        return reduce_blocks(ws, chunk, rblocks)


def _split(items: Sequence[T], n: int) -> list[Sequence[T]]:
    """``items`` in ``n`` contiguous, nearly equal ranges (none empty)."""
    n = min(n, len(items))
    bounds = [len(items) * i // n for i in range(n + 1)]
    return [items[a:b] for a, b in itertools.pairwise(bounds)]


def run(p: Plan | RowPlan, inputs: Sequence[np.ndarray], outputs: Sequence[np.ndarray], threads: int = 1) -> None:
    """Evaluate planned kernel ``p`` on ``inputs``, writing every output array in place, on up to ``threads`` threads.

    Output arrays must not overlap the inputs.
    """
    if isinstance(p, RowPlan):
        temps: list[np.ndarray] = []
        for part in p.parts[:-1]:
            temps.append(np.empty(part.kernel.shape, part.kernel.output_types[0].dtype.numpy))
            run(part, [*inputs, *temps[:-1]], temps[-1:], threads)
        run(p.parts[-1], [*inputs, *temps], outputs, threads)
        return
    kernel = p.kernel
    assert len(outputs) == len(kernel.outputs)
    for out, t in zip(outputs, kernel.output_types):
        assert out.size == t.numel and out.dtype == t.dtype.numpy, (out.shape, out.dtype, t)
    if kernel.numel == 0:
        return
    flats = flat_inputs(kernel, inputs)
    flats += [w.copy(flats[w.input]) for w in p.windows]
    for i, before, after in p.pads:
        flats.append(np.concatenate([np.zeros(before, flats[i].dtype), flats[i], np.zeros(after, flats[i].dtype)]))
    targets = [o if o.flags.c_contiguous else np.empty(o.shape, o.dtype) for o in outputs]
    _run(p, flats, [t.reshape(kernel.shape) for t in targets], threads)
    for out, target in zip(outputs, targets):
        if out is not target:
            out[...] = target


def _run(p: Plan, flats: Sequence[np.ndarray], outputs: Sequence[np.ndarray], threads: int) -> None:
    kernel = p.kernel
    chunks = list(p.chunks())
    rblocks = list(itertools.product(*p.reduce_blocks))
    if p.factors is not None:
        for chunk in chunks:
            _contract_chunk(p, flats, outputs, chunk)
    elif threads > 1 and len(chunks) == 1 and kernel.reduce is not None and kernel.reduce.size and len(rblocks) > 1:
        (chunk,) = chunks
        with ThreadPoolExecutor(threads) as pool:
            parts = [f.result() for f in [pool.submit(_reduce_part, p, chunk, part, flats)
                                          for part in _split(rblocks, threads)]]
        total = parts[0]
        for part in parts[1:]:
            combine(kernel.reduce.op)(total, part, out=total)
        with _borrowed(p, flats, outputs) as ws, np.errstate(all="ignore"):
            store_outputs(ws, chunk, round_to(total, kernel.reduce.dtype))
    else:
        _spread(p, flats, outputs, chunks, threads, _chunk)


def evaluate(kernel: Kernel, inputs: Sequence[np.ndarray], max_elements: int = CHUNK_ELEMENTS, threads: int = 1,
             view_elements: int | None = MAX_ELEMENTS) -> list[np.ndarray]:
    """The outputs of ``kernel`` on ``inputs`` (arrays of its input buffers' shapes and dtypes)."""
    outputs = [np.empty(t.shape, t.dtype.numpy) for t in kernel.output_types]
    planned = plan_rows(kernel, max_elements, view_elements) if kernel.stages else plan(kernel, max_elements, view_elements)
    run(planned, inputs, outputs, threads)
    return outputs

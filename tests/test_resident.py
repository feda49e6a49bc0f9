"""End to end runs of a plan (issue 22): queued launches, a Session keeping inputs on the device between runs
(reused only while unchanged, byte for byte), its buffers freed on close, the chunked copy helpers, pinned staging
on PoCL, freed OpenCL buffers kept for reuse, and compilations planned for resident inputs."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import Init, Tensor, from_tensors
from engine.devices import staging
from engine.devices.numpy_device import NumpyDevice
from engine.devices.opencl import OpenCLDevice, discover
from engine.errors import InputError
from engine.extract import Pins
from engine.kernel.ir import Buffer
from engine.pipeline import PLAN_RUNS, Options, compile_program, run_what_if, what_if
from engine.plan import Allocate, Copy, Free, Launch, Session, execute
from engine.program.dtypes import DType

CPU_OPENCL = [d for d in discover() if not d.is_gpu][:1]
needs_opencl = pytest.mark.skipif(not CPU_OPENCL, reason="no OpenCL CPU device (install pocl-opencl-icd)")


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch):
    """Chunks of 256 bytes, so that small arrays take the threaded, many-chunk paths."""
    monkeypatch.setattr(staging, "CHUNK", 256)


def _program():
    x = Tensor.input("x", (32, 48), init=Init.normal(seed=1))
    w = Tensor.input("w", (48, 16), init=Init.normal(seed=2))
    return from_tensors({"y": ((x @ w).relu() + 1.0).sum(1), "z": (x * 3.0).max(1)}, name="resident")


def _compiled(devices):
    c = compile_program(_program(), devices, Options(execute=False, tune=False, tune_cache=False))
    assert c.plan is not None
    return c


def _fresh_device(pinned: bool | None = None) -> OpenCLDevice:
    d = CPU_OPENCL[0]
    return OpenCLDevice(d.device, d.name, pinned=pinned)


def _inputs(c) -> dict[str, np.ndarray]:
    return {k: v.copy() for k, v in c.program.input_values().items()}


def _equal(a, b) -> bool:
    return a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("nbytes", [0, 1, 255, 256, 257, 1000, 4096 + 3])
def test_chunked_copies_and_comparisons_move_every_byte(nbytes):
    src = np.random.default_rng(nbytes).integers(0, 256, nbytes, dtype=np.uint8)
    dst = np.zeros_like(src)
    landed: list[tuple[int, int]] = []
    staging.copy_in(dst, src, lambda a, b: landed.append((a, b)))
    assert np.array_equal(dst, src) and landed == staging.spans(nbytes)
    assert [b - a for a, b in landed] == [256] * (nbytes // 256) + [nbytes % 256] * bool(nbytes % 256)
    back = np.zeros_like(src)
    order: list[int] = []
    staging.copy_out(back, dst, staging.spans(nbytes), order.append)
    assert np.array_equal(back, src) and order == list(range(len(landed)))
    assert staging.same_bytes(src, back)
    if nbytes:
        back[-1] ^= 1  # the last byte of the last chunk
        assert not staging.same_bytes(src, back)
    assert not staging.same_bytes(src, np.zeros(nbytes + 1, np.uint8))


def _lent(array: np.ndarray) -> bool:
    """Whether ``array`` is a view of a block lent by ``staging.Blocks``."""
    while isinstance(array, np.ndarray):
        array = array.base
    return isinstance(array, staging.Lease)


def test_lent_blocks_come_back_only_when_every_view_of_their_array_is_gone():
    made: list[np.ndarray] = []

    def allocate(size: int) -> np.ndarray:
        made.append(np.zeros(size, np.uint8))
        return made[-1]

    blocks = staging.Blocks(allocate)
    first = blocks.take(12)
    first.bytes[:] = np.arange(12, dtype=np.uint8)
    a = first.array((3,), np.dtype(np.float32))
    del first
    assert a.base is not None and a.flags.writeable and np.array_equal(a.view(np.uint8), np.arange(12))
    view = a[1:]
    second = blocks.take(5)  # the first block is still lent: a second is made
    assert second is not None and len(made) == 2
    extra = [blocks.take(5) for _ in range(staging.Blocks.PER_SIZE - 2)]
    assert blocks.take(5) is None and len(made) == staging.Blocks.PER_SIZE  # so many per size, no more
    del a
    assert blocks.take(5) is None  # a view of the first block's array is still alive
    del view, second, extra
    back = [blocks.take(1 << 20) for _ in made]
    assert {id(lease._block) for lease in back} == {id(m) for m in made}  # all came back
    assert blocks.take((1 << 20) + 1) is not None and len(made) == staging.Blocks.PER_SIZE + 1  # its own size


def test_blocks_stay_within_their_limit_and_a_refused_allocation_takes_none(monkeypatch):
    monkeypatch.setattr(staging.Blocks, "LIMIT", 3 << 20)
    refuse = [True]
    blocks = staging.Blocks(lambda size: None if refuse[0] else np.zeros(size, np.uint8))
    assert blocks.take(100) is None
    refuse[0] = False
    held = [blocks.take(2 << 20), blocks.take(1 << 20)]  # 3 MiB in all: the limit
    assert all(held) and blocks.take(1 << 20) is None and blocks.take(100) is None


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["take", "view", "drop"]), st.integers(1, 3 << 20), st.integers(0, 99)),
                max_size=40))
def test_no_block_is_lent_twice_while_any_view_of_it_lives(ops):
    """Random takes, views and drops: every live array owns its block alone (its bytes are all its own mark), and
    the per-size count and the byte limit hold throughout."""
    made: list[np.ndarray] = []
    blocks = staging.Blocks(lambda size: made.append(np.zeros(size, np.uint8)) or made[-1])
    live: list[tuple[np.ndarray, int]] = []  # arrays and views handed out, with the mark written through them
    for mark, (op, nbytes, pick) in enumerate(ops, start=1):
        if op == "take":
            lease = blocks.take(nbytes)
            if lease is not None:
                array = lease.array((nbytes,), np.dtype(np.uint8))
                array[:] = mark % 251 + 1
                live.append((array, mark % 251 + 1))
        elif live and op == "view":
            array, value = live[pick % len(live)]
            live.append((array[pick % array.size:], value))
        elif live:
            live.pop(pick % len(live))
        assert all(np.all(a == value) for a, value in live)
        sizes = [m.size for m in made]
        assert sum(sizes) <= staging.Blocks.LIMIT
        assert all(sizes.count(size) <= staging.Blocks.PER_SIZE for size in sizes)


@needs_opencl
def test_a_pinned_pocl_download_lends_a_block_never_overwritten_while_its_array_lives():
    device = _fresh_device(pinned=True)
    buffer = Buffer((300,), DType.F32)
    count = staging.Blocks.PER_SIZE
    handles = [device.upload(np.full(300, float(i), np.float32)) for i in range(count + 2)]
    lent = [device.download(h, buffer) for h in handles[:count]]
    assert all(_lent(a) for a in lent)
    fresh = device.download(handles[count], buffer)  # every block of this size is held: staged into a new array
    assert not _lent(fresh)
    assert [a[0] for a in (*lent, fresh)] == [float(i) for i in range(count + 1)]
    address = lent[0].ctypes.data
    del lent[0]
    again = device.download(handles[-1], buffer)
    assert again.ctypes.data == address and np.all(again == count + 1.0)
    assert [a[0] for a in lent] == [float(i) for i in range(1, count)]


@needs_opencl
def test_a_sessions_outputs_from_lent_blocks_survive_the_next_run():
    device = _fresh_device(pinned=True)
    c = _compiled([device])
    inputs = _inputs(c)
    with Session(c.plan, [device]) as session:
        runs = [session.run(inputs).outputs]
        for _ in range(staging.Blocks.PER_SIZE):
            inputs["x"] += 1.0
            runs.append(session.run(inputs).outputs)
            assert _equal(runs[-1], execute(c.plan, [device], inputs).outputs)
    assert all(_lent(a) for a in runs[0].values())
    for earlier, later in itertools.pairwise(runs):
        assert not any(np.array_equal(earlier[k], later[k]) for k in earlier)


@needs_opencl
def test_queued_launches_give_the_outputs_of_timed_ones():
    device = _fresh_device()
    c = _compiled([device])
    assert c.plan.launches() and all(s.device == device.name for s in c.plan.launches())
    inputs = _inputs(c)
    timed = execute(c.plan, [device], inputs)
    queued = execute(c.plan, [device], inputs, timed=False)
    assert _equal(timed.outputs, queued.outputs) and timed.timed and not queued.timed
    assert all(t == 0 for s, t in zip(c.plan.steps, queued.step_times) if isinstance(s, Launch))
    assert queued.wall > 0 and any(t > 0 for s, t in zip(c.plan.steps, timed.step_times) if isinstance(s, Launch))


@needs_opencl
def test_a_queued_run_waits_only_for_the_devices_its_steps_use(monkeypatch):
    device, idle = _fresh_device(), NumpyDevice()
    c = _compiled([device])
    waits = {device.name: 0, idle.name: 0}

    def count_waits(d):
        finish = d.finish

        def counted() -> None:
            waits[d.name] += 1
            finish()
        monkeypatch.setattr(d, "finish", counted)

    count_waits(device)
    count_waits(idle)
    queued = execute(c.plan, [device, idle], _inputs(c), timed=False)
    with Session(c.plan, [device, idle]) as session:
        again = session.run(_inputs(c))
    assert waits == {device.name: 2, idle.name: 0}
    assert _equal(queued.outputs, again.outputs)


@needs_opencl
def test_a_session_reuses_unchanged_inputs_and_gives_a_fresh_executions_outputs():
    device = _fresh_device()
    c = _compiled([device])
    inputs = _inputs(c)
    copies = sum(isinstance(s, Copy) and s.target[1] == device.pool for s in c.plan.steps)
    with Session(c.plan, [device]) as session:
        first = session.run(inputs)
        assert session.uploads == copies and session.reused == 0 and session.resident == copies
        again = session.run({k: v.copy() for k, v in inputs.items()})  # equal arrays, other objects: reused
        assert session.uploads == copies and session.reused == copies
    fresh = execute(c.plan, [device], inputs)
    assert _equal(first.outputs, fresh.outputs) and _equal(again.outputs, fresh.outputs)


@needs_opencl
def test_an_input_changed_in_place_is_uploaded_again_and_changes_the_result():
    device = _fresh_device()
    c = _compiled([device])
    inputs = _inputs(c)
    with Session(c.plan, [device]) as session:
        before = session.run(inputs)
        uploads = session.uploads
        inputs["x"][-1, -1] += 1.0  # one element, in the last chunk
        after = session.run(inputs)
        assert session.uploads == uploads + 1  # x alone
        expected = execute(c.plan, [device], inputs).outputs
        assert _equal(after.outputs, expected) and not _equal(after.outputs, before.outputs)
        inputs["w"][0, 0] = np.float32(7.5)
        assert _equal(session.run(inputs).outputs, execute(c.plan, [device], inputs).outputs)
        assert session.uploads == uploads + 2


@needs_opencl
def test_put_hands_back_a_read_only_array_reused_without_a_comparison(monkeypatch):
    device = _fresh_device()
    c = _compiled([device])
    inputs = _inputs(c)
    with Session(c.plan, [device]) as session:
        frozen = {k: session.put(k, inputs[k]) for k in session.inputs}
        assert session.uploads == len(frozen) and all(np.array_equal(frozen[k], inputs[k]) for k in frozen)
        with pytest.raises(ValueError):
            frozen["x"][0, 0] = 1.0
        with pytest.raises(ValueError):
            frozen["x"].flags.writeable = True

        def no_comparison(*args):
            raise AssertionError("compared the bytes of an array put handed out")

        monkeypatch.setattr(staging, "same_bytes", no_comparison)
        out = session.run(frozen)
        assert session.uploads == len(frozen) and _equal(out.outputs, execute(c.plan, [device], inputs).outputs)
        monkeypatch.undo()
        inputs["x"] *= 2  # another array for x: compared, changed, uploaded
        assert _equal(session.run(inputs).outputs, execute(c.plan, [device], inputs).outputs)
        assert session.uploads == len(frozen) + 1


@needs_opencl
def test_closing_a_session_frees_every_input_buffer_it_holds(monkeypatch):
    device = _fresh_device()
    c = _compiled([device])
    made, freed = [], []
    upload, free = device.upload, device.free
    monkeypatch.setattr(device, "upload", lambda a: made.append(upload(a)) or made[-1])
    monkeypatch.setattr(device, "free", lambda h: freed.append(h) or free(h))
    session = Session(c.plan, [device])
    session.run(_inputs(c))
    session.run(_inputs(c))
    assert made and not any(h in freed for h in made) and session.resident == len(made)
    session.close()
    assert all(any(h is f for f in freed) for h in made) and session.resident == 0
    with pytest.raises(RuntimeError, match="closed"):
        session.run(_inputs(c))


@needs_opencl
def test_a_session_keeps_its_kernels_buffers_and_replays_launches_prepared_once(monkeypatch):
    device = _fresh_device()
    c = _compiled([device])
    launches = c.plan.launches()
    allocated = [s for s in c.plan.steps if isinstance(s, Allocate) and s.value[1] == device.pool and not s.input
                 and not any(isinstance(t, Copy) and t.target == s.value for t in c.plan.steps)]
    assert launches and allocated
    made, freed, prepared, queued = [], [], [], []
    alloc, free, prepare = device.alloc, device.free, device.prepare

    def counted_prepare(*args):
        prepared.append(args)
        launch = prepare(*args)

        def replay() -> None:
            queued.append(args)
            launch()
        return replay

    monkeypatch.setattr(device, "alloc", lambda b: made.append(alloc(b)) or made[-1])
    monkeypatch.setattr(device, "free", lambda h: freed.append(h) or free(h))
    monkeypatch.setattr(device, "prepare", counted_prepare)
    inputs = _inputs(c)
    session = Session(c.plan, [device])
    for _ in range(3):
        assert _equal(session.run(inputs).outputs, execute(c.plan, [_fresh_device()], inputs).outputs)
    assert len(made) == len(allocated) and len(prepared) == len(launches) and not freed
    assert len(queued) == 3 * len(launches)  # each run replays every launch, the first run's included
    inputs["x"][1, 2] = -5.0  # a new upload: the launches reading x's old buffer (only those) are prepared again
    assert _equal(session.run(inputs).outputs, execute(c.plan, [_fresh_device()], inputs).outputs)
    x = next(s.value for s in c.plan.steps if isinstance(s, Allocate) and s.input == "x")
    on_device = {s.target for s in c.plan.steps if isinstance(s, Copy) and s.source == x}
    reading_x = [s for s in launches if on_device.intersection(s.inputs)]
    assert len(reading_x) > 0 and len(prepared) == len(launches) + len(reading_x) and len(made) == len(allocated)
    session.close()
    assert all(any(h is f for f in freed) for h in made)


@needs_opencl
def test_a_session_checks_its_inputs_and_keeps_them_after_a_bad_call():
    device = _fresh_device()
    c = _compiled([device])
    inputs = _inputs(c)
    with Session(c.plan, [device]) as session:
        session.run(inputs)
        with pytest.raises(InputError):
            session.run({"x": inputs["x"]})
        with pytest.raises(InputError):
            session.run({**inputs, "x": inputs["x"][:, :4]})
        uploads = session.uploads
        assert _equal(session.run(inputs).outputs, execute(c.plan, [device], inputs).outputs)
        assert session.uploads == uploads


@needs_opencl
@pytest.mark.parametrize("nbytes", [0, 4, 8, 256, 260, 3000])
def test_pinned_staging_on_pocl_round_trips_every_size(nbytes):
    device = _fresh_device(pinned=True)
    assert device.copies == "pinned"
    data = np.arange(nbytes // 4, dtype=np.float32) - 7.0
    handle = device.upload(data)
    back = device.download(handle, Buffer(data.shape, DType.F32))
    assert np.array_equal(back, data) and device.copies == "pinned"
    assert nbytes < 8 or device._stage is not None  # the staging buffer carried it
    device.free(handle)


@needs_opencl
def test_pinned_and_pageable_copies_give_the_same_plan_outputs_on_pocl():
    pinned, pageable = _fresh_device(pinned=True), _fresh_device(pinned=False)
    assert pageable.copies == "pageable"
    c = _compiled([pinned])
    inputs = _inputs(c)
    out = execute(c.plan, [pinned], inputs, timed=False).outputs
    assert _equal(out, execute(_compiled([pageable]).plan, [pageable], inputs).outputs)
    assert pinned._stage is not None and pinned.copies == "pinned"


@needs_opencl
def test_a_runtime_that_refuses_pinned_memory_falls_back_to_pageable_copies(monkeypatch):
    import pyopencl as cl

    device = _fresh_device(pinned=True)

    def refuse(*args, **kwargs):
        raise cl.MemoryError("no page-locked memory")

    monkeypatch.setattr(cl, "enqueue_map_buffer", refuse)
    data = np.linspace(0, 1, 300, dtype=np.float32)
    back = device.download(device.upload(data), Buffer(data.shape, DType.F32))
    assert np.array_equal(back, data) and device.copies == "pageable" and device._stage is None


@needs_opencl
def test_freed_buffers_are_kept_by_size_for_reuse_within_a_limit():
    device = _fresh_device()
    a = device.alloc(Buffer((64,), DType.F32))
    device.free(a)
    assert device.alloc(Buffer((64,), DType.F32)) is a  # same size: the kept one
    assert device.alloc(Buffer((32,), DType.F32)) is not a
    device.spare_bytes = 256
    b, c = (device.alloc(Buffer((64,), DType.F32)) for _ in range(2))
    device.free(b)
    device.free(c)  # over the limit: released
    assert device._kept == 256 and device._spare == {256: [b]}
    device.trim()
    assert device._kept == 0 and not device._spare


def _host_plan():
    """A plan on the numpy device with an intermediate host buffer between two launches."""
    from engine.devices import NumpyDevice

    device = NumpyDevice()
    c = compile_program(_program(), [device], Options(execute=False, tune=False, tune_cache=False))
    made = {s.value for s in c.plan.steps if isinstance(s, Allocate) and s.input is None}
    freed = {s.value for s in c.plan.steps if isinstance(s, Free)}
    assert made & freed, "the plan should free an intermediate host buffer"
    return c, device


def test_a_session_keeps_intermediate_host_buffers_and_returns_new_outputs_by_default():
    c, device = _host_plan()
    inputs = _inputs(c)
    with Session(c.plan, [device]) as session:
        first = session.run(inputs)
        kept = {v: id(a) for v, a in session._host.items()}
        assert kept and not set(kept) & set(c.plan.outputs.values())  # intermediates only
        inputs["x"][0] += 1.0
        second = session.run(inputs)
        assert {v: id(a) for v, a in session._host.items()} == kept  # the same buffers, written again
        assert _equal(second.outputs, execute(c.plan, [device], inputs).outputs)
        assert not _equal(first.outputs, second.outputs)  # the first run's arrays were not overwritten
        assert all(not np.shares_memory(first.outputs[k], second.outputs[k]) for k in first.outputs)


def test_reuse_outputs_overwrites_the_previous_runs_arrays_with_correct_results():
    c, device = _host_plan()
    inputs = _inputs(c)
    with Session(c.plan, [device], reuse_outputs=True) as session:
        first = session.run(inputs)
        inputs["x"][:, 3] = -7.0
        second = session.run(inputs)
        assert all(np.shares_memory(first.outputs[k], second.outputs[k]) for k in first.outputs)
        assert _equal(second.outputs, execute(c.plan, [device], inputs).outputs)
    assert not session._host  # close lets go of them


@needs_opencl
@pytest.mark.parametrize("resident", [False, True])
def test_a_compilation_for_resident_inputs_prices_and_runs_its_uploads_once(resident, monkeypatch):
    """With ``resident_inputs`` the plan's uploads of inputs are priced at nothing and its runs (the compilation's
    and a what-if's) go through one session each, so each input is uploaded once, as priced; from host arrays
    every run uploads them.  Both verify."""
    device = _fresh_device()
    uploads: list[int] = []
    upload = device.upload
    monkeypatch.setattr(device, "upload", lambda array: uploads.append(array.nbytes) or upload(array))
    c = compile_program(_program(), [device], Options(tune=False, tune_cache=False, resident_inputs=resident))
    inputs = len(c.program.inputs)
    assert c.verification.ok and len(c.resident) == (inputs if resident else 0)
    copied = [s for s in c.plan.steps if isinstance(s, Copy) and s.target[1] == device.pool]
    assert len(copied) == inputs and all((s.predicted == 0.0) == resident for s in copied)
    assert len(uploads) == (1 if resident else PLAN_RUNS) * inputs
    uploads.clear()
    measured = run_what_if(c, what_if(c, Pins()).compilation, repeats=2)
    assert measured.verification.ok and len(uploads) == (2 if resident else 4) * inputs

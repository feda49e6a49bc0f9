"""The variant space and cost model around the local-memory (smem) variant: seeds, actions, ranking."""

from __future__ import annotations

import math
from types import SimpleNamespace

from engine.devices.base import Nominal
from engine.kernel.schedule import Variant, variant_error
from engine.tuning.model import BROADCAST, CPU_GATHER, GATHER, load_instructions, predict, suggest
from engine.tuning.search import Trial, TuneResult
from engine.tuning.space import neighbours, seeds, valid
from tests.kernel.test_opencl import matmul_kernel, variant_kernels

BIG = matmul_kernel(4096, 4096, 4096)
STAGED = Variant(local_size=512, upcast=4, tile=8, unroll=4, smem=32)


def fake_gpu() -> SimpleNamespace:
    """What ``predict`` reads of an OpenCL GPU (an H200's unit count; nominal speeds as ``nominal`` gives)."""
    nominal = Nominal(bandwidth=4e12, throughput=132 * 1.98e9 * 64, overhead=5e-6, transfer_bandwidth=5e10,
                      transfer_overhead=1e-5, units=132, lanes=1)
    return SimpleNamespace(nominal=nominal, is_gpu=True, tunable=True, estimate=lambda k: 0.0,
                           variant_error=variant_error, seeds=lambda k: [])


def test_gpu_seeds_start_with_staged_tiles():
    out = seeds(BIG, gpu=True)
    assert all(valid(BIG, v) for v in out) and len(set(out)) == len(out)
    staged = [i for i, v in enumerate(out) if v.smem]
    assert STAGED in out and len(staged) == 4
    assert max(staged) < min(i for i, v in enumerate(out) if v.tile > 1 and not v.smem)  # timed first
    assert not any(v.smem for v in seeds(BIG, gpu=False))
    assert not any(v.smem for v in seeds(variant_kernels()["reduce_max_rows"], gpu=True))


def test_actions_reach_and_leave_staging():
    blocked = Variant(local_size=256, upcast=4, tile=8, unroll=4)
    assert replace_smem(blocked, 8) in neighbours(BIG, blocked)
    around = neighbours(BIG, STAGED)
    assert replace_smem(STAGED, 16) in around and all(valid(BIG, v) for v in around)
    assert {v.local_size for v in around if v.smem} >= {256, 1024}
    assert valid(BIG, STAGED)
    assert not valid(matmul_kernel(64, 64, 16), replace_smem(STAGED, 32))  # a tile deeper than the reduce
    assert not valid(BIG, Variant(local_size=256, upcast=4, tile=8, unroll=8, smem=4))  # unroll past the tile


def replace_smem(v: Variant, depth: int) -> Variant:
    return Variant(v.local_size, v.upcast, v.tile, v.unroll, v.group, depth)


def test_cost_model_prefers_staged_operands():
    registers = Variant(local_size=64, upcast=8, tile=8, unroll=2)  # the best before smem on the H200
    staged, _ = load_instructions(BIG, STAGED)
    unstaged, _ = load_instructions(BIG, Variant(local_size=512, upcast=4, tile=8, unroll=4))
    assert staged < unstaged / 1.5 and staged < load_instructions(BIG, registers)[0]
    gpu = fake_gpu()
    assert math.isfinite(predict(BIG, gpu, STAGED)) and predict(BIG, gpu, STAGED) <= predict(BIG, gpu, registers)
    assert variant_error(BIG, suggest(BIG, gpu)) is None


def test_staged_results_round_trip():
    trial = Trial(STAGED, "ok", 4.6e-3, 2e-3, times=(4.6e-3,))
    result = TuneResult("k", "d", (trial,), STAGED, 4.6e-3, 1.0)
    back = TuneResult.from_json("k", "d", result.to_json(), "hit")
    assert back.best == STAGED and back.trials[0].variant.smem == 32


def test_on_a_gpu_an_operand_neighbouring_work_items_read_far_apart_costs_a_sector_each():
    upcast = Variant(local_size=256, upcast=4)
    plain, transposed = matmul_kernel(512, 2048, 1024), matmul_kernel(512, 2048, 1024, tb=True)
    # per reduce step: b's 4 lanes (neighbouring items 4 apart: one float4 each), a read alike by all items
    assert load_instructions(plain, upcast, gpu=True)[0] == (4 + BROADCAST) * 1024
    # transposed, b's lanes are 4 rows 1024 floats apart: each a sector of its own per item
    assert load_instructions(transposed, upcast, gpu=True)[0] == (4 * GATHER + BROADCAST) * 1024
    gpu = fake_gpu()
    assert predict(transposed, gpu, upcast) > 2 * predict(plain, gpu, upcast)
    # a CPU's runtime vectorises across work items: b's 4 lanes, 4 apart from one item to the next, are gathered
    assert load_instructions(plain, upcast)[0] == (1 + 4 * CPU_GATHER) * 1024
    assert load_instructions(matmul_kernel(512, 2048, 1024), Variant(local_size=256))[0] == 2 * 1024  # side by side

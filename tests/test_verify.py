"""The verification tolerance: correct float sums in another order pass, wrong results do not."""

from __future__ import annotations

import numpy as np

from engine import Init, Tensor, from_tensors
from engine.pipeline import longest_sum, verify
from engine.program.reference import evaluate


def _matmul(k: int):
    a = Tensor.input("a", (64, k), init=Init.normal(seed=1))
    b = Tensor.input("b", (k, 64), init=Init.normal(seed=2))
    return from_tensors([(a @ b).named("c")], "mm", "")


def test_longest_sum_counts_the_terms_of_the_widest_reduce_sum():
    assert longest_sum(_matmul(4096).lower()) == 4096
    x = Tensor.input("x", (8, 8))
    assert longest_sum(from_tensors([x.relu().named("y")], "e", "").lower()) == 1


def test_an_exactly_rounded_fp32_matmul_passes_though_it_is_outside_the_plain_f32_tolerance():
    program = _matmul(16384)
    values = program.input_values()
    reference = evaluate(program.lower(), values)
    exact = (values["a"].astype(np.float64) @ values["b"].astype(np.float64)).astype(np.float32)
    rtol, atol = 2e-4, 2e-5  # f32's own tolerance: BLAS's fp32 sums are further than atol from exact near zero
    assert not np.allclose(exact, reference["c"], rtol=rtol, atol=atol)
    check = verify({"c": exact}, reference, program).outputs[0]
    assert check.ok and check.atol > atol


def test_wrong_results_still_fail():
    program = _matmul(4096)
    values = program.input_values()
    reference = evaluate(program.lower(), values)
    wrong = reference["c"].copy()
    wrong[3, 5] += 0.01 * float(np.sqrt(np.mean(wrong**2)))
    assert not verify({"c": wrong}, reference, program).ok
    x = Tensor.input("x", (4, 4096), init=Init.normal(seed=3))
    softmax = from_tensors([x.softmax(-1).named("y")], "softmax", "")
    want = evaluate(softmax.lower(), softmax.input_values())
    assert not verify({"y": np.zeros_like(want["y"])}, want, softmax).ok  # small outputs gain nothing
    assert verify(want, want, softmax).ok

"""The kernelizer's fusion decisions, asserted on the kernel IR of real programs."""

from __future__ import annotations

import pytest

import sample_graphs
from engine import Tensor, from_tensors, load
from engine.egraph import from_program, saturate
from engine.kernel.ir import Kernel, Load, Op, Where, schedule
from engine.kernel.kernelize import Kernelization, kernelize

SMALL = [n for n in sample_graphs.names() if n.endswith(".small")]


def kernelized(program) -> Kernelization:
    egraph = from_program(program)
    saturate(egraph)
    return kernelize(egraph)


def default_chain(kz: Kernelization) -> list[Kernel]:
    """The kernels of the default candidates needed by the outputs (first candidate of each class)."""
    out, seen = [], set()
    stack = list(kz.egraph.output_classes().values())
    while stack:
        c = kz.egraph.find(stack.pop())
        if c in seen or not kz.kernels(c):
            continue
        seen.add(c)
        cand = kz.kernels(c)[0]
        out.append(cand.kernel)
        stack.extend(cand.inputs)
    return out


def test_elementwise_chain_is_one_kernel():
    x = Tensor.input("x", (64, 32))
    y = ((x * 2 + 1).relu() * x - (-x).exp()).named("y")
    (kernel,) = default_chain(kernelized(from_tensors([y])))
    assert kernel.reduce is None and len(kernel.inputs) == 1
    ops = [e.op for e in schedule(kernel.outputs) if isinstance(e, Op)]
    assert {"mul", "add", "relu", "sub", "exp2", "neg"} <= set(ops)


def test_elementwise_sample_is_one_kernel():
    assert len(default_chain(kernelized(load(sample_graphs.path("elementwise.small"))))) == 1


@pytest.mark.parametrize("name", ["softmax.small", "layernorm.small"])
def test_normalisations_take_at_most_three_kernels(name):
    kernels = default_chain(kernelized(load(sample_graphs.path(name))))
    assert 1 <= len(kernels) <= 3
    assert sum(k.reduce is not None for k in kernels) == len(kernels) - 1  # all but the final elementwise one


def test_softmax_recomputes_the_shared_exponential():
    x = Tensor.input("x", (8, 16))
    kernels = default_chain(kernelized(from_tensors([x.softmax().named("y")])))
    assert len(kernels) == 3
    exps = [k for k in kernels if any(isinstance(e, Op) and e.op == "exp2" for e in schedule(k.exprs()))]
    assert len(exps) == 2  # the sum kernel and the final division both compute exp, neither stores it


def test_bias_and_relu_fuse_into_the_matmul():
    x = Tensor.input("x", (8, 16))
    w = Tensor.input("w", (16, 4))
    b = Tensor.input("b", (4,))
    (kernel,) = default_chain(kernelized(from_tensors([(x @ w + b).relu().named("y")])))
    assert kernel.reduce is not None and kernel.reduce.op == "sum"
    assert [e.op for e in schedule(kernel.outputs) if isinstance(e, Op)] == ["add", "relu"]


def test_a_reduce_shared_by_two_consumers_is_stored():
    x = Tensor.input("x", (8, 16))
    s = x.sum(1).relu()
    kz = kernelized(from_tensors([(s * 2).named("a"), (s + 1).named("b")]))
    kernels = default_chain(kz)
    assert len(kernels) == 3 and sum(k.reduce is not None for k in kernels) == 1


def test_a_second_reduce_in_one_expression_is_stored():
    x = Tensor.input("x", (8, 16))
    y = (x.sum(1) + x.max(1)).named("y")
    kernels = default_chain(kernelized(from_tensors([y])))
    assert len(kernels) == 2 and all(k.reduce is not None for k in kernels)


def test_views_are_index_arithmetic_not_copies():
    x = Tensor.input("x", (4, 6))
    y = (x.transpose().reshape((3, 8)).pad(((1, 0), (0, 2))) * 3).named("y")
    (kernel,) = default_chain(kernelized(from_tensors([y])))
    (load_,) = kernel.loads()
    assert load_.input == 0 and not load_.index.is_affine  # the reshape of a transpose needs div/mod
    assert any(isinstance(e, Where) for e in schedule(kernel.outputs))  # the pad is a bound check


@pytest.mark.parametrize("name", SMALL)
def test_no_kernel_copies_a_view(name):
    """Views never materialise: no kernel only moves data, unless it stores a program output."""
    kz = kernelized(load(sample_graphs.path(name)))
    outputs = set(kz.egraph.output_classes().values())
    for cand in kz.candidates.values():
        (value,) = cand.kernel.outputs
        if cand.output not in outputs:
            assert not isinstance(value, Load), f"{name}: c{cand.output} is a copy kernel\n{cand.kernel}"
        for c in cand.inputs:  # every kernel input is something that must be in memory
            region = kz.egraph.node(kz.defaults[c])
            assert region.op == "leaf" or c in outputs or kz.kernels(c), (name, c)


def test_transpose_fusion_gives_competing_kernels():
    kz = kernelized(load(sample_graphs.path("transpose_fusion.small")))
    (out,) = kz.egraph.output_classes().values()
    roots = {kz.egraph.node(cand.root).op for cand in kz.kernels(out)}
    assert {"reduce_sum", "permute"} <= roots  # T(A)@T(B) and T(B@A), both kernelized


@pytest.mark.parametrize("name", SMALL)
def test_every_sample_kernelizes(name):
    kz = kernelized(load(sample_graphs.path(name)))
    for c in kz.egraph.output_classes().values():
        assert kz.kernels(c) or kz.egraph.node(kz.defaults[c]).op == "leaf"
    assert all(len(cand.kernel.outputs) == 1 for cand in kz.candidates.values())


def test_equal_kernels_for_different_classes_are_separate_candidates():
    """out0 = cast(a) * out1 and out1 = cast(a) * b have one kernel text, but compute two classes."""
    a, b = Tensor.input("a", (), "bool"), Tensor.input("b", ())
    out1 = a.cast("f32") * b
    kz = kernelized(from_tensors({"out0": a.cast("f32") * out1.sum(()), "out1": out1.sum(())}))
    for c in kz.egraph.output_classes().values():
        assert kz.kernels(c)
    keys = [cand.kernel.key for cand in kz.candidates.values()]
    assert len(set(keys)) < len(keys)

"""The kernelizer's decisions as data (fusion rules, boundaries, store-vs-recompute, refusing devices) and the
kernels' readable names, on tiny programs."""

from __future__ import annotations

import pytest

import sample_graphs
from engine import Tensor, from_tensors, load
from engine.devices.numpy_device import LibraryDevice, NumpyDevice
from engine.kernel.attach import attach
from engine.kernel.cost import work
from engine.kernel.decisions import Sharing, decision_lines
from engine.kernel.kernelize import Candidate, Kernelization
from tests.kernel.test_kernelize import SMALL, kernelized


def default(kz: Kernelization, tensor: str) -> Candidate:
    """The default candidate of the class holding program tensor ``tensor``."""
    node, _ = kz.egraph.tensors[tensor]
    return kz.kernels(node)[0]


def reasons(cand: Candidate) -> dict[int, str]:
    return {b.cls: b.reason for b in cand.decisions.boundaries}


def test_a_second_reduce_is_a_boundary_with_its_reason():
    x = Tensor.input("x", (8, 16))
    kz = kernelized(from_tensors([(x.sum(1) + x.max(1)).named("y")]))
    cand = default(kz, "y")
    assert sorted(reasons(cand).values()) == ["input", "second-reduce"]
    assert [f.rule for f in cand.decisions.fused].count("reduce") == 1


def test_a_broadcast_reduce_is_a_boundary():
    x = Tensor.input("x", (8, 16))
    kz = kernelized(from_tensors([x.softmax().named("y")]))
    assert "broadcast" in reasons(default(kz, "y")).values()


def test_a_shared_reduce_is_stored_with_its_numbers():
    x = Tensor.input("x", (8, 16))
    s = x.sum(1).relu()
    kz = kernelized(from_tensors([(s * 2).named("a"), (s + 1).named("b")]))
    cand = default(kz, "a")
    (sharing,) = cand.decisions.sharing
    shared = kz.egraph.find(kz.egraph.tensors["t1"][0])
    assert reasons(cand)[sharing.cls] == "shared" and sharing.cls == shared
    # 8 f32 values written once and read by 2 consumers; recomputing repeats 8 rows of 16 adds + 1 relu once more
    assert sharing == Sharing(shared, 2, True, True, 8 * 4 * 3, 8 * 17)
    assert any("stored (it holds a reduce); store 96 B traffic vs recompute 136 more ops" in line
               for line in decision_lines(cand.decisions, work(cand.kernel), {}, ()))


def test_a_shared_elementwise_value_is_recomputed():
    x = Tensor.input("x", (8, 16))
    e = (x * 3).exp()
    kz = kernelized(from_tensors([(e + e.sum(1, keepdim=True)).named("y")]))
    (sharing,) = default(kz, "y").decisions.sharing  # the exponential, read by the add and by the sum
    assert not sharing.stored and not sharing.holds_reduce and sharing.users == 2
    assert sharing.cls not in reasons(default(kz, "y"))


def test_a_device_that_cannot_run_a_kernel_says_why():
    x = Tensor.input("x", (8, 16))
    kz = kernelized(from_tensors([(x * 2).relu().named("y")]))
    attached = attach(kz, [NumpyDevice(), LibraryDevice()])
    (cand_id,) = kz.candidates
    ((device, reason),) = attached.refused[cand_id].items()
    assert device == LibraryDevice().name and "not a contraction" in reason


def test_names_say_what_a_kernel_computes():
    x = Tensor.input("x", (8, 16))
    w = Tensor.input("w", (16, 4))
    b = Tensor.input("b", (4,))
    kz = kernelized(from_tensors([(x @ w + b).relu().named("y")]))
    assert list(kz.names.values()) == ["matmul_t0+add_t1+relu_y"]


def test_a_kernel_of_no_tensors_value_is_named_by_its_origin_and_reduce():
    x = Tensor.input("x", (8, 16))
    kz = kernelized(from_tensors([x.softmax().named("y")]))
    assert sorted(kz.names.values()) == ["softmax_y", "softmax_y/row", "y.max", "y.sum"]


@pytest.mark.parametrize("name", SMALL)
def test_names_are_unique_and_deterministic(name):
    first = kernelized(load(sample_graphs.path(name))).names
    assert len(set(first.values())) == len(first)
    assert kernelized(load(sample_graphs.path(name))).names == first

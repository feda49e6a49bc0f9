"""Our e-graphs exported as egraph-serialize: valid for our importer, and the same extraction problem."""

from __future__ import annotations

import json

import pytest

import engine
import sample_graphs
from engine.devices import LibraryDevice, NumpyDevice, discover
from engine.interop import egraph_document, extract, parse_serialized, problem_document
from engine.pipeline import Options, compile_program, transfer_estimate


def _compiled(name: str, opencl: bool = False):
    program = engine.load(sample_graphs.path(name))
    devices = discover(opencl=opencl) if opencl else [NumpyDevice(), LibraryDevice()]
    return compile_program(program, devices, Options(tune=False, tune_cache=False, execute=False, extractor="ilp"))


def test_the_egraph_exports_class_for_class():
    c = _compiled("attention.small")
    eg = c.egraph
    doc = json.loads(json.dumps(egraph_document(eg)))  # plain JSON: no inf, no tuples
    fg = parse_serialized(doc)
    assert len(fg.classes) == eg.num_classes and len(fg.nodes) == sum(len(k.nodes) for k in eg.classes())
    assert set(fg.roots) == {f"c{k}" for k in eg.output_classes().values()}
    for cls in list(eg.classes())[:200]:
        for n in cls.nodes:
            fn = fg.nodes[f"n{n}"]
            assert fn.eclass == f"c{cls.id}"
            assert fg.child_classes(fn) == tuple(f"c{ch}" for ch in eg.node(n).children)
            assert fn.subsumed == (eg.node(n).op in ("kernel", "to_device"))
    shape = eg.eclass(next(iter(eg.output_classes().values()))).shape
    assert all(str(d) in fg.type_of(fg.roots[0]) for d in shape)


@pytest.mark.parametrize(("name", "opencl"), [("mlp.small", False), ("softmax.small", False),
                                             ("residual_mlp.small", False), ("mlp.small", True)])
def test_the_kernelized_problem_extracts_to_the_pipelines_cost(name, opencl):
    """The exported problem (microseconds) has the pipeline's optimum: ILP on the file == ILP in the pipeline."""
    c = _compiled(name, opencl)
    if opencl and len(c.devices) == 2:
        pytest.skip("no OpenCL device (CI installs PoCL)")
    doc = json.loads(json.dumps(problem_document(c.egraph, c.device_pools, c.kernel_times.__getitem__,
                                                 transfer_estimate(c.devices))))
    assert doc["cost_unit"] == "us"
    fg = parse_serialized(doc)
    assert all(r.endswith("@host") for r in fg.roots) and len(fg.roots) == len(set(c.program.outputs))
    r = extract(fg, "ilp")
    assert r.status == "optimal"
    assert r.dag_cost == pytest.approx(c.extraction.dag_cost * 1e6, rel=1e-9)
    kernels = {n.op for n in fg.nodes.values() if not n.subsumed}
    assert any(" on numpy" in op for op in kernels)
    assert any(" from " in op for op in kernels) == opencl  # copies between pools, when there are two
    assert any(n.subsumed for n in fg.nodes.values())  # structural forms ride along, never extracted
    for nid in r.chosen.values():
        assert not fg.nodes[nid].subsumed


def test_infinite_kernel_times_are_left_out():
    c = _compiled("mlp.small")
    pools, tt = c.device_pools, transfer_estimate(c.devices)
    doc = problem_document(c.egraph, pools, lambda kn: float("inf") if kn.device == "numpy" else 1e-6, tt)
    ops = [n["op"] for n in doc["nodes"].values() if not n["subsumed"]]
    assert ops and not any(op.endswith(" on numpy") for op in ops)
    json.dumps(doc, allow_nan=False)  # strict JSON

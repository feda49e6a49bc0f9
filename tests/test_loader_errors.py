"""Malformed graph.json: each mistake is a GraphError of the right kind, at the right place."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

import engine
from engine.errors import CycleError, DTypeError, FormatError, GraphError, InitError, ShapeError, TensorNameError

BASE = {
    "inputs": {"x": {"shape": [4, 8]}, "w": {"shape": [8, 3], "init": {"kind": "uniform", "seed": 1}}},
    "nodes": [
        {"id": "h", "op": "matmul", "args": ["x", "w"]},
        {"id": "y", "op": "softmax", "args": ["h"], "attrs": {"axis": -1}},
    ],
    "outputs": ["y"],
}


def edit(change):
    doc = copy.deepcopy(BASE)
    change(doc)
    return json.dumps(doc)


def node(i, **fields):
    return lambda d: d["nodes"][i].update(fields)


def add_node(**fields):
    return lambda d: d["nodes"].append(fields)


def set_input(name, **fields):
    return lambda d: d["inputs"].setdefault(name, {"shape": [4]}).update(fields)


CASES = [
    # (id, text, error class, location, message fragment)
    ("bad-json", '{"inputs": {},\n "nodes": [1,,2]}', FormatError, "line 2 column 14", "invalid JSON"),
    ("not-object", "[1, 2]", FormatError, "", "expected a JSON object"),
    ("unknown-top-key", edit(lambda d: d.update(ouputs=["y"])), FormatError, "ouputs", "did you mean 'outputs'"),
    ("missing-nodes", edit(lambda d: d.pop("nodes")), FormatError, "", "missing the 'nodes' key"),
    ("missing-outputs", edit(lambda d: d.pop("outputs")), FormatError, "", "missing the 'outputs' key"),
    ("bad-version", edit(lambda d: d.update(version=2)), FormatError, "version", "unsupported version 2"),
    ("duplicate-key", '{"inputs": {}, "inputs": {}}', FormatError, "inputs", "appears twice"),
    ("unknown-op", edit(node(1, op="softmx")), GraphError, "nodes[1].op", "did you mean 'softmax'"),
    ("unknown-arg", edit(node(0, args=["x", "w3"])), TensorNameError, "nodes[0].args[1]", "unknown tensor 'w3'"),
    ("unknown-output", edit(lambda d: d.update(outputs=["z"])), TensorNameError, "outputs[0]", "unknown tensor 'z'"),
    ("duplicate-id", edit(node(1, id="h", args=["x"])), TensorNameError, "nodes[1].id", "duplicate id 'h'"),
    ("id-is-input", edit(node(0, id="x")), TensorNameError, "nodes[0].id", "already the name of an input"),
    ("cycle", edit(lambda d: (d["nodes"][0].update(args=["y", "w"]))), CycleError, "nodes[", "cycle: "),
    ("self-loop", edit(add_node(id="z", op="neg", args=["z"])), CycleError, "nodes[2]", "z -> z"),
    ("arity", edit(node(1, args=["h", "x"])), GraphError, "nodes[1].args", "takes 1 tensor argument"),
    ("unknown-attr", edit(node(1, attrs={"axes": 1})), GraphError, "nodes[1].attrs.axes", "no attribute 'axes'"),
    ("missing-attr", edit(add_node(id="r", op="reshape", args=["x"])), GraphError, "nodes[2].attrs", "needs the attribute 'shape'"),
    ("attr-type", edit(node(1, attrs={"axis": "last"})), GraphError, "nodes[1].attrs.axis", "expected an integer"),
    ("attr-bool-not-int", edit(node(1, attrs={"axis": True})), GraphError, "nodes[1].attrs.axis", "expected an integer"),
    ("axis-range", edit(node(1, attrs={"axis": 2})), ShapeError, "nodes[1].attrs.axis", "out of range"),
    ("axes-repeated", edit(add_node(id="s", op="sum", args=["x"], attrs={"axes": [1, -1]})), ShapeError,
     "nodes[2].attrs.axes", "same axis twice"),
    ("input-dtype", edit(set_input("x", dtype="float32")), DTypeError, "inputs.x.dtype", "unknown dtype 'float32'"),
    ("cast-dtype", edit(add_node(id="c", op="cast", args=["x"], attrs={"dtype": "f8"})), DTypeError,
     "nodes[2].attrs.dtype", "unknown dtype 'f8'"),
    ("broadcast", edit(add_node(id="a", op="add", args=["x", "w"])), ShapeError, "nodes[2]", "[4, 8] and [8, 3]"),
    ("matmul-inner", edit(node(0, args=["w", "w"])), ShapeError, "nodes[0]", "[8, 3] @ [8, 3]"),
    ("matmul-rank", edit(set_input("w", shape=[8])), ShapeError, "nodes[0]", "rank >= 2"),
    ("reshape-size", edit(add_node(id="r", op="reshape", args=["x"], attrs={"shape": [5, 7]})), ShapeError,
     "nodes[2].attrs.shape", "(32 elements) to [5, 7] (35 elements)"),
    ("reshape-two-minus-one", edit(add_node(id="r", op="reshape", args=["x"], attrs={"shape": [-1, -1]})),
     ShapeError, "nodes[2].attrs.shape", "at most one"),
    ("permute", edit(add_node(id="p", op="permute", args=["x"], attrs={"axes": [0, 0]})), ShapeError,
     "nodes[2].attrs.axes", "not a permutation"),
    ("expand", edit(add_node(id="e", op="expand", args=["x"], attrs={"shape": [4, 9]})), ShapeError,
     "nodes[2].attrs.shape", "axis 1 has size 8"),
    ("pad-rank", edit(add_node(id="p", op="pad", args=["x"], attrs={"padding": [[1, 1]]})), ShapeError,
     "nodes[2].attrs.padding", "1 pairs for a tensor of rank 2"),
    ("pad-shrink", edit(add_node(id="p", op="pad", args=["x"], attrs={"padding": [[0, 0], [-5, -5]]})),
     ShapeError, "nodes[2].attrs.padding", "below zero"),
    ("pad-type", edit(add_node(id="p", op="pad", args=["x"], attrs={"padding": [1, 2]})), GraphError,
     "nodes[2].attrs.padding", "[before, after]"),
    ("conv-channels", edit(lambda d: (d["inputs"].update(i={"shape": [1, 3, 8, 8]}, k={"shape": [4, 2, 3, 3]}),
                                      d["nodes"].append({"id": "c", "op": "conv2d", "args": ["i", "k"]}))),
     ShapeError, "nodes[2]", "channels differ"),
    ("attention", edit(lambda d: d["nodes"].append({"id": "a", "op": "attention", "args": ["x", "w", "w"]})),
     ShapeError, "nodes[2]", "differ in the last axis"),
    ("not-on-float", edit(add_node(id="n", op="not", args=["x"])), DTypeError, "nodes[2]", "needs a bool tensor"),
    ("init-kind", edit(set_input("x", init={"kind": "gaussian"})), InitError, "inputs.x.init.kind", "unknown init kind"),
    ("init-seed", edit(set_input("x", init={"kind": "normal", "seed": -1})), InitError, "inputs.x.init.seed",
     "non-negative integer"),
    ("init-missing-seed", edit(set_input("x", init={"kind": "normal"})), InitError, "inputs.x.init", "needs the parameter 'seed'"),
    ("init-extra", edit(set_input("x", init={"kind": "zeros", "value": 1})), InitError, "inputs.x.init.value",
     "has no parameter 'value'"),
    ("init-values-shape", edit(set_input("b", shape=[3], init={"kind": "values", "values": [1, 2]})), InitError,
     "inputs.b.init.values", "shape [2]"),
    ("init-values-ragged", edit(set_input("b", shape=[2, 2], init={"kind": "values", "values": [[1, 2], [3]]})),
     InitError, "inputs.b.init.values", "ragged"),
    ("init-npy-missing", edit(set_input("x", init={"kind": "npy", "path": "nope.npy"})), InitError,
     "inputs.x.init.path", "file not found"),
    ("npy-shape", edit(set_input("x", init={"kind": "npy", "path": "w.npy"})), InitError, "inputs.x.init.path",
     "holds shape [2, 2]"),
    ("negative-dim", edit(set_input("x", shape=[4, -8])), ShapeError, "inputs.x.shape", ">= 0"),
    ("shape-not-ints", edit(set_input("x", shape=[4, 8.5])), ShapeError, "inputs.x.shape", "list of integers"),
    ("input-not-object", edit(lambda d: d["inputs"].update(x=[4, 8])), FormatError, "inputs.x", "expected an object"),
    ("input-unknown-key", edit(set_input("x", shpe=[1])), FormatError, "inputs.x.shpe", "did you mean 'shape'"),
    ("node-not-object", edit(lambda d: d["nodes"].append("relu")), FormatError, "nodes[2]", "expected a node object"),
    ("node-missing-op", edit(add_node(id="q", args=["x"])), FormatError, "nodes[2]", "missing the 'op' key"),
    ("arg-not-string", edit(node(0, args=["x", 3])), FormatError, "nodes[0].args[1]", "expected a tensor name"),
    ("empty-outputs", edit(lambda d: d.update(outputs=[])), FormatError, "outputs", "at least one output"),
    ("output-twice", edit(lambda d: d.update(outputs=["y", "y"])), TensorNameError, "outputs[1]", "listed twice"),
    ("const-bool-value", edit(add_node(id="k", op="const", attrs={"value": 2, "dtype": "bool"})), DTypeError,
     "nodes[2].attrs.value", "true or false"),
    ("const-overflow", edit(add_node(id="k", op="const", attrs={"value": 2**40, "dtype": "i32"})), DTypeError,
     "nodes[2].attrs.value", "out of range for dtype i32"),
    ("const-int-fraction", edit(add_node(id="k", op="const", attrs={"value": 1.5, "dtype": "i32"})), DTypeError,
     "nodes[2].attrs.value", "integer value"),
]


@pytest.mark.parametrize(("text", "kind", "location", "fragment"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_malformed_input_is_located(tmp_path, text, kind, location, fragment):
    np.save(tmp_path / "w.npy", np.zeros((2, 2), np.float32))
    with pytest.raises(GraphError) as caught:
        engine.loads(text, base_dir=tmp_path)
    err = caught.value
    assert isinstance(err, kind), f"{type(err).__name__}: {err}"
    assert err.location.startswith(location) if location.endswith("[") else err.location == location, str(err)
    assert fragment in err.message, str(err)
    assert "\n" not in str(err)


def test_there_are_many_cases():
    assert len(CASES) >= 40


def test_file_errors_name_the_file(tmp_path):
    missing = tmp_path / "missing.json"
    with pytest.raises(GraphError, match="no such file") as caught:
        engine.load(missing)
    assert str(caught.value).startswith(str(missing))
    with pytest.raises(GraphError, match="is a directory"):
        engine.load(tmp_path)
    binary = tmp_path / "binary.json"
    binary.write_bytes(b"\xff\xfe{}")
    with pytest.raises(FormatError, match="not UTF-8"):
        engine.load(binary)
    bad = tmp_path / "bad.json"
    bad.write_text(edit(node(0, args=["x", "w3"])))
    with pytest.raises(GraphError) as caught:
        engine.load(bad)
    assert str(caught.value) == f"{bad}: nodes[0].args[1]: unknown tensor 'w3' (did you mean 'w'?)"


def test_nodes_may_be_listed_in_any_order():
    doc = copy.deepcopy(BASE)
    doc["nodes"].reverse()
    program = engine.loads(json.dumps(doc))
    assert [n.id for n in program.nodes] == ["h", "y"]

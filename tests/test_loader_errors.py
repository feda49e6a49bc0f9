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
    ("cycle", edit(node(0, args=["y", "w"])), CycleError, "nodes[0]", "cycle: h -> y -> h"),
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
    ("matmul-rank", edit(set_input("w", shape=[])), ShapeError, "nodes[0]", "rank >= 1"),
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
     ShapeError, "nodes[2]", "x [1, 3, 8, 8] has 3, weight [4, 2, 3, 3] has 2"),
    ("attention", edit(lambda d: d["nodes"].append({"id": "a", "op": "attention", "args": ["x", "w", "w"]})),
     ShapeError, "nodes[2]", "q [4, 8] and k [8, 3] differ in the last axis"),
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
     "nodes[2].attrs.value", "constant 1099511627776 does not fit dtype i32"),
    ("const-int-fraction", edit(add_node(id="k", op="const", attrs={"value": 1.5, "dtype": "i32"})), DTypeError,
     "nodes[2].attrs.value", "integer value"),
    # Found while writing these cases (each used to escape as a non-GraphError or lose its location).
    ("missing-inputs", edit(lambda d: d.pop("inputs")), FormatError, "", "missing the 'inputs' key"),
    ("version-true", edit(lambda d: d.update(version=True)), FormatError, "version", "unsupported version True"),
    ("duplicate-nested-key", edit(lambda d: None).replace('"axis": -1', '"axis": -1, "axis": 0'), FormatError,
     "nodes[1].attrs.axis", "the key 'axis' appears twice"),
    ("too-deep", "[" * 100_000, FormatError, "", "nested too deeply"),
    ("huge-integer", '{"version": 1' + "0" * 5000 + "}", FormatError, "", "invalid JSON"),
    ("expand-negative", edit(add_node(id="e", op="expand", args=["x"], attrs={"shape": [4, -1]})), ShapeError,
     "nodes[2].attrs.shape", "cannot expand [4, 8] to [4, -1]"),
    ("const-huge-int", edit(add_node(id="k", op="const", attrs={"value": 10**400, "dtype": "i32"})), DTypeError,
     "nodes[2].attrs.value", "does not fit dtype i32"),
    ("pad-value-overflow", edit(lambda d: (d["inputs"].update(b={"shape": [4], "dtype": "i32"}),
                                           d["nodes"].append({"id": "p", "op": "pad", "args": ["b"],
                                                              "attrs": {"padding": [[1, 1]], "value": 2**40}}))),
     DTypeError, "nodes[2].attrs.value", "pad value 1099511627776 does not fit dtype i32"),
    ("pad-value-huge", edit(add_node(id="p", op="pad", args=["x"], attrs={"padding": [[0, 0], [1, 1]], "value": 10**400})),
     DTypeError, "nodes[2].attrs.value", "does not fit dtype f32"),
    ("matmul-batch", edit(lambda d: (d["inputs"].update(a={"shape": [2, 4, 8]}, b={"shape": [3, 8, 3]}),
                                     d["nodes"].append({"id": "m", "op": "matmul", "args": ["a", "b"]}))),
     ShapeError, "nodes[2]", "[2, 4, 8] @ [3, 8, 3]"),
    ("attention-batch", edit(lambda d: (d["inputs"].update(q={"shape": [2, 4, 8]}, k={"shape": [3, 4, 8]}),
                                        d["nodes"].append({"id": "a", "op": "attention", "args": ["q", "k", "k"]}))),
     ShapeError, "nodes[2]", "q [2, 4, 8], k [3, 4, 8] and v [3, 4, 8] do not broadcast"),
    ("init-kind-not-string", edit(set_input("x", init={"kind": ["normal"]})), InitError, "inputs.x.init.kind",
     "unknown init kind ['normal']"),
    ("init-not-object", edit(set_input("x", init=3)), InitError, "inputs.x.init", "expected a string or an object"),
    ("init-full-overflow", edit(set_input("b", dtype="i32", init={"kind": "full", "value": 2**40})), InitError,
     "inputs.b.init.value", "value 1099511627776 does not fit dtype i32"),
    ("init-values-fraction", edit(set_input("b", shape=[2], dtype="i32", init={"kind": "values", "values": [1, 2.5]})),
     InitError, "inputs.b.init.values", "do not fit dtype i32"),
    ("npy-empty-file", edit(set_input("x", init={"kind": "npy", "path": "empty.npy"})), InitError,
     "inputs.x.init.path", "is not a readable .npy file"),
    ("npz-archive", edit(set_input("x", init={"kind": "npy", "path": "w.npz"})), InitError, "inputs.x.init.path",
     "is an .npz archive"),
    ("npy-dtype", edit(set_input("b", shape=[2, 2], dtype="i32", init={"kind": "npy", "path": "w.npy"})), InitError,
     "inputs.b.init.path", "holds dtype float32, which does not convert to i32"),
    ("transpose-dim", edit(add_node(id="t", op="transpose", args=["x"], attrs={"dim0": 5})), ShapeError,
     "nodes[2].attrs.dim0", "axis 5 is out of range for a tensor of rank 2"),
    ("layernorm-arity", edit(add_node(id="n", op="layernorm", args=["x", "x", "x", "x"])), GraphError,
     "nodes[2].args", "takes 1 to 3 tensor argument(s), got 4"),
]


@pytest.mark.parametrize(("text", "kind", "location", "fragment"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_malformed_input_is_located(tmp_path, text, kind, location, fragment):
    np.save(tmp_path / "w.npy", np.zeros((2, 2), np.float32))
    np.savez(tmp_path / "w.npz", w=np.zeros((4, 8), np.float32))
    (tmp_path / "empty.npy").write_bytes(b"")
    with pytest.raises(GraphError) as caught:
        engine.loads(text, base_dir=tmp_path)
    err = caught.value
    assert isinstance(err, kind), f"{type(err).__name__}: {err}"
    assert err.location == location, str(err)
    assert fragment in err.message, str(err)
    assert "\n" not in str(err)


def test_there_are_many_cases():
    assert len(CASES) >= 40
    assert len({c[0] for c in CASES}) == len(CASES)


def _write(name, data):
    def make(folder):
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode() if isinstance(data, str) else data)
        return path

    return make


def _mkdir(folder):
    (folder / "graph.json").mkdir()
    return folder / "graph.json"


def _npy_beside_graph(folder):
    """A relative .npy path is resolved against the graph file's folder, not the working directory."""
    path = _write("sub/graph.json", edit(set_input("x", init={"kind": "npy", "path": "w.npy"})))(folder)
    np.save(path.parent / "w.npy", np.zeros((2, 2), np.float32))
    return path


FILE_CASES = [
    # (id, make the file under tmp_path, error class, location, message fragment)
    ("missing", lambda folder: folder / "missing.json", GraphError, "", "no such file"),
    ("directory", _mkdir, GraphError, "", "is a directory"),
    ("not-utf8", _write("graph.json", b'{"inputs": {}\xff}'), FormatError, "", "not UTF-8 text (byte 13)"),
    ("bad-json", _write("graph.json", '{\n  "inputs": {},\n  oops\n}'), FormatError, "line 3 column 3", "invalid JSON"),
    ("bad-graph", _write("graph.json", edit(node(0, args=["x", "w3"]))), TensorNameError, "nodes[0].args[1]",
     "unknown tensor 'w3'"),
    ("npy-beside-file", _npy_beside_graph, InitError, "inputs.x.init.path", "sub/w.npy holds shape [2, 2]"),
]


@pytest.mark.parametrize(("make", "kind", "location", "fragment"), [c[1:] for c in FILE_CASES],
                         ids=[c[0] for c in FILE_CASES])
def test_file_errors_name_the_file(tmp_path, make, kind, location, fragment):
    path = make(tmp_path)
    with pytest.raises(GraphError) as caught:
        engine.load(path)
    err = caught.value
    assert isinstance(err, kind), f"{type(err).__name__}: {err}"
    assert err.location == location, str(err)
    assert fragment in err.message, str(err)
    assert err.source == str(path)
    assert str(err).startswith(f"{path}: "), str(err)


def test_str_is_file_location_message(tmp_path):
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

"""Fuzzing graph.json: malformed and adversarial documents give a located GraphError, never another exception.

Mutations of the real samples (a value anywhere replaced by one of another type, a huge
number, NaN/Inf, deep nesting, an empty list...), huge and zero-size shapes, non-finite
constants, random node references (cycles through any chain of aliases), and the size limits.
"""

from __future__ import annotations

import copy
import json
import math
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

import sample_graphs
from engine import GraphError, Program, loads
from engine.errors import CycleError, FormatError, InitError, ShapeError
from engine.program.attrs import encode_specials
from engine.program.loader import SizeLimits

FUZZ = settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
SMALL = ["mlp.small", "attention.small", "conv_relu.small", "layernorm.small", "softmax.small", "swiglu_mlp.small"]
DOCS = {name: json.loads(sample_graphs.path(name).read_text()) for name in SMALL}
SOURCE = "fuzz.json"


def located(error: GraphError, doc: Any) -> None:
    """The error names the file, and a place that exists in the document (or the whole document)."""
    assert error.source == SOURCE
    assert str(error).startswith(f"{SOURCE}: ")
    loc = error.location
    if not loc or loc.startswith("line "):
        return
    assert isinstance(doc, dict), loc
    assert any(loc == k or loc.startswith((f"{k}.", f"{k}[")) for k in doc), f"location {loc!r} is not in the document"


def outcome(doc: Any, limits: SizeLimits | None = None, text: str | None = None) -> Program | GraphError:
    """The program, or the GraphError (checked located); any other exception fails the test."""
    try:
        return loads(json.dumps(doc) if text is None else text, source=SOURCE, limits=limits or SizeLimits())
    except GraphError as e:
        located(e, doc)
        return e


# -- mutations of real programs --------------------------------------------------------------

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.sampled_from([0, -1, 1, 2**31, 2**63, -(2**63)]),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=8), st.sampled_from(["f32", "x", "", "nodes"]),
)
json_values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                            st.dictionaries(st.text(max_size=6), inner, max_size=4)),
                           max_leaves=12)


def paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path into a decoded JSON value (dict keys and list indices)."""
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += paths(v, (*prefix, i))
    return out


def replaced(doc: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    doc = copy.deepcopy(doc)
    target = doc
    for p in path[:-1]:
        target = target[p]
    target[path[-1]] = value
    return doc


@st.composite
def mutated(draw) -> Any:
    doc = DOCS[draw(st.sampled_from(SMALL))]
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(paths(doc)))
        action = draw(st.sampled_from(["replace", "delete", "wrap", "duplicate"]))
        parent = where[:-1]
        if action == "delete" and where:
            target = copy.deepcopy(doc)
            box = target
            for p in parent:
                box = box[p]
            del box[where[-1]]
            doc = target
        elif action == "wrap":  # the same value one level deeper
            doc = replaced(doc, where, [draw(st.sampled_from([None, 0]))] if not where else [_at(doc, where)])
        elif action == "duplicate" and len(where) >= 2 and isinstance(where[-1], int):
            box = _at(doc, parent)
            doc = replaced(doc, parent, [*box, box[where[-1]]])
        else:
            doc = replaced(doc, where, draw(json_values))
    return doc


def _at(doc: Any, path: tuple) -> Any:
    for p in path:
        doc = doc[p]
    return doc


@seed(1)
@FUZZ
@given(mutated())
def test_mutated_samples(doc):
    result = outcome(doc)
    if isinstance(result, Program):
        result.lower()  # a program that loads also lowers


@seed(2)
@FUZZ
@given(json_values)
def test_arbitrary_json_documents(doc):
    assert isinstance(outcome(doc), GraphError | Program)


@seed(3)
@settings(max_examples=60, deadline=None, derandomize=True)
@given(st.text(alphabet='{}[]",:0123456789.eE-+ tfnaulsrNIy\n\\', max_size=80))
def test_garbage_text(text):
    try:
        loads(text, source=SOURCE)
    except GraphError as e:
        assert e.source == SOURCE


# -- shapes ------------------------------------------------------------------------------------

def _unary(shape: Any, op: str = "relu", attrs: dict | None = None) -> dict:
    node = {"id": "a", "op": op, "args": ["x"], **({"attrs": attrs} if attrs is not None else {})}
    return {"inputs": {"x": {"shape": shape, "init": "zeros"}}, "nodes": [node], "outputs": ["a"]}


@seed(4)
@FUZZ
@given(st.lists(st.integers(0, 2**70), max_size=6), st.sampled_from(["relu", "sum", "exp"]))
def test_huge_shapes_hit_the_size_limit(shape, op):
    result = outcome(_unary(shape, op))
    limit = SizeLimits().tensor_bytes
    if math.prod(shape) * 4 > limit:
        assert isinstance(result, ShapeError) and result.location == "inputs.x.shape"
        assert "limit" in result.message and "bytes" in result.message
    else:
        assert isinstance(result, Program)


@pytest.mark.parametrize("attrs", [{"shape": [2**40, 2**40]}, {"shape": [2**62, 4]}])
def test_an_expand_beyond_the_limit(attrs):
    result = outcome(_unary([1, 1], "expand", attrs))
    assert isinstance(result, ShapeError) and result.location == "nodes[0]" and "limit" in result.message


def test_a_rank_beyond_the_limit():
    result = outcome(_unary([1] * 40))
    assert isinstance(result, ShapeError) and result.location == "inputs.x.shape" and "32 axes" in result.message


@seed(5)
@FUZZ
@given(st.lists(st.integers(0, 3), min_size=1, max_size=4).filter(lambda s: 0 in s),
       st.sampled_from(["relu", "sum", "max", "mean", "softmax", "exp", "neg", "sqrt"]))
def test_zero_size_dims_load_lower_and_evaluate(shape, op):
    from engine import evaluate

    program = outcome(_unary(shape, op))
    if isinstance(program, Program):
        out = evaluate(program.lower(), program.input_values())["a"]
        assert out.shape == program.types()["a"][0]
    else:
        assert isinstance(program, GraphError)  # e.g. max over an empty axis


# -- non-finite constants ----------------------------------------------------------------------

NON_FINITE = [float("nan"), float("inf"), -float("inf")]


@pytest.mark.parametrize("dtype", ["f16", "f32", "f64", "i32", "i64", "bool"])
@pytest.mark.parametrize("value", NON_FINITE, ids=["nan", "inf", "-inf"])
def test_non_finite_constants(dtype, value):
    """NaN and ±Inf, spelled "nan", "inf", "-inf", are float values (kept); integers and bools cannot hold them
    (located errors)."""
    value = encode_specials(value)
    full = {"inputs": {"x": {"shape": [2], "dtype": dtype, "init": {"kind": "full", "value": value}}},
            "nodes": [{"id": "a", "op": "cast", "args": ["x"], "attrs": {"dtype": "f32"}}], "outputs": ["a"]}
    listed = replaced(full, ("inputs", "x", "init"), {"kind": "values", "values": [value, 1]})
    const = {"inputs": {}, "nodes": [{"id": "a", "op": "const", "attrs": {"value": value, "dtype": dtype}}],
             "outputs": ["a"]}
    for doc, where in ((full, "inputs.x.init.value"), (listed, "inputs.x.init.values"), (const, "nodes[0].attrs")):
        result = outcome(doc)
        if dtype.startswith("f"):
            assert isinstance(result, Program), result
            values = result.input_values().get("x")
            if values is not None:
                assert np.isnan(values[0]) if value == "nan" else values[0] == float(value)
        else:
            assert isinstance(result, GraphError) and result.location.startswith(where), (doc, result)


def test_non_standard_json_constants_are_located_errors():
    """Python's NaN and Infinity extensions of JSON are refused where they stand, naming the standard spelling."""
    for token, spelled in (("NaN", "'nan'"), ("Infinity", "'inf'"), ("-Infinity", "'-inf'")):
        text = json.dumps(_unary([2])).replace('"zeros"', '{"kind": "full", "value": ' + token + "}")
        result = outcome(_unary([2]), text=text)
        assert isinstance(result, FormatError) and spelled in result.message, result
        assert result.location == f"line 1 column {text.index(token) + 1}"


def test_overflowing_literals():
    """1e400 overflows f64 and 1e39 f32 (errors, as 3e9 is for i32); an integer beyond i64 does not fit."""
    text = json.dumps(_unary([2])).replace('"zeros"', '{"kind": "full", "value": 1e400}')
    assert isinstance(outcome(_unary([2]), text=text), FormatError)
    doc = replaced(_unary([2]), ("inputs", "x", "init"), {"kind": "full", "value": 1e39})
    assert outcome(doc).location == "inputs.x.init.value"
    const = {"inputs": {}, "nodes": [{"id": "a", "op": "const", "attrs": {"value": 1e39}}], "outputs": ["a"]}
    assert outcome(const).location == "nodes[0].attrs.value"
    assert isinstance(outcome(replaced(const, ("nodes", 0, "attrs", "dtype"), "f64")), Program)
    doc = replaced(_unary([2]), ("inputs", "x"), {"shape": [2], "dtype": "i64", "init": {"kind": "full", "value": 2**64}})
    result = outcome(doc)
    assert isinstance(result, InitError) and result.location == "inputs.x.init.value"


# -- nesting ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("depth", [50, 5_000, 200_000])
@pytest.mark.parametrize("where", ["shape", "values", "attrs", "top"])
def test_deep_nesting(depth, where):
    deep = "[" * depth + "]" * depth
    doc = _unary([2])
    text = {
        "shape": json.dumps(doc).replace("[2]", deep),
        "values": json.dumps(doc).replace('"zeros"', '{"kind": "values", "values": ' + deep + "}"),
        "attrs": json.dumps(_unary([2], "sum", {"axes": 0})).replace('"axes": 0', '"axes": ' + deep),
        "top": deep,
    }[where]
    result = outcome(doc, text=text)
    assert isinstance(result, GraphError)
    if depth > SizeLimits().depth:
        assert isinstance(result, FormatError) and result.location == ""
        assert f"nested too deeply: more than {SizeLimits().depth} levels at line 1 column" in result.message


# -- references: cycles through chains of aliases -------------------------------------------------

@st.composite
def wired(draw) -> tuple[dict, bool]:
    """Nodes whose arguments are drawn among all ids (so forward references and loops occur); is there a cycle?"""
    n = draw(st.integers(1, 8))
    ids = [f"t{i}" for i in range(n)]
    nodes, edges = [], {}
    for i in range(n):
        op = draw(st.sampled_from(["neg", "reshape", "add", "expand", "cast"]))
        arity = 2 if op == "add" else 1
        args = [draw(st.sampled_from(["x", *ids])) for _ in range(arity)]
        attrs = {"reshape": {"shape": [4]}, "expand": {"shape": [4]}, "cast": {"dtype": "f32"}}.get(op)
        nodes.append({"id": ids[i], "op": op, "args": args, **({"attrs": attrs} if attrs else {})})
        edges[ids[i]] = [a for a in args if a != "x"]
    order = draw(st.permutations(range(n)))
    doc = {"inputs": {"x": {"shape": [4]}}, "nodes": [nodes[i] for i in order], "outputs": [ids[0]]}
    return doc, _has_cycle(edges)


def _has_cycle(edges: dict[str, list[str]]) -> bool:
    state: dict[str, int] = {}

    def visit(v: str) -> bool:
        state[v] = 1
        for u in edges[v]:
            if state.get(u) == 1 or (u not in state and visit(u)):
                return True
        state[v] = 2
        return False

    return any(v not in state and visit(v) for v in edges)


@seed(6)
@FUZZ
@given(wired())
def test_reference_cycles(case):
    doc, cyclic = case
    result = outcome(doc)
    if cyclic:
        assert isinstance(result, CycleError) and result.location.startswith("nodes[")
        ids = result.message.removeprefix("cycle: ").split(" -> ")
        assert ids[0] == ids[-1] and len(ids) >= 2
    else:
        assert isinstance(result, Program)


# -- limits ----------------------------------------------------------------------------------------

def test_node_count_limit():
    doc = {"inputs": {"x": {"shape": [2]}},
           "nodes": [{"id": f"n{i}", "op": "neg", "args": ["x" if i == 0 else f"n{i - 1}"]} for i in range(30)],
           "outputs": ["n29"]}
    assert isinstance(outcome(doc, SizeLimits(nodes=30)), Program)
    result = outcome(doc, SizeLimits(nodes=29))
    assert isinstance(result, FormatError) and result.location == "nodes" and "30 nodes" in result.message


def test_file_size_limit(tmp_path):
    from engine import load

    path = tmp_path / "big.json"
    path.write_text(json.dumps(_unary([2])) + " " * 2000)
    assert isinstance(load(path, SizeLimits(file_bytes=4096)), Program)
    with pytest.raises(FormatError, match=r"big.json: .* bytes: more than the limit of 1,000 bytes"):
        load(path, SizeLimits(file_bytes=1000))


def test_total_input_bytes_limit():
    doc = {"inputs": {f"x{i}": {"shape": [1024]} for i in range(4)}, "nodes": [], "outputs": ["x0"]}
    assert isinstance(outcome(doc, SizeLimits(input_bytes=4 * 4096)), Program)
    result = outcome(doc, SizeLimits(input_bytes=4 * 4096 - 1))
    assert isinstance(result, ShapeError) and result.location == "inputs.x3" and "inputs hold" in result.message

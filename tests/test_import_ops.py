"""Mistakes in the ops added for imported models (concat, slice, gather, where, pooling, grouped conv2d) are located."""

from __future__ import annotations

import json

import pytest

import engine
from engine import GraphError


def _program(inputs: dict, op: str, args: list[str], attrs: dict) -> str:
    return json.dumps({"inputs": {name: {"shape": shape, "dtype": dtype} for name, (shape, dtype) in inputs.items()},
                       "nodes": [{"id": "y", "op": op, "args": args, "attrs": attrs}], "outputs": ["y"]})


X = {"x": ([2, 3, 6, 6], "f32")}


@pytest.mark.parametrize(("inputs", "op", "args", "attrs", "message"), [
    ({"a": ([2, 3], "f32"), "b": ([3, 3], "f32")}, "concat", ["a", "b"], {"axis": 1},
     "nodes[0]: concat along axis 1: args[1] has shape [3, 3], args[0] [2, 3]"),
    (X, "concat", ["x"], {"axis": 4}, "nodes[0].attrs.axis: axis 4 is out of range"),
    (X, "slice", ["x"], {"starts": [0], "ends": [2], "steps": [0]}, "nodes[0].attrs.steps: slice steps must be >= 1"),
    (X, "slice", ["x"], {"starts": [0, 1], "ends": [2]}, "nodes[0].attrs: slice: starts, ends, axes and steps differ"),
    (X, "gather", ["x", "x"], {}, "nodes[0]: gather needs integer indices, got f32"),
    ({"x": ([0, 2], "f32"), "i": ([1], "i32")}, "gather", ["x", "i"], {}, "nodes[0].attrs.axis: gather from axis 0"),
    (X, "where", ["x", "x", "x"], {}, "nodes[0]: where needs a bool condition, got f32"),
    (X, "maxpool2d", ["x"], {"kernel": [7, 1]}, "nodes[0]: maxpool2d window 7 is larger than the padded input"),
    (X, "avgpool2d", ["x"], {"kernel": [2]}, "nodes[0].attrs.kernel: kernel must be two integers >= 1"),
    (X, "maxpool2d", ["x"], {"kernel": [2, 2], "padding": [[0, -1], [0, 0]]}, "nodes[0].attrs.padding: padding must be"),
    ({**X, "w": ([4, 2, 3, 3], "f32")}, "conv2d", ["x", "w"], {"groups": 2},
     "nodes[0].attrs.groups: groups=2 must be >= 1 and divide the 3 input"),
    ({**X, "w": ([4, 3, 3, 3], "f32")}, "conv2d", ["x", "w"], {"dilation": 3},
     "nodes[0]: conv2d kernel 7x7 is larger than the padded input 6x6"),
])
def test_mistakes_are_located(inputs, op, args, attrs, message):
    with pytest.raises(GraphError) as info:
        engine.loads(_program(inputs, op, args, attrs))
    assert message in str(info.value)

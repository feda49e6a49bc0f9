"""docs/graph-format.md and its JSON Schema agree with the loader."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

import sample_graphs
from engine.program.opset import OPS

DOCS = Path(__file__).parent.parent / "docs"
SCHEMA = json.loads((DOCS / "graph-format.schema.json").read_text())


def test_schema_is_valid():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)


@pytest.mark.parametrize("name", sample_graphs.names())
def test_every_sample_validates_against_the_schema(name):
    jsonschema.validate(json.loads(sample_graphs.path(name).read_text()), SCHEMA)


def test_schema_rejects_what_the_loader_rejects():
    for bad in ({"inputs": {}, "nodes": []}, {"inputs": {"x": {"shape": [-1]}}, "nodes": [], "outputs": ["x"]},
                {"inputs": {}, "nodes": [], "outputs": [], "extra": 1}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, SCHEMA)


def test_every_op_is_documented():
    text = (DOCS / "graph-format.md").read_text()
    missing = [op for op in OPS if f"| `{op}` |" not in text]
    assert not missing, f"document these ops in docs/graph-format.md: {missing}"


def test_the_documented_example_loads(tmp_path):
    import numpy as np

    import engine

    text = (DOCS / "graph-format.md").read_text()
    example = text.split("```json\n", 1)[1].split("```", 1)[0]
    np.save(tmp_path / "w2.npy", np.ones((32, 4), np.float32))
    program = engine.loads(example, base_dir=tmp_path)
    assert engine.run_reference(program)["y"].shape == (8, 4)

"""egraph-serialize import: hand-made and egglog-made files, located errors, our extractors on them."""

from __future__ import annotations

import json

import pytest

from engine.errors import GraphError
from engine.interop import (
    MAX_NODES,
    extract,
    extract_all,
    is_serialized,
    load_serialized,
    loads_serialized,
    parse_serialized,
)
from tests.interop.graphs import CYCLE, SHARING, egglog_arith, egglog_sharing, node


def test_a_hand_made_file_round_trips_its_fields(tmp_path):
    doc = {"nodes": {"1": node("x", "7", cost=2.5), "2": node("neg", 8, ["1"], subsumed=True)},
           "class_data": {"7": {"type": "Num"}}, "extra": "ignored"}
    path = tmp_path / "e.json"
    path.write_text(json.dumps(doc))
    fg = load_serialized(path)
    assert fg.nodes["1"].cost == 2.5 and fg.nodes["2"].eclass == "8" and fg.nodes["2"].subsumed
    assert fg.classes == {"7": ("1",), "8": ("2",)} and fg.type_of("7") == "Num"
    assert fg.roots == ("8",) and fg.roots_from == "unused"  # no root_eclasses, no let: the classes nobody reads
    assert fg.child_classes(fg.nodes["2"]) == ("7",)


def test_extractors_on_the_sharing_case():
    results = {r.method: r for r in extract_all(parse_serialized(SHARING))}
    assert results["greedy"].dag_cost == 5.0 and results["greedy"].chosen["A"] == "a_leaf"
    for m in ("dag", "ilp"):
        assert results[m].dag_cost == 4.0, m
        assert results[m].chosen == {"R": "root", "A": "a_s", "B": "b_s", "S": "s"}
    assert results["ilp"].status == "optimal"
    assert results["greedy"].tree_cost == 5.0 and results["dag"].tree_cost == 7.0  # S counted once per reader


def test_root_eclasses_choose_what_is_extracted():
    doc = {**SHARING, "root_eclasses": ["A"]}
    r = extract(parse_serialized(doc), "ilp")
    assert r.chosen == {"A": "a_leaf"} and r.dag_cost == 2.0


def test_cycles_and_subsumed_nodes():
    assert {r.dag_cost for r in extract_all(parse_serialized(CYCLE))} == {6.0}
    doc = json.loads(json.dumps(SHARING))
    doc["nodes"]["a_leaf"]["subsumed"] = True  # subsumed: never extracted
    assert extract(parse_serialized(doc), "greedy").chosen["A"] == "a_s"


def test_an_uncomputable_root_is_reported_not_raised():
    doc = {"nodes": {"a": node("f", "A", ["b"]), "b": node("g", "B", ["a"])}, "root_eclasses": ["A"]}
    for r in extract_all(parse_serialized(doc)):
        assert r.status == "failed" and "A" in r.error and not r.chosen


@pytest.mark.parametrize(
    ("doc", "fragment"),
    [
        ([], "expected a JSON object with a 'nodes' object, got []"),
        ({}, "missing the 'nodes' key"),
        ({"nodes": []}, "nodes: expected an object of node id -> node"),
        ({"nodes": {"a": 3}}, "nodes.a: expected a node object"),
        ({"nodes": {"a": {"eclass": "A"}}}, "nodes.a: missing the 'op' key"),
        ({"nodes": {"a": {"op": "x"}}}, "nodes.a: missing the 'eclass' key"),
        ({"nodes": {"a": {"op": 1, "eclass": "A"}}}, "nodes.a.op: expected an op name"),
        ({"nodes": {"a": node("x", "")}}, "nodes.a.eclass: expected a class id"),
        ({"nodes": {"a": node("x", True)}}, "nodes.a.eclass: expected a class id"),
        ({"nodes": {"a": {"op": "x", "eclass": "A", "children": "b"}}}, "nodes.a.children: expected a list"),
        ({"nodes": {"a": node("x", "A", [None])}}, "nodes.a.children[0]: expected a node id"),
        ({"nodes": {"a": node("x", "A", ["zz"])}}, "nodes.a.children[0]: unknown node 'zz'"),
        ({"nodes": {"a": node("x", "A", cost=-1)}}, "nodes.a.cost: expected a finite cost >= 0 and <= 1e+100, got -1"),
        ({"nodes": {"a": node("x", "A", cost="1")}}, "nodes.a.cost: expected a finite cost"),
        ({"nodes": {"a": node("x", "A", cost=True)}}, "nodes.a.cost: expected a finite cost"),
        ({"nodes": {"a": node("x", "A", subsumed=1)}}, "nodes.a.subsumed: expected true or false"),
        ({"nodes": {"a": node("x", "A")}, "root_eclasses": "A"}, "root_eclasses: expected a list"),
        ({"nodes": {"a": node("x", "A")}, "root_eclasses": ["B"]}, "root_eclasses[0]: unknown class 'B'"),
        ({"nodes": {"a": node("x", "A")}, "class_data": []}, "class_data: expected an object"),
        ({"nodes": {"a": node("x", "A")}, "class_data": {"A": 1}}, "class_data.A: expected an object"),
        ({"nodes": {"a": node("x", "A")}, "class_data": {"Q": {}}}, "class_data.Q: unknown class 'Q'"),
    ],
)
def test_malformed_documents_give_located_errors(doc, fragment):
    with pytest.raises(GraphError) as e:
        loads_serialized(json.dumps(doc), "f.json")
    assert str(e.value).startswith("f.json: ") and fragment in str(e.value)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ('{"nodes": {"a": {"op": "x", "eclass": "A", "cost": NaN}}}', "nodes.a.cost: expected a finite cost >= 0 and <= 1e+100, got NaN"),
        ('{"nodes": {"a": {"op": "x", "eclass": "A", "cost": Infinity}}}', "got Infinity"),
        ('{"nodes": {,}}', "line 1 column 12: invalid JSON"),
        ("[" * 100_000, "nested too deeply"),
    ],
)
def test_unparsable_and_non_finite_text(text, fragment):
    with pytest.raises(GraphError, match=None) as e:
        loads_serialized(text)
    assert fragment in str(e.value)


def test_the_node_limit(monkeypatch):
    monkeypatch.setattr("engine.interop.serialized.MAX_NODES", 3)
    doc = {"nodes": {str(k): node("x", "A") for k in range(4)}}
    with pytest.raises(GraphError, match="4 nodes: more than this reader's limit of 3"):
        parse_serialized(doc)
    assert MAX_NODES >= 1_000_000


def test_unreadable_files(tmp_path):
    with pytest.raises(GraphError, match="cannot read"):
        load_serialized(tmp_path / "missing.json")
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe")
    with pytest.raises(GraphError, match="not UTF-8"):
        load_serialized(tmp_path / "bin.json")


def test_format_detection():
    assert is_serialized(SHARING) and is_serialized({"nodes": {}})
    assert not is_serialized({"inputs": {}, "nodes": [], "outputs": []})
    assert not is_serialized({"nodes": {}, "inputs": {}}) and not is_serialized([])


def test_egglog_serializations():
    """egglog's own files: roots from its ``let`` names (root_eclasses is empty), its costs, every extractor."""
    doc = egglog_arith(iterations=6, terms=2)
    assert doc["root_eclasses"] == []
    fg = parse_serialized(doc)
    assert fg.roots_from == "let" and len(fg.roots) == 1 and "$e" in fg.root_name(fg.roots[0])
    assert {n.cost for n in fg.nodes.values()} == {1.0, 2.0, 8.0}
    results = {r.method: r for r in extract_all(fg)}
    assert results["ilp"].status == "optimal"
    assert results["ilp"].dag_cost <= results["dag"].dag_cost <= results["greedy"].dag_cost
    assert results["ilp"].dag_cost == 20.0  # (x0 + x1) << 1, squared, plus x0 << 1, sharing x0, x1 and 1
    for r in results.values():  # a choice is a node of the class it was chosen for, and its children are chosen
        for cls, nid in r.chosen.items():
            assert fg.nodes[nid].eclass == cls and not fg.nodes[nid].subsumed
            assert set(fg.child_classes(fg.nodes[nid])) <= set(r.chosen)


def test_egglog_sharing_beats_greedy():
    """On egglog's file too, the DAG extractors share a subterm greedy's tree cost avoids."""
    fg = parse_serialized(egglog_sharing())
    results = {r.method: r for r in extract_all(fg)}
    assert results["greedy"].dag_cost == 11.0
    assert results["dag"].dag_cost == results["ilp"].dag_cost == 9.0 and results["ilp"].status == "optimal"
    shared = [c for c, n in results["ilp"].chosen.items() if fg.nodes[n].op.endswith("shared")]
    assert len(shared) == 1 and shared[0] not in results["greedy"].chosen

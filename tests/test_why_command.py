"""``zyx-explore why FILE TENSOR_OR_CLASS``: text and JSON, the explainer's own numbers, bad targets exit 2."""

from __future__ import annotations

import json

import pytest

import sample_graphs
import zyx_explorer.cli
from engine import pipeline
from engine.locate import locate
from engine.units import seconds
from zyx_explorer.cli import main

MLP = str(sample_graphs.path("mlp.small"))
FLAGS = ["--no-tune", "--no-opencl", "--no-native"]


@pytest.fixture
def compiled(monkeypatch):
    """The compilation the command made (to compare its answer with the engine's)."""
    made = []
    real = pipeline.compile_program

    def keep(*args, **kwargs):
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(zyx_explorer.cli, "compile_program", keep)  # the name the CLI calls
    return made


def test_json_for_a_fused_tensor_has_the_explainers_numbers(compiled, capsys):
    assert main(["why", MLP, "t1", "--json", *FLAGS]) == 0
    out = json.loads(capsys.readouterr().out)
    (c,) = compiled
    where = locate(c.egraph, c.kernelization, c.plan, "t1")
    assert out["class"] == where.value and out["classes"] == list(where.classes) and not out["stored"]
    (kernel,) = out["kernels"]  # t1 is fused into the matmul's kernel: its class decided it
    step = c.plan.steps[kernel["step"] - 1]  # steps count from 1, as everywhere shown
    assert kernel["name"] == step.name and "t1" in kernel["name"] and kernel["tensors"] == ["t0", "t1", "h"]
    assert out["decided_at"] == step.outputs[0][0]
    why = pipeline.explain(c).why(out["decided_at"])
    assert out["dag_cost"] == why.dag_cost
    assert [t["seconds"] for t in out["chosen"]] == [t.seconds for t in why.chosen]
    assert [r["dag_cost"] for r in out["rivals"]] == [r.dag_cost for r in why.rivals[:len(out["rivals"])]]
    chosen = next(t for t in out["chosen"] if t["kernel"])
    # the extractor's price: the kernel's time plus its fresh outputs' first touches (nonzero once calibrated)
    assert chosen["seconds"] == c.extraction_time(next(kn for kn in c.kernel_times if kn.candidate == chosen["kernel"]
                                                        and kn.device == chosen["device"]))
    decisions = kernel["decisions"]
    assert decisions["grown"] == "default" and {b["reason"] for b in decisions["boundaries"]} == {"input"}
    assert any(line.startswith("grown from") for line in kernel["lines"])


def test_rival_kernels_are_priced_as_extraction_prices_them(compiled, capsys, monkeypatch):
    """A rival's time in the decisions is the extractor's (a plan's launch pays its fresh outputs' first touch:
    here a made-up 0.25 ms), not the kernel's alone: the explanation uses the costs of the decision it explains."""
    monkeypatch.setattr(pipeline.Compilation, "output_cost", lambda self, kn: 0.25e-3)
    assert main(["why", MLP, "y", "--json", *FLAGS]) == 0
    out = json.loads(capsys.readouterr().out)
    (c,) = compiled
    kz, short = c.kernelization, {**out["devices"]}
    checked = 0
    for kernel in out["kernels"]:
        rivals = [line for line in kernel["lines"] if line.startswith("rival ")]
        for line, rival in zip(rivals, kz.rivals(kernel["candidate"])):
            for kn in (kn for kn in c.kernel_times if kn.candidate == rival):
                price = c.extraction_time(kn)
                assert price == c.kernel_times[kn] + 0.25e-3
                assert f"{short.get(kn.device, kn.device)} {seconds(price)}" in line, line
                checked += 1
    assert checked


def test_text_for_an_output_shows_the_choice_rivals_and_decisions(compiled, capsys):
    assert main(["why", MLP, "y", *FLAGS]) == 0
    text = capsys.readouterr().out
    (c,) = compiled
    why = pipeline.explain(c).why(c.egraph.output_classes()["y"])
    assert text.startswith("y = add(t2, b2): [8, 16] f32")
    assert f"plan DAG cost {seconds(why.dag_cost)}" in text
    assert f"({seconds(why.rivals[0].dag_cost - why.dag_cost, signed=True)})" in text
    (step,) = [s for s in c.plan.launches() if "y" in s.name]
    assert f"kernel {step.name} ({step.kernel.name})" in text and "fused " in text


def test_a_class_id_and_an_input(capsys):
    assert main(["why", MLP, "c0", *FLAGS]) == 0
    assert "no kernel of the plan computes it: a program input" in capsys.readouterr().out
    assert main(["why", MLP, "w1", "--json", *FLAGS]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["tensor"]["op"] == "input" and out["input"] and out["kernels"] == []


@pytest.mark.parametrize("target, fragment", [("nope", "'nope' is no tensor of the program (x, w1"),
                                              ("c99999", "class c99999 does not exist")])
def test_an_unknown_target_is_one_located_paragraph_and_exit_2(capsys, target, fragment):
    assert main(["why", MLP, target, *FLAGS]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {MLP}: ") and fragment in err and "Traceback" not in err

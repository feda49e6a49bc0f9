"""``zyx-explore why FILE TENSOR_OR_CLASS``: the explorer's answers for one program tensor or class, headless.

For scripts and quick questions: the classes a tensor became, the form the plan chose for its class and the
rivals it beat (in the extractor's own objective, from ``Compilation.view(stage).why``: the class detail's
numbers), the kernels of the plan that compute it with their fusion decisions (``engine.kernel.decisions``),
and their devices and times, each marked measured or predicted.  Nothing here prices anything itself.

Exit codes: 0 answered, 2 bad input (an unknown tensor or class among them).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
from typing import Any

from rich.console import Console

from engine import (
    Compilation,
    GraphError,
    Launch,
    Program,
    Stage,
    Term,
    computed,
    kernel_lines,
    locate,
    tensors_of,
    units,
)
from zyx_explorer import compile_cmd

RIVALS = 3
"""Rivals of the chosen form shown (the cheapest)."""

CLASS_ID = re.compile(r"c?(\d+)")


DESCRIPTION = ("Compile FILE and say, for one program tensor (by name) or e-class (c12), what it became: its classes, "
               "the form the plan chose and the rivals it beat (plan DAG cost, the class detail's numbers), the kernels "
               "that compute it with their fusion decisions, devices and times (m measured, p predicted).")


def arguments(p: argparse.ArgumentParser, compile_arguments) -> None:
    compile_cmd.arguments(p, compile_arguments)
    p.add_argument("target", metavar="TENSOR_OR_CLASS", help="a program tensor's name, or a class id (c12 or 12)")


def check_target(program: Program, target: str, source: str) -> None:
    """Refuse, before compiling, a target that is neither a program tensor nor a class id."""
    if target not in program.types() and not CLASS_ID.fullmatch(target):
        names = [i.name for i in program.inputs] + [n.id for n in program.nodes]
        shown = ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")
        raise GraphError(f"{target!r} is no tensor of the program ({shown}) and no class id (c12)", source=source)


def answer(c: Compilation, target: str, source: str) -> dict[str, Any]:
    """What the explorer shows of ``target`` in compilation ``c``, as one JSON-able object."""
    eg, kz, plan = c.egraph, c.kernelization, c.plan
    assert eg is not None and kz is not None and plan is not None and c.attached is not None
    where = locate(eg, kz, plan, target) if target in c.program.types() else None
    if target in c.program.types() and where is None:
        raise GraphError(f"tensor {target!r} is read by no output: it is not compiled", source=source)
    if where is not None:
        cls = where.value
    else:
        cls = int(CLASS_ID.fullmatch(target).group(1))  # type: ignore[union-attr]
        if cls >= eg.num_added:
            raise GraphError(f"class c{cls} does not exist (ids go up to c{eg.num_added - 1})", source=source)
        cls = eg.find(cls)
    short = units.short_devices(d.name for d in c.devices)
    from zyx_explorer.model import term_text  # here: the model imports Textual (its rows), which the CLI need not

    def term(t: Term) -> dict[str, Any]:
        param = eg.node(t.node).param
        kernel = getattr(param, "candidate", None)
        return {"text": term_text(eg, kz, t, short, c.measured), "node": t.node, "copy": t.copy, "seconds": t.seconds,
                "kernel": kernel, "name": kz.name(kernel) if kernel else None,
                "device": getattr(param, "device", None), "measured": bool(kernel) and c.measured(param)}

    shown = c.view(Stage.PLAN)
    steps = where.steps if where is not None else tuple(
        i for i, s in enumerate(plan.steps) if isinstance(s, Launch) and cls in computed(eg, kz, s.candidate))
    launches = [(i, step) for i, step in ((i, plan.steps[i]) for i in steps) if isinstance(step, Launch)]
    kernels = []
    for i, step in launches:
        cand = kz.candidates[step.candidate]
        kernels.append({
            "step": i + 1, "name": step.name, "id": step.kernel.name, "candidate": step.candidate, "device": step.device,
            "variant": str(step.variant), "predicted_s": step.predicted, "measured": step.measured,
            "tensors": tensors_of(eg, kz, step.candidate),
            "decisions": {**dataclasses.asdict(cand.decisions),
                          "refused": dict(c.attached.refused.get(step.candidate, {}))},
            "lines": kernel_lines(kz, c.attached.refused, step.candidate, shown.prices, lambda d: short.get(d, d))})
    why = shown.why(cls)
    decided = cls
    if why is None and launches:  # fused into a kernel of another class: the costs decided that class's form
        decided = eg.find(launches[0][1].outputs[0][0])
        why = shown.why(decided)
    node = next((n for n in c.program.nodes if n.id == target), None) if where is not None else None
    return {
        "target": target,
        "tensor": None if where is None else {
            "name": target, "op": where.op, "args": list(node.args) if node else [],
            "shape": list(c.program.types()[target][0]), "dtype": str(c.program.types()[target][1])},
        "class": cls,
        "classes": list(where.classes) if where is not None else [cls],
        "shape": list(eg.eclass(cls).shape), "dtype": str(eg.eclass(cls).dtype),
        "input": any(eg.node(n).op == "leaf" for n in eg.eclass(cls).nodes),
        "stored": decided == cls and why is not None,
        "decided_at": decided if why is not None else None,
        "dag_cost": why.dag_cost if why else None,
        "chosen": [term(t) for t in why.chosen] if why else [],
        "rivals": [{"via": [term(t) for t in r.via], "dag_cost": r.dag_cost, "delta": r.dag_cost - why.dag_cost}
                   for r in why.rivals[:RIVALS]] if why else [],
        "kernels": kernels,
        "devices": {name: s for name, s in short.items() if s != name},
    }


def show(out: dict[str, Any], console: Console) -> None:
    """``answer`` as text: the same lines the class detail and the source pane show."""
    def say(text: str) -> None:
        console.print(text, markup=False, highlight=False)

    t = out["tensor"]
    if t is not None:
        call = f"{t['op']}({', '.join(t['args'])})" if t["op"] != "input" else "input"
        say(f"{t['name']} = {call}: {units.shape(tuple(t['shape']))} {t['dtype']}")
        others = [f"c{c}" for c in out["classes"][1:]]
        say(f"  classes: c{out['class']} (its value)" + (f", {' '.join(others)} (its lowering)"
                                                                   if others else ""))
    say(f"c{out['class']} {units.shape(tuple(out['shape']))} {out['dtype']}")
    if out["decided_at"] is None:
        say("  not in the plan: an equal form of its users was chosen")
    else:
        if not out["stored"]:
            say(f"  not stored: fused into the kernel of c{out['decided_at']}, whose choice decided it")
        say(f"  chosen: {' + '.join(x['text'] for x in out['chosen'])}: plan DAG cost "
                      f"{units.seconds(out['dag_cost'])}")
        for r in out["rivals"]:
            say(f"  rival {' + '.join(x['text'] for x in r['via'])}: plan {units.seconds(r['dag_cost'])} "
                          f"({units.seconds(r['delta'], signed=True)})")
        if not out["rivals"]:
            say("  the only way to make it")
    for k in out["kernels"]:
        say(f"step {k['step']}: kernel {k['name']} ({k['id']}) on {out['devices'].get(k['device'], k['device'])}"
                      f", variant {k['variant']}, {units.seconds(k['predicted_s'])} "
                      f"{'measured' if k['measured'] else 'predicted'}; computes {', '.join(k['tensors'])}")
        for line in k["lines"]:
            say(f"  {line}")
    if out["decided_at"] is not None and not out["kernels"]:
        say("no kernel of the plan computes it: a program input" if out["input"]
            else "no kernel of the plan computes it on its own")
    if out["devices"]:
        say(units.device_legend(out["devices"]))


def run(c: Compilation, args: argparse.Namespace, console: Console) -> int:
    out = answer(c, args.target, str(args.file))
    if args.json:
        console.print_json(json.dumps(out))
    else:
        show(out, console)
    return 0

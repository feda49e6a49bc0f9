"""The semantic self-check: every form of every class computes the same values.

Each class gets a value from its oldest form whose children have values (the
lowering's form, where there is one), by the reference interpreter on random
inputs and again on inputs full of special values (±0, ±inf, NaN, extremes); then every other form is evaluated on its children's values and
compared (at random points, for big classes).  A disagreement means a rule is wrong.  Forms whose result would be
bigger than ``max_elements`` are not materialised: a ``reduce_sum`` of such a
``mul`` is contracted (as the interpreter does for matmul), the rest is skipped
and counted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from engine.egraph.egraph import ATTACHED_OPS, ClassId, EGraph, NodeId
from engine.program.dtypes import DType
from engine.program.primitives import PrimNode
from engine.program.reference import contract, eval_node, widen


@dataclass(frozen=True)
class Disagreement:
    class_id: ClassId
    node: NodeId
    reference: NodeId
    max_error: float


@dataclass(frozen=True)
class SemanticReport:
    classes: int
    forms: int
    """Forms evaluated and compared with their class's value."""
    skipped: tuple[NodeId, ...]
    """Forms not evaluated: too large to materialise, or children without values."""
    disagreements: tuple[Disagreement, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.disagreements


def random_inputs(egraph: EGraph, seed: int = 0) -> dict[str, np.ndarray]:
    """Random values for every leaf: standard normal floats, small integers, random booleans."""
    rng = np.random.default_rng(seed)
    values = {}
    for cls in sorted(egraph.classes(), key=lambda c: c.id):
        for n in cls.nodes:
            op, name, _ = egraph.node(n)
            if op == "leaf":
                values[name] = _random(rng, cls.shape, cls.dtype)
    return values


def special_inputs(egraph: EGraph, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs with about half their elements replaced by special values (every one of them appears in a
    leaf of enough elements): for floats ±0, ±inf, NaN, ±the largest finite and ±the smallest normal value, ±1;
    for integers 0, ±1 and the extremes.  Random values alone never hit ``-0.0 + 0.0 = +0.0``."""
    rng = np.random.default_rng(seed + 1)
    values = random_inputs(egraph, seed)
    for value in values.values():
        specials = _specials(value.dtype)
        if specials is None or not value.size:
            continue
        flat = value.reshape(-1)
        order = rng.permutation(flat.size)
        flat[order[: specials.size]] = specials[: flat.size]
        rest = order[specials.size :]
        chosen = rest[rng.random(rest.size) < 0.5]
        flat[chosen] = rng.choice(specials, chosen.size)
    return values


def _specials(dtype: np.dtype) -> np.ndarray | None:
    if dtype.kind == "f":
        f = np.finfo(dtype)
        return np.array([0.0, -0.0, np.inf, -np.inf, np.nan, f.max, -f.max, f.smallest_normal, -f.smallest_normal,
                         1.0, -1.0], dtype)
    if dtype.kind == "i":
        i = np.iinfo(dtype)
        return np.array([0, 1, -1, i.min, i.max, i.min + 1], dtype)
    return None


def _random(rng: np.random.Generator, shape: tuple[int, ...], dtype: DType) -> np.ndarray:
    if dtype.is_float:
        return rng.standard_normal(shape).astype(dtype.numpy)
    if dtype == DType.BOOL:
        return rng.random(shape) < 0.5
    return rng.integers(-5, 6, shape).astype(dtype.numpy)


class _Evaluator:
    def __init__(self, egraph: EGraph, inputs: Mapping[str, np.ndarray], max_elements: int) -> None:
        self.egraph = egraph
        self.inputs = inputs
        self.max_elements = max_elements
        self.values: dict[ClassId, tuple[np.ndarray, NodeId]] = {}

    def value(self, c: int) -> np.ndarray | None:
        found = self.values.get(self.egraph.find(c))
        return None if found is None else found[0]

    def evaluate(self, n: NodeId) -> np.ndarray | None:
        """The value of form ``n`` from its children's values; None when it cannot or may not be computed."""
        eg = self.egraph
        op, param, children = eg.node(n)
        cls = eg.eclass(n)
        if op == "leaf":
            return np.asarray(self.inputs[param])
        if op == "reduce_sum":
            contracted = self._contract(children[0], param)
            if contracted is not None:
                return self._round(contracted, cls.dtype)
        args = [self.value(c) for c in children]
        if any(a is None for a in args):
            return None
        if op not in ("expand", "permute") and cls.numel > self.max_elements:
            return None  # expand and permute are views; everything else would be materialised
        if op == "reshape":
            try:
                return np.reshape(args[0], param, copy=False)
            except ValueError:  # a copy of a broadcast view: materialise only if small
                if cls.numel > self.max_elements:
                    return None
        value = eval_node(PrimNode(op, (), param.value if op == "const" else param, cls.shape, cls.dtype), args)
        return self._round(value, cls.dtype)

    def _contract(self, c: ClassId, axes: tuple[int, ...]) -> np.ndarray | None:
        eg = self.egraph
        if eg.eclass(c).numel <= self.max_elements:
            return None
        for form in eg.eclass(c).nodes:
            op, _, children = eg.node(form)
            args = [self.value(x) for x in children]
            if op == "mul" and all(a is not None for a in args):
                with np.errstate(all="ignore"):
                    return contract(widen(args[0]), widen(args[1]), axes)
        return None

    @staticmethod
    def _round(value: np.ndarray, dtype: DType) -> np.ndarray:
        with np.errstate(all="ignore"):
            return np.asarray(value).astype(dtype.numpy, copy=False)

    def fill(self) -> None:
        """Give every class it can a value, from its oldest computable form, until nothing changes."""
        eg = self.egraph
        pending = sorted(c.id for c in eg.classes())
        while pending:
            left = []
            for c in pending:
                for n in sorted(eg.eclass(c).nodes):
                    if eg.node(n).op in ATTACHED_OPS:
                        continue
                    with np.errstate(all="ignore"):
                        value = self.evaluate(n)
                    if value is not None:
                        self.values[eg.find(c)] = (value, n)
                        break
                else:
                    left.append(c)
            if len(left) == len(pending):
                return
            pending = left


COMPARE_SAMPLES = 1 << 16
"""Classes bigger than this are compared at this many random points, so broadcast views stay views."""


def _sample(got: np.ndarray, want: np.ndarray, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    if got.size <= COMPARE_SAMPLES:
        return got, want
    rng = np.random.default_rng(seed)
    points = np.unravel_index(rng.integers(0, got.size, COMPARE_SAMPLES), got.shape)
    return got[points], want[points]


def _max_error(got: np.ndarray, want: np.ndarray, dtype: DType, finite_only: bool) -> float | None:
    """The largest difference if ``got`` and ``want`` disagree beyond ``dtype``'s tolerance, else None; inf
    for zeros of different signs (unless ``finite_only``: fast-math ignores signed zeros too)."""
    got, want = _sample(np.broadcast_to(got, want.shape), want)
    g, w = got.astype(np.float64), want.astype(np.float64)
    if finite_only:
        mask = np.isfinite(g) & np.isfinite(w)
        g, w = g[mask], w[mask]
    elif dtype.is_float:  # -0.0 and +0.0 compare equal, but 1 / x tells them apart
        zeros = (g == 0) & (w == 0)
        if np.any(np.signbit(g[zeros]) != np.signbit(w[zeros])):
            return float("inf")
    rtol, atol = dtype.tolerance
    finite = np.abs(w[np.isfinite(w)])
    scale = max(1.0, float(finite.max())) if finite.size else 1.0
    if np.allclose(g, w, rtol=rtol, atol=atol * scale, equal_nan=True):
        return None
    with np.errstate(invalid="ignore"):
        diff = np.abs(g - w)
    return float(np.nanmax(diff)) if np.isfinite(diff).any() else float("inf")


def check_semantics(egraph: EGraph, inputs: Mapping[str, np.ndarray] | Sequence[Mapping[str, np.ndarray]] | None = None,
                    *, seed: int = 0, max_elements: int = 1 << 22, finite_only: bool = False) -> SemanticReport:
    """Evaluate every form of every class and report the forms that disagree with their class.

    ``inputs`` is one set of leaf values or several, each checked in turn (by default ``random_inputs`` and
    ``special_inputs``); a form disagrees when it does on any of them.  ``finite_only`` compares only where
    both values are finite, the contract of fast-math rules.
    """
    egraph.rebuild()
    if inputs is None:
        inputs = [random_inputs(egraph, seed), special_inputs(egraph, seed)]
    elif isinstance(inputs, Mapping):
        inputs = [inputs]
    reports = [_check(egraph, values, max_elements, finite_only) for values in inputs]
    seen: set[NodeId] = set()
    bad = [d for r in reports for d in r.disagreements if not (d.node in seen or seen.add(d.node))]
    first = reports[0]
    return SemanticReport(first.classes, first.forms, first.skipped, tuple(bad))


def _check(egraph: EGraph, inputs: Mapping[str, np.ndarray], max_elements: int, finite_only: bool) -> SemanticReport:
    ev = _Evaluator(egraph, inputs, max_elements)
    ev.fill()
    forms, skipped, bad = 0, [], []
    for cls in sorted(egraph.classes(), key=lambda c: c.id):
        found = ev.values.get(cls.id)
        for n in cls.nodes:
            if egraph.node(n).op in ATTACHED_OPS:
                continue  # kernels and transfers are checked by running the plan
            if found is not None and n == found[1]:
                forms += 1
                continue
            with np.errstate(all="ignore"):
                got = None if found is None else ev.evaluate(n)
            if got is None:
                skipped.append(n)
                continue
            forms += 1
            assert found is not None
            error = _max_error(np.asarray(got), found[0], cls.dtype, finite_only)
            if error is not None:
                bad.append(Disagreement(cls.id, n, found[1], error))
    return SemanticReport(egraph.num_classes, forms, tuple(skipped), tuple(bad))

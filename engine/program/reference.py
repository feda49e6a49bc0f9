"""The numpy reference interpreter for primitive graphs: the ground truth of every test.

Each primitive is evaluated as plainly as numpy allows.  One exception keeps big
programs tractable: a ``reduce_sum`` of a ``mul`` whose operands are broadcast
(``expand``) views is contracted with ``np.einsum`` over the operands without
their broadcast axes (summed axes excepted), so a matmul never materialises its
``[m, n, k]`` product; every product is still formed and summed, never regrouped.  Floating
point is computed in at least float32 and rounded to the node's dtype after
every op, as a device would.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from engine.program.primitives import PrimGraph, PrimNode
from engine.program.values import check_inputs

_UNARY = {
    "neg": np.negative,
    "relu": lambda x: np.maximum(x, 0),
    "exp2": np.exp2,
    "log2": np.log2,
    "sin": np.sin,
    "cos": np.cos,
    "sqrt": np.sqrt,
    "recip": lambda x: np.divide(1, x),
    "not": np.logical_not,
}


def _divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if np.issubdtype(a.dtype, np.integer):  # C semantics: truncate toward zero; x / 0 -> 0
        safe = np.where(b == 0, 1, b)
        return np.where(b == 0, 0, np.abs(a) // np.abs(safe) * np.sign(a) * np.sign(safe))
    return np.divide(a, b)


def _power(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if np.issubdtype(a.dtype, np.integer):  # a negative exponent gives 0, except for a base of +-1
        e = np.abs(b)
        inverse = np.where(np.abs(a) == 1, np.where(e % 2 == 1, a, 1), 0)
        return np.where(b < 0, inverse, a**e)
    return np.power(a, b)


_BINARY = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": _divide,
    "pow": _power,
    "max": np.maximum,
    "cmplt": np.less,
    "cmpgt": np.greater,
    "eq": np.equal,
    "noteq": np.not_equal,
    "and": np.logical_and,
    "or": np.logical_or,
}


def widen(x: np.ndarray) -> np.ndarray:
    """float16 is computed in float32 (and rounded back by the caller)."""
    return x.astype(np.float32) if x.dtype == np.float16 else x


def _pad(x: np.ndarray, pads: tuple[tuple[int, int], ...], value: object) -> np.ndarray:
    # Grow first, then shrink: an axis may lose more on one side than it had (e.g. [-4, 2] on size 3).
    grown = np.pad(x, [(max(lo, 0), max(hi, 0)) for lo, hi in pads], constant_values=value)
    return grown[tuple(slice(max(-lo, 0), grown.shape[i] - max(-hi, 0)) for i, (lo, hi) in enumerate(pads))]


def _unbroadcast(x: np.ndarray, keep: set[int] | frozenset[int] = frozenset()) -> tuple[np.ndarray, list[int]]:
    """Drop the stride-0 (broadcast) axes of a view, except those in ``keep`` and those of size <= 1.

    Returns the view and the axes it kept.
    """
    kept = [i for i, (s, d) in enumerate(zip(x.strides, x.shape)) if s != 0 or d <= 1 or i in keep]
    index = tuple(slice(None) if i in kept else 0 for i in range(x.ndim))
    return x[index], kept


def contract(a: np.ndarray, b: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """sum(a * b, axes) without forming a * b.

    A summed axis stays in both operands even where one is broadcast along it: dropping it would compute
    ``a * sum(b)``, which differs from the sum of the products where they hold infinities (inf * [1, -1] sums
    to NaN)."""
    b0, kb = _unbroadcast(b, set(axes))
    a0, ka = _unbroadcast(a, (set(range(a.ndim)) - set(kb)) | set(axes))  # an axis broadcast in both stays in a
    keep = [i for i in range(a.ndim) if i not in axes]
    return np.einsum(a0, ka, b0, kb, keep, optimize=True)


def eval_node(node: PrimNode, args: list[np.ndarray]) -> np.ndarray:
    """The value of one primitive applied to argument arrays (float16 computed in float32, not yet rounded)."""
    op, p = node.op, node.param
    if op == "const":
        return np.asarray(p, node.dtype.numpy)
    if op in _UNARY:
        return _UNARY[op](widen(args[0]))
    if op in _BINARY:
        return _BINARY[op](widen(args[0]), widen(args[1]))
    if op == "cast":
        return args[0].astype(node.dtype.numpy)
    if op == "reduce_sum":
        return np.sum(widen(args[0]), axis=p)
    if op == "reduce_max":
        return np.max(args[0], axis=p)
    if op == "expand":
        return np.broadcast_to(args[0], p)
    if op == "permute":
        return np.transpose(args[0], p)
    if op == "reshape":
        return np.reshape(args[0], p)
    if op == "pad":
        return _pad(args[0], *p)
    raise AssertionError(f"unknown primitive {op!r}")


def evaluate(graph: PrimGraph, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Evaluate ``graph`` on input arrays (by leaf name); returns output name -> array.

    Raises InputError when an input array is missing or of the wrong shape or dtype."""
    inputs = check_inputs({n.param: (n.shape, n.dtype) for n in graph.nodes if n.op == "leaf"}, inputs)
    users: list[list[int]] = [[] for _ in graph.nodes]
    for i, node in enumerate(graph.nodes):
        for a in node.args:
            users[a].append(i)
    outputs = set(graph.outputs.values())
    # mul nodes consumed only by sums are contracted there, never formed.
    deferred = {
        i
        for i, node in enumerate(graph.nodes)
        if node.op == "mul"
        and i not in outputs
        and users[i]
        and all(graph.nodes[u].op == "reduce_sum" for u in users[i])
    }
    values: dict[int, np.ndarray] = {}
    remaining = [len(u) for u in users]

    def release(a: int) -> None:
        remaining[a] -= 1
        if remaining[a] == 0 and a not in outputs:
            values.pop(a, None)
            if a in deferred:
                for source in graph.nodes[a].args:
                    release(source)

    for i, node in enumerate(graph.nodes):
        if i in deferred:
            continue
        if node.op == "leaf":
            result = inputs[node.param]
        else:
            with np.errstate(all="ignore"):
                if node.op == "reduce_sum" and node.args[0] in deferred:
                    a, b = (widen(values[j]) for j in graph.nodes[node.args[0]].args)
                    result = contract(a, b, node.param)
                else:
                    result = eval_node(node, [values[a] for a in node.args])
        with np.errstate(all="ignore"):  # rounding to float16 may overflow to inf, as on a device
            values[i] = np.asarray(result).astype(node.dtype.numpy, copy=False)
        assert values[i].shape == node.shape, (i, node.op, values[i].shape, node.shape)
        for a in node.args:
            release(a)
    return {name: np.array(values[i]) for name, i in graph.outputs.items()}

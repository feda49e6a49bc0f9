"""Extraction: choose, for every class the outputs need, the kernel or transfer that puts it in memory.

A *value* is a class held in a memory pool.  Program inputs are values in the
host pool at no cost; a ``kernel`` node makes its class a value in its device's
pool from its children's values in that pool; a ``to_device`` node copies a
value from another pool (``transfer_time(nbytes, src, dst)``).

Three extractors share one signature, ``(egraph, device_pools, kernel_time, transfer_time, *, pins)``:

- ``greedy``: zyx's extractor, the cheapest producer of each value by *tree cost*
  (a shared value counted once per use);
- ``dag``: starts from greedy and improves the *DAG cost* (each chosen value's own
  time counted once) by local search; never worse than greedy;
- ``ilp``: the exact DAG-cost optimum by integer programming (scipy's HiGHS), the
  reference for small graphs; on a timeout it falls back to the best of its
  incumbent and ``dag``, and says so in ``Extraction.status``.

``Pins`` restrict the producers of chosen classes (to a node, a structural form's
kernels, or a device); ``compare`` reports what a re-extraction changed and costs.
``solve(problem, method)`` runs an extractor on a ``Problem`` built from something else
(an imported e-graph: see ``engine.interop``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from engine.devices.base import HOST
from engine.egraph.egraph import ClassId, EGraph, NodeId
from engine.kernel.attach import KernelNode
from engine.kernel.kernelize import Kernelization

Value = tuple[ClassId, str]
"""A class held in a memory pool."""

KernelTime = Callable[[KernelNode], float]
TransferTime = Callable[[int, str, str], float]


@dataclass(frozen=True)
class Choice:
    """How a value is produced: node ``node`` (leaf, kernel or to_device) and, for a copy, its source value."""

    node: NodeId
    cost: float
    """Tree cost of the value: this node's time plus its inputs' costs."""
    source: Value | None = None
    time: float = 0.0
    """This node's own seconds (kernel or transfer time; 0 for a leaf)."""


@dataclass(frozen=True)
class Extraction:
    """The chosen producer of each needed value, the outputs' values, and how the extractor fared."""

    choices: Mapping[Value, Choice]
    outputs: Mapping[str, Value]
    method: str = "greedy"
    status: str = "heuristic"
    """``heuristic`` (greedy, dag), or for ``ilp``: ``optimal`` or ``timeout`` (then ``note`` says what was used)."""
    note: str = ""

    @property
    def tree_cost(self) -> float:
        """The outputs' tree costs summed: a value shared by k users counts k times."""
        return sum(self.choices[v].cost for v in set(self.outputs.values()))

    @property
    def dag_cost(self) -> float:
        """Each chosen value's own time counted once: what the plan runs. Compare extractors by this."""
        return math.fsum(c.time for c in self.choices.values())

    @property
    def cost(self) -> float:
        """The tree cost (kept for callers of the first greedy); prefer ``tree_cost`` / ``dag_cost``."""
        return self.tree_cost

    def kernels(self, egraph: EGraph) -> list[KernelNode]:
        """The kernel nodes chosen (each once), inputs before their users."""
        params = (egraph.node(choice.node).param for choice in self.choices.values())
        return list(dict.fromkeys(p for p in params if isinstance(p, KernelNode)))


class ExtractionError(RuntimeError):
    """No combination of kernels and transfers computes every output (no device supports a kernel, or pins)."""


# -- pins ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pin:
    """The producers allowed for class ``cls`` (transfers of it always are): ``nodes`` (None: any) on ``device``."""

    cls: ClassId
    nodes: frozenset[NodeId] | None = None
    device: str | None = None
    label: str = ""
    """What the user pinned, for messages."""

    def allows(self, node: NodeId, op: str, param: object) -> bool:
        if self.nodes is not None and node not in self.nodes:
            return False
        if self.device is None:
            return True
        return op == "kernel" and isinstance(param, KernelNode) and param.device == self.device

    def __str__(self) -> str:
        return self.label or f"c{self.cls}"


class Pins(Mapping[ClassId, Pin]):
    """A frozen mapping of class id -> Pin; ``node``/``device``/``unpin`` return new Pins."""

    def __init__(self, pins: Iterable[Pin] = ()) -> None:
        self._pins: dict[ClassId, Pin] = {p.cls: p for p in pins}

    def __getitem__(self, cls: ClassId) -> Pin:
        return self._pins[cls]

    def __iter__(self) -> Iterator[ClassId]:
        return iter(self._pins)

    def __len__(self) -> int:
        return len(self._pins)

    def __hash__(self) -> int:
        return hash(frozenset(self._pins.items()))

    def __repr__(self) -> str:
        return f"Pins({', '.join(map(str, self._pins.values()))})"

    def node(self, egraph: EGraph, node: NodeId, kz: Kernelization | None = None) -> Pins:
        """Pin the class of ``node`` to it: a kernel or leaf node itself, or a structural form's kernels (needs ``kz``)."""
        cls = egraph.find(node)
        op = egraph.node(node).op
        if op in ("kernel", "leaf"):
            allowed = frozenset([node])
            label = f"c{cls} to node {node} ({egraph.describe(node)})"
        elif op == "to_device":
            raise ExtractionError(f"cannot pin c{cls} to a transfer (node {node}); pin the kernel it copies")
        else:
            if kz is None:
                raise ExtractionError(f"pinning c{cls} to form {node} needs the kernelization")
            key = egraph.node(node)
            allowed = frozenset(
                n
                for n in egraph.eclass(cls).nodes
                if egraph.node(n).op == "kernel"
                and egraph.node(kz.candidates[egraph.node(n).param.candidate].root) == key  # type: ignore[attr-defined]
            )
            label = f"c{cls} to form {node} ({egraph.describe(node)})"
        old = self._pins.get(cls)
        device = old.device if old else None
        return self._with(Pin(cls, allowed, device, label + (f" on {device}" if device else "")))

    def device(self, egraph: EGraph, cls: ClassId, device: str) -> Pins:
        """Pin the kernel of class ``cls`` to ``device``."""
        cls = egraph.find(cls)
        old = self._pins.get(cls)
        nodes = old.nodes if old else None
        label = f"{old.label.split(' on ')[0]} on {device}" if old and old.nodes is not None else f"c{cls} on {device}"
        return self._with(Pin(cls, nodes, device, label))

    def unpin(self, egraph: EGraph, cls: ClassId) -> Pins:
        cls = egraph.find(cls)
        return Pins(p for c, p in self._pins.items() if c != cls)

    def _with(self, pin: Pin) -> Pins:
        return Pins([*(p for c, p in self._pins.items() if c != pin.cls), pin])


# -- the problem every extractor solves --------------------------------------------------------


@dataclass(frozen=True)
class Producer:
    """One way to make a value: ``node`` taking ``time`` seconds, reading ``inputs`` (a copy reads ``source``)."""

    node: NodeId
    time: float
    inputs: tuple[Value, ...]
    source: Value | None = None


@dataclass
class Problem:
    """Values and their producers; extraction picks one producer per value the outputs need."""

    order: list[tuple[Value, Producer]]
    """Every producer, in greedy's relaxation order (leaves first, then kernels, then transfers)."""
    outputs: dict[str, Value]
    producers: dict[Value, list[Producer]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for v, p in self.order:
            self.producers.setdefault(v, []).append(p)


def _problem(
    egraph: EGraph,
    device_pools: Mapping[str, str],
    kernel_time: KernelTime,
    transfer_time: TransferTime,
    pins: Mapping[ClassId, Pin] | None,
) -> Problem:
    pinned = {egraph.find(c): p for c, p in (pins or {}).items()}
    allowed = dict.fromkeys(pinned, 0)
    pools = sorted({HOST, *device_pools.values()})
    leaves, kernels, transfers = [], [], []
    for cls in egraph.classes():
        pin = pinned.get(cls.id)
        for n in cls.nodes:
            op, param, children = egraph.node(n)
            if op in ("leaf", "kernel") and pin is not None:
                if not pin.allows(n, op, param):
                    continue
                allowed[cls.id] += 1
            if op == "leaf":
                leaves.append(((cls.id, HOST), Producer(n, 0.0, ())))
            elif op == "kernel":
                assert isinstance(param, KernelNode)
                pool = device_pools[param.device]
                seconds = kernel_time(param)
                if math.isfinite(seconds):  # an infinite time: the kernel cannot run there (it failed)
                    kernels.append(((cls.id, pool), Producer(n, seconds, tuple((ch, pool) for ch in children))))
            elif op == "to_device":
                nbytes = cls.numel * cls.dtype.itemsize
                dst = param.pool  # type: ignore[attr-defined]
                for src in pools:
                    if src != dst:
                        t = transfer_time(nbytes, src, dst)
                        transfers.append(((cls.id, dst), Producer(n, t, ((cls.id, src),), (cls.id, src))))
    empty = [str(pinned[c]) for c, k in allowed.items() if k == 0]
    if empty:
        raise ExtractionError(f"pin {'; '.join(empty)}: no node of the class fits it")
    outputs = {name: (c, HOST) for name, c in egraph.output_classes().items()}
    return Problem(leaves + kernels + transfers, outputs)


def _greedy_best(problem: Problem) -> dict[Value, tuple[float, Producer]]:
    """The tree-cheapest producer of every computable value (Bellman-Ford over values)."""
    best: dict[Value, tuple[float, Producer]] = {}
    changed = True
    while changed:
        changed = False
        for v, p in problem.order:
            if all(u in best for u in p.inputs):
                cost = p.time + sum(best[u][0] for u in p.inputs)
                if v not in best or cost < best[v][0]:
                    best[v] = (cost, p)
                    changed = True
    return best


def _selection(problem: Problem) -> tuple[dict[Value, Producer], list[str]]:
    """Greedy's selection, and the outputs it cannot compute."""
    best = _greedy_best(problem)
    missing = [name for name, v in problem.outputs.items() if v not in best]
    return {v: p for v, (_, p) in best.items()}, missing


def _solve(
    egraph: EGraph,
    device_pools: Mapping[str, str],
    kernel_time: KernelTime,
    transfer_time: TransferTime,
    pins: Mapping[ClassId, Pin] | None,
) -> tuple[Problem, dict[Value, Producer]]:
    """The problem and greedy's selection; ExtractionError (naming the pins to blame) if an output is uncomputable."""
    problem = _problem(egraph, device_pools, kernel_time, transfer_time, pins)
    selection, missing = _selection(problem)
    if missing:
        if not pins:
            raise ExtractionError(f"no device can compute output(s) {', '.join(missing)}")
        args = (egraph, device_pools, kernel_time, transfer_time)
        blame = []
        for pin in pins.values():
            alone = _greedy_best(_problem(*args, Pins([pin])))
            if any(v not in alone for v in problem.outputs.values()):
                blame.append(str(pin))
        which = "; ".join(blame) if blame else "; ".join(map(str, pins.values())) + " (together)"
        raise ExtractionError(f"pin {which} leaves output(s) {', '.join(missing)} uncomputable")
    return problem, selection


def _needed(selection: Mapping[Value, Producer], roots: Iterable[Value]) -> list[Value] | None:
    """The values the roots need, inputs before users; None if the selection has a cycle."""
    state: dict[Value, bool] = {}  # False: on the stack, True: done
    order: list[Value] = []
    for root in roots:
        if root in state:
            continue
        state[root] = False
        stack = [(root, iter(selection[root].inputs))]
        while stack:
            v, it = stack[-1]
            u = next(it, None)
            if u is None:
                stack.pop()
                state[v] = True
                order.append(v)
            elif u not in state:
                state[u] = False
                stack.append((u, iter(selection[u].inputs)))
            elif not state[u]:
                return None
    return order


def _dag_cost(selection: Mapping[Value, Producer], roots: Iterable[Value]) -> float | None:
    order = _needed(selection, roots)
    return None if order is None else math.fsum(selection[v].time for v in order)


def _extraction(
    problem: Problem, selection: Mapping[Value, Producer], method: str, status: str = "heuristic", note: str = ""
) -> Extraction:
    order = _needed(selection, sorted(set(problem.outputs.values())))
    assert order is not None, "cyclic selection"
    choices: dict[Value, Choice] = {}
    for v in order:
        p = selection[v]
        tree = p.time + sum(choices[u].cost for u in p.inputs)
        choices[v] = Choice(p.node, tree, p.source, p.time)
    return Extraction(choices, dict(problem.outputs), method, status, note)


# -- extractors ----------------------------------------------------------------------------------


def greedy(
    egraph: EGraph,
    device_pools: Mapping[str, str],
    kernel_time: KernelTime,
    transfer_time: TransferTime,
    *,
    pins: Mapping[ClassId, Pin] | None = None,
) -> Extraction:
    """The tree-cheapest producer of every value, relaxed to a fixed point (Bellman-Ford over values).

    ``device_pools`` maps device names to their pools; ``kernel_time(param)`` gives a kernel
    node's seconds, ``transfer_time(nbytes, src, dst)`` those of a copy between pools.
    """
    return _greedy(*_solve(egraph, device_pools, kernel_time, transfer_time, pins))


def _greedy(problem: Problem, selection: dict[Value, Producer]) -> Extraction:
    return _extraction(problem, selection, "greedy")


def dag(
    egraph: EGraph,
    device_pools: Mapping[str, str],
    kernel_time: KernelTime,
    transfer_time: TransferTime,
    *,
    pins: Mapping[ClassId, Pin] | None = None,
    max_rounds: int = 50,
    seconds: float = 2.0,
) -> Extraction:
    """Greedy, then local search on the DAG cost: single producer swaps, and swaps followed by a descent.

    A swap that alone costs more (say, computing a shared value) is kept when the descent it
    enables (other users switching to that value) ends cheaper overall.  The search stops after
    ``seconds`` with the best selection found (never worse than greedy's); ``note`` says so.
    """
    return _dag(*_solve(egraph, device_pools, kernel_time, transfer_time, pins), max_rounds, seconds)


def _dag(problem: Problem, selection: dict[Value, Producer], max_rounds: int = 50, seconds: float = 2.0) -> Extraction:
    deadline = time.perf_counter() + seconds
    chosen = _dag_search(problem, selection, max_rounds, deadline)
    note = f"local search stopped at its {seconds:g} s limit" if time.perf_counter() > deadline else ""
    return _extraction(problem, chosen, "dag", note=note)


def _dag_search(problem: Problem, start: dict[Value, Producer], max_rounds: int,
                deadline: float) -> dict[Value, Producer]:
    roots = sorted(set(problem.outputs.values()))
    producers = problem.producers

    def moves(sel: dict[Value, Producer]) -> Iterator[tuple[Value, Producer]]:
        for v in _needed(sel, roots) or ():
            for p in producers[v]:
                if p is not sel[v] and all(u in sel for u in p.inputs):
                    yield v, p

    def descend(sel: dict[Value, Producer], cost: float) -> float:
        improved = True
        while improved and time.perf_counter() < deadline:
            improved = False
            for v, p in moves(sel):
                if time.perf_counter() > deadline:
                    break
                old, sel[v] = sel[v], p
                new = _dag_cost(sel, roots)
                if new is not None and new < cost * (1 - 1e-12):
                    cost, improved = new, True
                    break
                sel[v] = old
        return cost

    sel = dict(start)
    cost = descend(sel, _dag_cost(sel, roots) or 0.0)
    for _ in range(max_rounds):
        for v, p in list(moves(sel)):
            if time.perf_counter() > deadline:
                return sel
            trial = dict(sel)
            trial[v] = p
            kicked = _dag_cost(trial, roots)
            if kicked is None:
                continue
            new = descend(trial, kicked)
            if new < cost * (1 - 1e-12):
                sel, cost = trial, new
                break
        else:
            break
    return sel


def ilp(
    egraph: EGraph,
    device_pools: Mapping[str, str],
    kernel_time: KernelTime,
    transfer_time: TransferTime,
    *,
    pins: Mapping[ClassId, Pin] | None = None,
    time_limit: float = 10.0,
) -> Extraction:
    """The DAG-cost optimum by a 0/1 program (scipy.optimize.milp), for small graphs.

    Variables: ``x[p]`` per producer (chosen), ``n[v]`` per value (needed), and an order ``t[v]``
    for the values of cyclic parts (transfers make every class a cycle between pools).  Outputs are
    needed; a needed value has exactly one chosen producer; a chosen producer needs its inputs and
    comes after them.  Status ``optimal``, or ``timeout`` (the best of the incumbent and ``dag``).
    """
    return _ilp(*_solve(egraph, device_pools, kernel_time, transfer_time, pins), time_limit)


def _ilp(problem: Problem, greedy_sel: dict[Value, Producer], time_limit: float = 10.0) -> Extraction:
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_array

    heuristic = _dag_search(problem, greedy_sel, 50, time.perf_counter() + time_limit / 2)
    roots = sorted(set(problem.outputs.values()))
    # the values the outputs may need, and their producers (inputs computable, not reading themselves)
    values: dict[Value, int] = {}
    prods: list[tuple[Value, Producer]] = []
    stack = list(roots)
    while stack:
        v = stack.pop()
        if v in values:
            continue
        values[v] = len(values)
        for p in problem.producers.get(v, []):
            if v not in p.inputs and all(u in greedy_sel for u in p.inputs):
                prods.append((v, p))
                stack.extend(p.inputs)
    edges: dict[Value, list[Value]] = {v: [] for v in values}
    for v, p in prods:
        edges[v].extend(p.inputs)
    sccs = _sccs(values, edges)
    nv, npr = len(values), len(prods)
    times = np.array([p.time for _, p in prods])
    positive = times[times > 0]
    scale = float(np.median(positive)) if positive.size else 1.0
    tix = {v: npr + nv + i for i, v in enumerate(v for v in values if sccs[v][1] > 1)}
    nvar = npr + nv + len(tix)
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    lb: list[float] = []
    ub: list[float] = []

    def row(entries: Iterable[tuple[int, float]], lo: float, hi: float) -> None:
        r = len(lb)
        for c, a in entries:
            rows.append(r)
            cols.append(c)
            vals.append(a)
        lb.append(lo)
        ub.append(hi)

    by_value: dict[Value, list[int]] = {}
    for i, (v, p) in enumerate(prods):
        by_value.setdefault(v, []).append(i)
        for u in set(p.inputs):
            row([(i, 1.0), (npr + values[u], -1.0)], -np.inf, 0.0)  # chosen -> input needed
            if sccs[u][0] == sccs[v][0] and sccs[v][1] > 1:  # chosen -> t[v] >= t[u] + 1
                m = float(sccs[v][1])
                row([(tix[u], 1.0), (tix[v], -1.0), (i, m)], -np.inf, m - 1)
    for v, j in values.items():
        row([*((i, 1.0) for i in by_value.get(v, [])), (npr + j, -1.0)], 0.0, 0.0)  # needed -> one producer
    c = np.concatenate([times / scale, np.zeros(nvar - npr)])
    lo = np.zeros(nvar)
    hi = np.ones(nvar)
    for v in roots:
        lo[npr + values[v]] = 1.0
    for v, k in tix.items():
        hi[k] = sccs[v][1] - 1
    integrality = np.concatenate([np.ones(npr + nv), np.zeros(len(tix))])
    a = coo_array((vals, (rows, cols)), shape=(len(lb), nvar)).tocsr()
    res = milp(
        c,
        constraints=[LinearConstraint(a, lb, ub)],
        integrality=integrality,
        bounds=Bounds(lo, hi),
        options={"time_limit": time_limit, "mip_rel_gap": 0.0, "disp": False},
    )
    fallback = _dag_cost(heuristic, roots) or 0.0
    if res.x is None:
        if res.status == 1:
            return _extraction(problem, heuristic, "ilp", "timeout", f"no incumbent in {time_limit:g} s: dag result")
        raise ExtractionError(f"ILP found no extraction: {res.message}")
    sel = dict(greedy_sel)
    for i, (v, p) in enumerate(prods):
        if res.x[i] > 0.5:
            sel[v] = p
    cost = _dag_cost(sel, roots)
    assert cost is not None, "ILP selection is cyclic"
    status = "optimal" if res.status == 0 else "timeout"
    if cost > fallback:
        return _extraction(problem, heuristic, "ilp", status, "dag result (the ILP's was no better)")
    note = "" if status == "optimal" else f"incumbent after {time_limit:g} s (no worse than dag)"
    return _extraction(problem, sel, "ilp", status, note)


def _sccs(nodes: Iterable[Value], edges: Mapping[Value, list[Value]]) -> dict[Value, tuple[int, int]]:
    """Each node's strongly connected component: (component id, component size). Tarjan, iterative."""
    index: dict[Value, int] = {}
    low: dict[Value, int] = {}
    on: set[Value] = set()
    stack: list[Value] = []
    comp: dict[Value, tuple[int, int]] = {}
    for start in nodes:
        if start in index:
            continue
        work = [(start, iter(edges[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            u = next(it, None)
            if u is not None:
                if u not in index:
                    index[u] = low[u] = len(index)
                    stack.append(u)
                    on.add(u)
                    work.append((u, iter(edges[u])))
                elif u in on:
                    low[v] = min(low[v], index[u])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                members = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    members.append(w)
                    if w == v:
                        break
                for w in members:
                    comp[w] = (index[v], len(members))
    return comp


EXTRACTORS: dict[str, Callable[..., Extraction]] = {"greedy": greedy, "dag": dag, "ilp": ilp}
"""By name, all with the signature ``(egraph, device_pools, kernel_time, transfer_time, *, pins=None)``."""

_SOLVERS: dict[str, Callable[..., Extraction]] = {"greedy": _greedy, "dag": _dag, "ilp": _ilp}


def solve(problem: Problem, method: str, **options: float) -> Extraction:
    """Run extractor ``method`` (a key of EXTRACTORS; ``options`` such as ``time_limit``) on ``problem``.

    Raises ExtractionError when no choice of producers computes every output.
    """
    selection, missing = _selection(problem)
    if missing:
        raise ExtractionError(f"nothing computes output(s) {', '.join(missing)}")
    return _SOLVERS[method](problem, selection, **options)


# -- why a value is made the way it is, in the DAG objective --------------------------------------------


@dataclass(frozen=True)
class Term:
    """One kernel or copy of a plan: the value it makes, its node, its seconds (as the extractor priced it)."""

    value: Value
    node: NodeId
    seconds: float
    copy: bool = False


@dataclass(frozen=True)
class Rival:
    """The plan with one value made another way (``via``: a kernel, or a copy and the kernel it copies), every
    input it newly needs made the tree-cheapest way: its DAG cost, and the terms it adds and drops."""

    via: tuple[Term, ...]
    dag_cost: float
    added: tuple[Term, ...]
    dropped: tuple[Term, ...]


@dataclass(frozen=True)
class Why:
    """Why class ``cls`` is made as it is: the extraction's DAG cost (its objective), the chosen producer(s) of the
    value its users read, and the rivals, cheapest first.  ``rival.dag_cost - dag_cost`` is the marginal cost of
    the rival and equals ``sum(added) - sum(dropped)``."""

    cls: ClassId
    value: Value
    dag_cost: float
    chosen: tuple[Term, ...]
    rivals: tuple[Rival, ...]


class Explainer:
    """Answers ``why(cls)`` for one extraction, on the same problem (times, copies) the extractor solved."""

    def __init__(self, problem: Problem, extraction: Extraction) -> None:
        self.problem = problem
        self.extraction = extraction
        self.roots = sorted(set(problem.outputs.values()))
        self.selection: dict[Value, Producer] = {}
        for v, choice in extraction.choices.items():
            self.selection[v] = next(p for p in problem.producers[v]
                                     if p.node == choice.node and p.source == choice.source)
        self.fill = {v: p for v, (_, p) in _greedy_best(problem).items()}
        self.needed = _needed(self.selection, self.roots) or []

    def _value(self, cls: ClassId) -> Value | None:
        """The value of ``cls`` its users read: an output, or one a kernel reads (not only a copy's source)."""
        mine = [v for v in self.needed if v[0] == cls]
        if not mine:
            return None
        read = {u for v in self.needed for u in self.selection[v].inputs if self.selection[v].source is None}
        read |= set(self.roots)
        return next((v for v in mine if v in read), mine[-1])

    def _terms(self, sel: Mapping[Value, Producer], values: Iterable[Value]) -> tuple[Term, ...]:
        return tuple(Term(v, sel[v].node, sel[v].time, sel[v].source is not None) for v in values)

    def why(self, cls: ClassId, limit: int = 6) -> Why | None:
        """None when ``cls`` is not in the plan."""
        value = self._value(cls)
        if value is None:
            return None
        chosen = self.selection[value]
        chosen_terms = [value] + ([chosen.source] if chosen.source is not None else [])
        base = {**self.fill, **self.selection}
        rivals: dict[tuple[NodeId, ...], Rival] = {}
        for p in self.problem.producers[value]:
            sources = [None] if p.source is None else [q for q in self.problem.producers.get(p.source, [])
                                                       if q.source is None]
            for q in sources:
                if p is chosen and (q is None or q is self.selection.get(p.source)):  # type: ignore[arg-type]
                    continue
                sel = dict(base)
                sel[value] = p
                if q is not None:
                    sel[p.source] = q  # type: ignore[index]
                rival = self._rival(sel, [value] + ([p.source] if q is not None else []))  # type: ignore[list-item]
                if rival is not None:
                    rivals.setdefault(tuple(t.node for t in rival.via), rival)
        ranked = sorted(rivals.values(), key=lambda r: (r.dag_cost, tuple(t.node for t in r.via)))
        return Why(cls, value, self.extraction.dag_cost, self._terms(self.selection, chosen_terms),
                   tuple(ranked[:limit]))

    def _rival(self, sel: dict[Value, Producer], via: list[Value]) -> Rival | None:
        try:
            order = _needed(sel, self.roots)
        except KeyError:  # an input nothing computes
            return None
        if order is None:  # the swap would read its own output (a copy back and forth)
            return None
        before, after = set(self.needed), set(order)
        added = [v for v in order if v not in before or self.selection[v] is not sel[v]]
        dropped = [v for v in self.needed if v not in after or self.selection[v] is not sel[v]]
        cost = math.fsum(sel[v].time for v in order)
        return Rival(self._terms(sel, via), cost, self._terms(sel, added), self._terms(self.selection, dropped))


def explainer(egraph: EGraph, device_pools: Mapping[str, str], kernel_time: KernelTime, transfer_time: TransferTime,
              extraction: Extraction) -> Explainer:
    """An Explainer of ``extraction`` over the unpinned problem (so that rivals a pin excludes still show)."""
    return Explainer(_problem(egraph, device_pools, kernel_time, transfer_time, None), extraction)


# -- comparing ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Delta:
    """What a re-extraction (e.g. after pinning) changed, and its cost."""

    before_dag: float
    after_dag: float
    before_tree: float
    after_tree: float
    changed: tuple[Value, ...]
    """Values produced differently, newly needed, or no longer needed."""

    @property
    def dag(self) -> float:
        """Seconds added (negative: saved) by the change, in DAG cost."""
        return self.after_dag - self.before_dag

    @property
    def tree(self) -> float:
        return self.after_tree - self.before_tree

    @property
    def relative(self) -> float:
        return self.dag / self.before_dag if self.before_dag else 0.0

    def __str__(self) -> str:
        return f"{self.dag * 1e6:+.3f} µs ({self.relative:+.1%}), {len(self.changed)} value(s) changed"


def compare(before: Extraction, after: Extraction) -> Delta:
    """The cost delta (``after - before``) and the values whose producer changed."""
    def how(e: Extraction, v: Value) -> tuple[NodeId, Value | None] | None:
        c = e.choices.get(v)
        return None if c is None else (c.node, c.source)

    keys = sorted(set(before.choices) | set(after.choices))
    changed = tuple(v for v in keys if how(before, v) != how(after, v))
    return Delta(before.dag_cost, after.dag_cost, before.tree_cost, after.tree_cost, changed)

"""Extraction: choose, for every class the outputs need, the kernel or transfer that puts it in memory.

A *value* is a class held in a memory pool.  Program inputs are values in the
host pool at no cost; a ``kernel`` node makes its class a value in its device's
pool from its children's values in that pool; a ``to_device`` node copies a
value from another pool (``transfer_time(nbytes, src, dst)``).

Three extractors share one signature, ``(egraph, device_pools, kernel_time, transfer_time, *, pins, resident)``
(``resident``: classes of program inputs that a ``Session`` keeps on the devices, whose uploads cost nothing):

- ``greedy``: zyx's extractor, the cheapest producer of each value by *tree cost*
  (a shared value counted once per use), by a worklist over readers: linear up to a log;
- ``dag``: starts from greedy and improves the *DAG cost* (each chosen value's own
  time counted once) by local search (``_Search``); never worse than greedy;
- ``ilp``: the exact DAG-cost optimum by integer programming (scipy's HiGHS), the
  reference for small graphs; on a timeout it falls back to the best of its
  incumbent and ``dag``, and says so in ``Extraction.status``.

A time limit bounds a whole call, greedy's selection and the result included: dag and ilp
return what they have by then (``Extraction.note`` says so).

``Pins`` restrict the producers of chosen classes (to a node, a structural form's
kernels, or a device); ``compare`` reports what a re-extraction changed and costs.
``solve(problem, method, time_limit)`` runs an extractor on a ``Problem`` built from something else
(an imported e-graph: see ``engine.interop``).
"""

from __future__ import annotations

import heapq
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property

from engine import units
from engine.egraph.egraph import ClassId, EGraph, NodeId
from engine.kernel.attach import KernelNode
from engine.kernel.ir import HOST
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
        """The outputs' tree costs summed: a value shared by k users counts k times, but an output
        value listed twice (two names, a root listed twice) once; extraction-gym counts each entry."""
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
    """Every producer (leaves, then kernels, then transfers); ties in greedy go to the earlier one."""
    outputs: dict[str, Value]
    producers: dict[Value, list[Producer]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for v, p in self.order:
            self.producers.setdefault(v, []).append(p)

    @cached_property
    def compact(self) -> _Compact:
        """The problem in integers, built once for all the extractors run on it."""
        return _Compact(self)


def _problem(
    egraph: EGraph,
    device_pools: Mapping[str, str],
    kernel_time: KernelTime,
    transfer_time: TransferTime,
    pins: Mapping[ClassId, Pin] | None,
    resident: Collection[ClassId] = (),
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
                        t = 0.0 if src == HOST and cls.id in resident else transfer_time(nbytes, src, dst)
                        transfers.append(((cls.id, dst), Producer(n, t, ((cls.id, src),), (cls.id, src))))
    empty = [str(pinned[c]) for c, k in allowed.items() if k == 0]
    if empty:
        raise ExtractionError(f"pin {'; '.join(empty)}: no node of the class fits it")
    outputs = {name: (c, HOST) for name, c in egraph.output_classes().items()}
    return Problem(leaves + kernels + transfers, outputs)


class _Compact:
    """A Problem in integers, for the extractors' inner loops: values and producers by index.

    ``inputs[i]``: producer i's distinct inputs (file order); ``readers[v]``: the producers reading value v.
    """

    def __init__(self, problem: Problem) -> None:
        index: dict[Value, int] = {}
        for v, _ in problem.order:
            index.setdefault(v, len(index))
        for u in (*(u for _, p in problem.order for u in p.inputs), *problem.outputs.values()):
            index.setdefault(u, len(index))
        self.index = index
        self.values = list(index)
        self.producers = [p for _, p in problem.order]
        self.value = [index[v] for v, _ in problem.order]
        self.time = [p.time for p in self.producers]
        self.uses = [tuple(index[u] for u in p.inputs) for p in self.producers]
        self.inputs = [tuple(dict.fromkeys(u)) for u in self.uses]
        self.of: list[list[int]] = [[] for _ in index]
        self.readers: list[list[int]] = [[] for _ in index]
        for i, v in enumerate(self.value):
            self.of[v].append(i)
            for u in self.inputs[i]:
                self.readers[u].append(i)
        self.roots = sorted(dict.fromkeys(index[v] for v in problem.outputs.values()))

    @cached_property
    def greedy(self) -> tuple[list[float], list[int]]:
        """Each value's least tree cost and a producer achieving it (-1: not computable).

        Knuth's generalisation of Dijkstra (costs >= 0): a producer is scored once, when its last
        input settles, and a value settles at its cheapest score: O(P log P + inputs), whatever the order.
        """
        n = len(self.values)
        cost = [math.inf] * n
        best = [-1] * n
        waiting = [len(ins) for ins in self.inputs]
        heap = [(self.time[i], i) for i, w in enumerate(waiting) if w == 0]
        heapq.heapify(heap)
        while heap:
            c, i = heapq.heappop(heap)
            v = self.value[i]
            if best[v] >= 0:
                continue
            cost[v], best[v] = c, i
            for j in self.readers[v]:
                waiting[j] -= 1
                if waiting[j] == 0 and best[self.value[j]] < 0:
                    heapq.heappush(heap, (self.time[j] + sum(cost[u] for u in self.uses[j]), j))
        return cost, best


def _left(deadline: float) -> float:
    return deadline - time.perf_counter()


EXTRACTION_WALKS = 2.0
"""Building an Extraction costs about this many of the search's first walk over the needed values: the
search leaves that much of its time limit for it."""
FLOOR_VISITS = 64
"""A swap's lower bound is worked out only where its producer alone needs at most this many values; beyond
that, working it out for every class would make the search quadratic on deep e-graphs."""
KICK_REACH = 2
"""How far up (in readers) from the values a kick computes its follow-up swaps are looked for."""


class _Search:
    """Local search on the DAG cost of a selection (one producer index per value), swap by swap.

    Reference counts (how many roots and needed producers read each value) give a swap's cost delta
    directly: the time of the values it starts needing minus that of those it stops needing, with no
    walk from the roots.  A value a swap starts needing is re-chosen by its marginal cost (inputs
    already needed are free, others estimated one level down), so a class switches together with the
    classes only it needs.  A *kick* takes a swap that alone costs more because it computes new
    values, and keeps it when a descent from the needed values near them (second stage: from all
    needed values) makes the whole cheaper.  Every trial is logged and undone unless it improves and
    stays acyclic.
    """

    def __init__(self, cp: _Compact, tree: list[float], start: list[int], deadline: float) -> None:
        self.cp, self.tree, self.sel, self.deadline = cp, tree, start, deadline
        self.ref = [0] * len(cp.values)
        self.log: list[tuple[int, int, int]] = []
        """(value, its reference count before, its producer before), for undo."""
        self.options = [[i for i in cp.of[v] if v not in cp.inputs[i] and all(start[u] >= 0 for u in cp.inputs[i])]
                        for v in range(len(cp.values))]
        self.rechoose = False  # the search starts from ``start`` as it is
        self.open: set[int] = set()
        """The value being swapped and the values a walk is choosing producers below: re-choosing one to read
        any of them would close a cycle (a copy to another pool and back, say), and the trial be rejected."""
        self.cost = math.fsum(self._need(r) for r in cp.roots)
        self.rechoose = True
        self.log.clear()
        self.stopped = False

    def _out_of_time(self) -> bool:
        self.stopped = self.stopped or time.perf_counter() > self.deadline
        return self.stopped

    def _marginal(self, v: int) -> int:
        """The producer of ``v`` cheapest given what is needed now (ties keep the current one); none reading
        an ``open`` value, which would close a cycle.  An input not needed is estimated one level down: its
        cheapest producer's time plus its own unneeded inputs' tree costs."""
        time_, inputs, ref, tree, options, open_ = self.cp.time, self.cp.inputs, self.ref, self.tree, self.options, self.open
        best, low = self.sel[v], math.inf
        for i in [best, *options[v]]:
            ins = inputs[i]
            if not open_.isdisjoint(ins):
                continue
            c = time_[i]
            for u in ins:
                if not ref[u]:
                    c += min((time_[j] + sum(tree[w] for w in inputs[j] if not ref[w]) for j in options[u]),
                             default=tree[u])
                    if c >= low:
                        break
            if c < low:
                best, low = i, c
        return best

    def _need(self, v: int, budget: float = math.inf) -> float:
        """One more reader of ``v``; the time of what that starts needing (inf, half done, past ``budget``)."""
        cp, ref, sel, log, open_ = self.cp, self.ref, self.sel, self.log, self.open
        added, stack = 0.0, [v]
        while stack:
            w = stack.pop()
            if w < 0:  # all below ~w chosen: it leaves the walk's path
                open_.discard(~w)
                continue
            r = ref[w]
            log.append((w, r, sel[w]))
            ref[w] = r + 1
            if r == 0:
                i = sel[w] = self._marginal(w) if self.rechoose else sel[w]
                added += cp.time[i]
                if added > budget:  # ``_swap`` gives up; its next call starts ``open`` afresh
                    return math.inf
                open_.add(w)
                stack.append(~w)
                stack.extend(cp.inputs[i])
        return added

    def _release(self, v: int, cap: float = math.inf) -> float:
        """One reader of ``v`` fewer; the time of what that stops needing (negative; -inf, half done, once
        more than ``cap`` values were visited)."""
        cp, ref, sel, log = self.cp, self.ref, self.sel, self.log
        freed, stack, end = 0.0, [v], len(log) + cap
        while stack:
            if len(log) > end:
                return -math.inf
            w = stack.pop()
            r = ref[w]
            log.append((w, r, sel[w]))
            ref[w] = r - 1
            if r == 1:
                freed -= cp.time[sel[w]]
                stack.extend(cp.inputs[sel[w]])
        return freed

    def _swap(self, v: int, i: int, budget: float = math.inf) -> float:
        """Produce ``v`` by ``i`` instead; the DAG cost delta (logged: ``_undo`` takes it back), or inf once
        what it starts needing costs more than ``budget``."""
        cp, old = self.cp, self.sel[v]
        self.open = {v}
        self.log.append((v, self.ref[v], old))
        self.sel[v] = i
        delta, added = cp.time[i] - cp.time[old], 0.0
        for u in cp.inputs[i]:
            added += self._need(u, budget - added)
            if added > budget:
                return math.inf
        delta += added
        for u in cp.inputs[old]:
            delta += self._release(u)
        return delta

    def _floor(self, v: int) -> float:
        """A lower bound on the delta of any swap at ``v``, less the new producer's time: whatever needing
        its inputs adds is >= 0, and no more can stop being needed than all that its producer alone reads."""
        mark, old = len(self.log), self.sel[v]
        freed = math.fsum(self._release(u, FLOOR_VISITS) for u in self.cp.inputs[old])
        self._undo(mark)
        if freed == -math.inf:  # deep (a chain): not worth working out, take the trivial bound
            freed = -self.cost
        return freed - self.cp.time[old]

    def _undo(self, mark: int) -> None:
        log, ref, sel = self.log, self.ref, self.sel
        while len(log) > mark:
            v, r, i = log.pop()
            ref[v], sel[v] = r, i

    def _acyclic_from(self, v: int) -> bool:
        """Whether the selection below ``v`` has no cycle (every cycle a trial makes passes through it)."""
        inputs, sel = self.cp.inputs, self.sel
        state = {v: False}  # False: on the path, True: done
        stack = [(v, iter(inputs[sel[v]]))]
        while stack:
            w, it = stack[-1]
            u = next(it, None)
            if u is None:
                stack.pop()
                state[w] = True
            elif u not in state:
                state[u] = False
                stack.append((u, iter(inputs[sel[u]])))
            elif not state[u]:
                return False
        return True

    def _improves(self, delta: float) -> bool:
        return delta < -1e-12 * max(self.cost, 1e-300)

    def _touched(self, mark: int) -> list[int]:
        """The needed values a trial since ``mark`` changed, and their needed readers: where to look next."""
        cp, ref = self.cp, self.ref
        out = dict.fromkeys(v for v, _, _ in self.log[mark:] if ref[v])
        for v in list(out):
            out.update((cp.value[j], None) for j in cp.readers[v] if ref[cp.value[j]])
        return list(out)

    def descend(self, values: Iterable[int]) -> float:
        """Take improving swaps at ``values`` and wherever they lead, until none is left; their cost delta
        (logged, like a swap's)."""
        sel, ref = self.sel, self.ref
        queue = deque(dict.fromkeys(values))
        queued = set(queue)
        total = 0.0
        while queue and not self._out_of_time():
            v = queue.popleft()
            queued.discard(v)
            if not ref[v]:
                continue
            floor = self._floor(v)
            for i in self.options[v]:
                budget = -(self.cp.time[i] + floor)  # improving needs less added than this
                if i == sel[v] or budget <= 0:
                    continue
                mark = len(self.log)
                delta = self._swap(v, i, budget)
                if self._improves(delta) and self._acyclic_from(v):
                    total += delta
                    for w in self._touched(mark):
                        if w not in queued:
                            queued.add(w)
                            queue.append(w)
                    break
                self._undo(mark)
        return total

    def _near(self, new: list[int]) -> list[int]:
        """The needed values reading ``new`` values, directly or through up to ``KICK_REACH - 1`` unneeded ones."""
        cp, ref = self.cp, self.ref
        found: dict[int, None] = {}
        seen, frontier = set(new), new
        for _ in range(KICK_REACH):
            ahead = []
            for w in frontier:
                for j in cp.readers[w]:
                    x = cp.value[j]
                    if x not in seen:
                        seen.add(x)
                        if ref[x]:
                            found[x] = None
                        else:
                            ahead.append(x)
            frontier = ahead
        return list(found)

    def kick(self, v: int, wide: bool) -> bool:
        """Apply the first kick at ``v`` that pays: a swap computing new values, then a descent from
        the needed values near them (``wide``: from all needed values).  Whether one did."""
        for i in self.options[v]:
            if i == self.sel[v] or self._out_of_time():
                continue
            delta = self._swap(v, i)
            new = [w for w, r, _ in self.log if r == 0 and self.ref[w]]
            if new and self._acyclic_from(v):
                delta += self.descend(x for x in (self._needed() if wide else self._near(new)) if x != v)
                if self._improves(delta):
                    self._commit(delta)
                    return True
            self._undo(0)
        return False

    def _commit(self, delta: float) -> None:
        """Keep what the log holds, and descend from what it touched."""
        self.cost += delta
        touched = self._touched(0)
        self.log.clear()
        self.cost += self.descend(touched)
        self.log.clear()

    def _needed(self) -> list[int]:
        return [v for v, r in enumerate(self.ref) if r]

    def run(self, max_rounds: int) -> None:
        """Descend from everything needed; then rounds of kicks (each followed by a descent) until none
        pays: narrow kicks first, then wide ones (dearer, they find moves narrow ones miss)."""
        self.cost += self.descend(self._needed())
        self.log.clear()
        for wide in (False, True):
            for _ in range(max_rounds):
                kicked = False
                for v in self._needed():
                    if self._out_of_time():
                        return
                    kicked |= bool(self.ref[v]) and self.kick(v, wide)
                if not kicked:
                    break


def _greedy_best(problem: Problem) -> dict[Value, tuple[float, Producer]]:
    """The tree-cheapest producer of every computable value, and its tree cost."""
    cp = problem.compact
    cost, best = cp.greedy
    return {cp.values[v]: (cost[v], cp.producers[i]) for v, i in enumerate(best) if i >= 0}


def _selection(problem: Problem) -> tuple[dict[Value, Producer], list[str]]:
    """Greedy's selection, and the outputs it cannot compute."""
    cp = problem.compact
    _, best = cp.greedy
    selection = {cp.values[v]: cp.producers[i] for v, i in enumerate(best) if i >= 0}
    missing = [name for name, v in problem.outputs.items() if v not in selection]
    return selection, missing


def _solve(
    egraph: EGraph,
    device_pools: Mapping[str, str],
    kernel_time: KernelTime,
    transfer_time: TransferTime,
    pins: Mapping[ClassId, Pin] | None,
    resident: Collection[ClassId],
) -> tuple[Problem, dict[Value, Producer]]:
    """The problem and greedy's selection; ExtractionError (naming the pins to blame) if an output is uncomputable."""
    problem = _problem(egraph, device_pools, kernel_time, transfer_time, pins, resident)
    selection, missing = _selection(problem)
    if missing:
        if not pins:
            raise ExtractionError(f"no device can compute output(s) {', '.join(missing)}")
        args = (egraph, device_pools, kernel_time, transfer_time)
        blame = []
        for pin in pins.values():
            alone = _greedy_best(_problem(*args, Pins([pin]), resident))
            if any(v not in alone for v in problem.outputs.values()):
                blame.append(str(pin))
        which = "; ".join(blame) if blame else "; ".join(map(str, pins.values())) + " (together)"
        raise ExtractionError(f"pin {which} leaves output(s) {', '.join(missing)} uncomputable")
    return problem, selection


def _needed(selection: Mapping[Value, Producer], roots: Iterable[Value]) -> list[Value] | None:
    """The values the roots need, inputs before users; None if the selection has a cycle."""
    state: dict[Value, bool] = {}  # False: expanded, so on the current path; True: done
    order: list[Value] = []
    for root in roots:
        stack = [(root, False)]
        while stack:
            v, expanded = stack.pop()
            if expanded:
                state[v] = True
                order.append(v)
            elif v not in state:
                state[v] = False
                stack.append((v, True))
                for u in selection[v].inputs:
                    done = state.get(u)
                    if done is None:
                        stack.append((u, False))
                    elif not done:
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
    resident: Collection[ClassId] = (),
) -> Extraction:
    """The tree-cheapest producer of every value (a worklist over readers: linear up to a log factor).

    ``device_pools`` maps device names to their pools; ``kernel_time(param)`` gives a kernel
    node's seconds, ``transfer_time(nbytes, src, dst)`` those of a copy between pools.
    """
    return _greedy(*_solve(egraph, device_pools, kernel_time, transfer_time, pins, resident), math.inf)


def _greedy(problem: Problem, selection: dict[Value, Producer], deadline: float) -> Extraction:
    """Greedy's selection as it is (computing it is linear: it has no use for a deadline)."""
    return _extraction(problem, selection, "greedy")


def dag(
    egraph: EGraph,
    device_pools: Mapping[str, str],
    kernel_time: KernelTime,
    transfer_time: TransferTime,
    *,
    pins: Mapping[ClassId, Pin] | None = None,
    resident: Collection[ClassId] = (),
    max_rounds: int = 50,
    seconds: float = 2.0,
) -> Extraction:
    """Greedy, then local search on the DAG cost (see ``_Search``): swaps scored by their cost delta, and kicks.

    A kick keeps a swap that alone costs more (say, computing a shared value) when its readers
    switching to that value end cheaper overall.  The search stops after ``seconds`` (counted from
    the call) with the best selection found (never worse than greedy's); ``note`` says so.
    """
    deadline = time.perf_counter() + seconds
    return _dag(*_solve(egraph, device_pools, kernel_time, transfer_time, pins, resident), deadline, max_rounds)


def _dag(problem: Problem, selection: dict[Value, Producer], deadline: float, max_rounds: int = 50) -> Extraction:
    search = _dag_search(problem, deadline, max_rounds)
    note = "local search stopped at its time limit" if search.stopped else ""
    return _extraction(problem, _chosen(search), "dag", note=note)


def _dag_search(problem: Problem, deadline: float, max_rounds: int = 50) -> _Search:
    """The search from greedy's selection, stopped in time for its caller to build the extraction."""
    cp = problem.compact
    tree, best = cp.greedy
    began = time.perf_counter()
    search = _Search(cp, tree, list(best), deadline)
    search.deadline -= EXTRACTION_WALKS * (time.perf_counter() - began)
    search.run(max_rounds)
    return search


def _chosen(search: _Search) -> dict[Value, Producer]:
    """The needed values of a search's selection, and their producers."""
    cp = search.cp
    return {cp.values[v]: cp.producers[search.sel[v]] for v, r in enumerate(search.ref) if r}


def ilp(
    egraph: EGraph,
    device_pools: Mapping[str, str],
    kernel_time: KernelTime,
    transfer_time: TransferTime,
    *,
    pins: Mapping[ClassId, Pin] | None = None,
    resident: Collection[ClassId] = (),
    time_limit: float = 10.0,
) -> Extraction:
    """The DAG-cost optimum by a 0/1 program (scipy.optimize.milp), for small graphs.

    Variables: ``x[p]`` per producer (chosen), ``n[v]`` per value (needed), and an order ``t[v]``
    for the values of cyclic parts (transfers make every class a cycle between pools).  Outputs are
    needed; a needed value has exactly one chosen producer; a chosen producer needs its inputs and
    comes after them.  Status ``optimal``, or ``timeout`` (the best of the incumbent and ``dag``).
    ``time_limit`` bounds the whole call: the ``dag`` search first, the model, then the solver.
    """
    deadline = time.perf_counter() + time_limit
    return _ilp(*_solve(egraph, device_pools, kernel_time, transfer_time, pins, resident), deadline)


PRE_SEARCH = 0.2
"""The share of the ILP's time limit its ``dag`` pre-search (the fallback) may take at most."""
SOLVER_SHARE = 0.9
"""The share of the time left that HiGHS is given (it overruns it a little): the rest covers reading its answer."""


def _ilp(problem: Problem, greedy_sel: dict[Value, Producer], deadline: float) -> Extraction:
    import numpy as np
    from scipy.optimize import Bounds, LinearConstraint, milp
    from scipy.sparse import coo_array

    search = _dag_search(problem, time.perf_counter() + PRE_SEARCH * _left(deadline))
    heuristic = _chosen(search)
    roots = sorted(set(problem.outputs.values()))
    cp, options = search.cp, search.options
    # the values the outputs may need, and their producers (inputs computable, not reading themselves)
    values: dict[int, int] = {}
    prods: list[int] = []
    stack = list(cp.roots)
    while stack:
        v = stack.pop()
        if v not in values:
            values[v] = len(values)
            prods.extend(options[v])
            stack.extend(u for i in options[v] for u in cp.inputs[i])
    sccs = _sccs(values, {v: [u for i in options[v] for u in cp.inputs[i]] for v in values})
    nv, npr = len(values), len(prods)
    times = np.array([cp.time[i] for i in prods])
    positive = times[times > 0]
    scale = float(np.median(positive)) if positive.size else 1.0
    tix = {v: npr + nv + k for k, v in enumerate(v for v in values if sccs[v][1] > 1)}
    nvar = npr + nv + len(tix)
    # chosen -> input needed: x[k] - n[u] <= 0
    reads = np.array([(k, npr + values[u]) for k, i in enumerate(prods) for u in cp.inputs[i]], dtype=np.int64)
    reads = reads.reshape(-1, 2)
    nr = len(reads)
    # chosen -> t[v] >= t[u] + 1 within a cyclic component: t[u] - t[v] + m x[k] <= m - 1
    order = [(k, tix[u], tix[v], sccs[v][1]) for k, i in enumerate(prods) if sccs[v := cp.value[i]][1] > 1
             for u in cp.inputs[i] if sccs[u][0] == sccs[v][0]]
    after = np.array(order, dtype=np.int64).reshape(-1, 4)
    na = len(after)
    # needed -> one producer: sum of x[k] over the value's producers - n[v] = 0
    of = np.array([values[cp.value[i]] for i in prods], dtype=np.int64)
    rows = np.concatenate([np.arange(nr), np.arange(nr), np.repeat(np.arange(nr, nr + na), 3),
                           nr + na + of, nr + na + np.arange(nv)])
    cols = np.concatenate([reads[:, 0], reads[:, 1], after[:, [1, 2, 0]].ravel(), np.arange(npr), npr + np.arange(nv)])
    ones = np.ones(max(nr, npr, nv))
    vals = np.concatenate([ones[:nr], -ones[:nr], np.column_stack([ones[:na], -ones[:na], after[:, 3]]).ravel(),
                           ones[:npr], -ones[:nv]])
    lb = np.concatenate([np.full(nr + na, -np.inf), np.zeros(nv)])
    ub = np.concatenate([np.zeros(nr), after[:, 3] - 1.0, np.zeros(nv)])
    c = np.concatenate([times / scale, np.zeros(nvar - npr)])
    lo = np.zeros(nvar)
    hi = np.ones(nvar)
    for v in cp.roots:
        lo[npr + values[v]] = 1.0
    for v, k in tix.items():
        hi[k] = sccs[v][1] - 1
    integrality = np.concatenate([np.ones(npr + nv), np.zeros(len(tix))])
    a = coo_array((vals, (rows, cols)), shape=(len(lb), nvar)).tocsr()
    began = time.perf_counter()
    fallback = _extraction(problem, heuristic, "ilp", "timeout")
    reserve = time.perf_counter() - began  # reading the solver's answer back costs about as much
    limit = (_left(deadline) - reserve) * SOLVER_SHARE
    if limit <= 0:
        return replace(fallback, note="time limit reached before the solver ran: dag result")
    answer: list = []
    # HiGHS runs without the GIL and may overrun its own limit: wait for it no longer than ours.  Left
    # running, it stops at its limit shortly after (not a daemon: the interpreter's exit waits for it).
    solver = threading.Thread(target=lambda: answer.append(milp(
        c, constraints=[LinearConstraint(a, lb, ub)], integrality=integrality, bounds=Bounds(lo, hi),
        options={"time_limit": limit, "mip_rel_gap": 0.0, "disp": False})), name="zyx-ilp")
    solver.start()
    solver.join(max(_left(deadline) - reserve, 0.0))
    if not answer:
        return replace(fallback, note="time limit reached while the solver ran: dag result")
    res = answer[0]
    if res.x is None:
        if res.status == 1:
            return replace(fallback, note=f"no incumbent in {limit:.3g} s: dag result")
        raise ExtractionError(f"ILP found no extraction: {res.message}")
    sel = dict(greedy_sel)
    for k, i in enumerate(prods):
        if res.x[k] > 0.5:
            sel[cp.values[cp.value[i]]] = cp.producers[i]
    cost = _dag_cost(sel, roots)
    assert cost is not None, "ILP selection is cyclic"
    status = "optimal" if res.status == 0 else "timeout"
    if cost > fallback.dag_cost:
        return replace(fallback, status=status, note="dag result (the ILP's was no better)")
    note = "" if status == "optimal" else f"incumbent after {limit:.3g} s (no worse than dag)"
    return _extraction(problem, sel, "ilp", status, note)


def _sccs(nodes: Iterable[int], edges: Mapping[int, list[int]]) -> dict[int, tuple[int, int]]:
    """Each node's strongly connected component: (component id, component size). Tarjan, iterative."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    on: set[int] = set()
    stack: list[int] = []
    comp: dict[int, tuple[int, int]] = {}
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


TIME_LIMITS = {"greedy": math.inf, "dag": 2.0, "ilp": 10.0}
"""Each extractor's default time limit in seconds (greedy's work is linear: it needs none)."""


def solve(problem: Problem, method: str, time_limit: float | None = None) -> Extraction:
    """Run extractor ``method`` (a key of EXTRACTORS) on ``problem`` within ``time_limit`` seconds
    (default ``TIME_LIMITS[method]``), greedy's selection included.

    Raises ExtractionError when no choice of producers computes every output.
    """
    deadline = time.perf_counter() + (TIME_LIMITS[method] if time_limit is None else time_limit)
    selection, missing = _selection(problem)
    if missing:
        raise ExtractionError(f"nothing computes output(s) {', '.join(missing)}")
    return _SOLVERS[method](problem, selection, deadline)


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

    def form_costs(self) -> dict[NodeId, float]:
        """Each rival form's marginal DAG cost (what the plan would pay more, or less when negative, to make the
        class with it): that of the cheapest rival through it."""
        out: dict[NodeId, float] = {}
        for rival in self.rivals:
            for t in rival.via:
                out.setdefault(t.node, rival.dag_cost - self.dag_cost)
        return out


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
              extraction: Extraction, resident: Collection[ClassId] = ()) -> Explainer:
    """An Explainer of ``extraction`` over the unpinned problem (so that rivals a pin excludes still show)."""
    return Explainer(_problem(egraph, device_pools, kernel_time, transfer_time, None, resident), extraction)


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
        return f"{units.seconds(self.dag, signed=True)} ({self.relative:+.1%}), {units.plural(len(self.changed), 'value')} changed"


def compare(before: Extraction, after: Extraction) -> Delta:
    """The cost delta (``after - before``) and the values whose producer changed."""
    def how(e: Extraction, v: Value) -> tuple[NodeId, Value | None] | None:
        c = e.choices.get(v)
        return None if c is None else (c.node, c.source)

    keys = sorted(set(before.choices) | set(after.choices))
    changed = tuple(v for v in keys if how(before, v) != how(after, v))
    return Delta(before.dag_cost, after.dag_cost, before.tree_cost, after.tree_cost, changed)

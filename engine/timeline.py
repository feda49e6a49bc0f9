"""Where the time of a plan went: its launches and copies laid out in time, one lane per device, and the memory
each pool holds over the steps.

Steps run one after another (``plan.execute``), so a step starts when the one before it ends.  The times are
the execution's measured step times when the plan ran, else each step's prediction (and the bars say so).  The
TUI's timeline screen and the exported ``timeline.svg`` both draw this one object.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from engine.devices.base import Device
from engine.kernel.ir import HOST
from engine.plan import Allocate, Copy, ExecPlan, Execution, Free, Launch


@dataclass(frozen=True)
class Bar:
    """One launch or copy: plan step ``step`` (0-based) on lane ``lane`` from ``start`` for ``seconds``."""

    step: int
    lane: str
    kind: str
    """``launch`` or ``copy``."""
    label: str
    start: float
    seconds: float
    measured: bool
    """True: the execution's measured time; False: the plan's prediction (the plan did not run)."""

    @property
    def end(self) -> float:
        return self.start + self.seconds


@dataclass(frozen=True)
class PoolMemory:
    """Bytes held in ``pool`` after each step of the plan, and their maximum."""

    pool: str
    held: tuple[int, ...]
    peak: int


@dataclass(frozen=True)
class Timeline:
    lanes: tuple[str, ...]
    """Device names, in the order of the devices given, those the plan uses only."""
    bars: tuple[Bar, ...]
    ends: tuple[float, ...]
    """When each step ends (seconds from the first step's start)."""
    memory: tuple[PoolMemory, ...]
    measured: bool
    """Whether the times are an execution's (else all predicted)."""

    @property
    def total(self) -> float:
        return self.ends[-1] if self.ends else 0.0

    def busiest(self, n: int) -> list[Bar]:
        """The ``n`` longest bars, longest first (ties by step)."""
        return sorted(self.bars, key=lambda b: (-b.seconds, b.step))[:n]

    def lane_seconds(self, lane: str) -> float:
        return sum(b.seconds for b in self.bars if b.lane == lane)


def timeline(plan: ExecPlan, execution: Execution | None, devices: Sequence[Device]) -> Timeline:
    """The timeline of ``plan``, timed by ``execution`` when given (it must be a run of this plan); lanes in the
    order of ``devices``.  A copy is drawn on the lane of the device whose pool it touches (``host`` if none).
    """
    pools = {d.pool: d.name for d in devices if d.pool != HOST}
    if execution is not None and len(execution.step_times) != len(plan.steps):
        raise ValueError(f"the execution has {len(execution.step_times)} step times, the plan {len(plan.steps)} steps")
    bars: list[Bar] = []
    ends: list[float] = []
    held: dict[str, int] = {}
    history: dict[str, list[int]] = {}
    now = 0.0
    for i, step in enumerate(plan.steps):
        if isinstance(step, Launch | Copy):
            seconds = execution.step_times[i] if execution is not None else step.predicted
            if isinstance(step, Launch):
                lane, label = step.device, step.name
            else:
                lane = next((pools[p] for p in (step.source[1], step.target[1]) if p in pools), HOST)
                label = f"c{step.source[0]} {step.source[1]}→{step.target[1]}"
            bars.append(Bar(i, lane, "launch" if isinstance(step, Launch) else "copy", label, now, seconds,
                            execution is not None))
            now += seconds
        elif isinstance(step, Allocate | Free):
            pool = step.value[1]
            held[pool] = held.get(pool, 0) + (step.buffer.nbytes if isinstance(step, Allocate) else -step.buffer.nbytes)
            history.setdefault(pool, [0] * i)
        for pool, values in history.items():
            values.append(held[pool])
        ends.append(now)
    used = {b.lane for b in bars}
    names = [d.name for d in devices]
    lanes = tuple(d for d in names if d in used) + tuple(sorted(used - set(names)))
    memory = tuple(PoolMemory(p, tuple(v), max(v, default=0)) for p, v in history.items())
    return Timeline(lanes, tuple(bars), tuple(ends), memory, execution is not None)

"""The stages of a compilation, and what one of them shows (``Compilation.view``).

The explorer, the exporters and the CLI all read a ``StageView``: which e-graph a stage shows, which kernel
times count (nominal estimates at ``kernelized``, tuned or predicted from ``tuned`` on) and whether there is a
plan are decided here, once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from engine.devices.base import DEFAULT_VARIANT, Variant
from engine.egraph.egraph import ClassId, EGraph
from engine.extract import Extraction, Why
from engine.kernel.attach import KernelNode
from engine.kernel.kernelize import Kernelization
from engine.plan import ExecPlan, Execution
from engine.timeline import Timeline, timeline
from engine.tuning import TuneResult

if TYPE_CHECKING:
    from engine.pipeline import Compilation, Verification


class Stage(StrEnum):
    """A stage of the pipeline, in order; its value is its name (``--stage`` flags, JSON, ``Compilation.stage``)."""

    PROGRAM = "program"
    EGRAPH = "egraph"
    SATURATED = "saturated"
    KERNELIZED = "kernelized"
    TUNED = "tuned"
    PLAN = "plan"
    EXECUTED = "executed"

    @property
    def order(self) -> int:
        """The stage's place in the pipeline (0 for ``program``)."""
        return STAGES.index(self)

    def shows(self, other: str) -> bool:
        """Whether viewing this stage shows what stage ``other`` made (``other`` is this one or an earlier one).

        >>> Stage.PLAN.shows("tuned"), Stage.TUNED.shows(Stage.PLAN)
        (True, False)
        """
        return self.order >= Stage(other).order


STAGES: tuple[Stage, ...] = tuple(Stage)


@dataclass(frozen=True)
class StageView:
    """A compilation as of one stage: what later stages made is hidden, what this stage and earlier ones made is
    shown as it is now (a stage still running shows its progress: tuning fills ``kernel_times`` live).

    The e-graph is the stage's own (``egraph`` and ``saturated`` are prefixes of the final one, taken once and kept
    by the compilation; ``iteration`` picks a saturation iteration), None before the e-graph or before the stage's
    e-graph is complete."""

    compilation: Compilation
    stage: Stage
    iteration: int | None
    egraph: EGraph | None

    @property
    def kernelization(self) -> Kernelization | None:
        return self.compilation.kernelization if self.stage.shows(Stage.KERNELIZED) else None

    @property
    def estimated(self) -> bool:
        """Whether ``kernel_times`` are the devices' nominal estimates (before tuning)."""
        return not self.stage.shows(Stage.TUNED)

    @property
    def kernel_times(self) -> Mapping[KernelNode, float]:
        """Seconds of each kernel node: nominal estimates at ``kernelized``, tuned or predicted from ``tuned`` on."""
        c = self.compilation
        if not self.stage.shows(Stage.KERNELIZED):
            return {}
        return c.estimates if self.estimated else c.kernel_times

    @property
    def tuning(self) -> Mapping[KernelNode, TuneResult]:
        return {} if self.estimated else self.compilation.tuning

    def variant(self, kn: KernelNode) -> Variant:
        """The variant kernel node ``kn`` launches with as of this stage (the default before tuning)."""
        return DEFAULT_VARIANT if self.estimated else self.compilation.variants.get(kn, DEFAULT_VARIANT)

    def measured(self, kn: KernelNode) -> bool:
        """Whether ``kn``'s time in ``kernel_times`` was measured (tuned), not predicted or estimated."""
        return not self.estimated and self.compilation.measured(kn)

    @property
    def extraction(self) -> Extraction | None:
        return self.compilation.extraction if self.stage.shows(Stage.PLAN) else None

    @property
    def plan(self) -> ExecPlan | None:
        return self.compilation.plan if self.stage.shows(Stage.PLAN) else None

    @property
    def execution(self) -> Execution | None:
        return self.compilation.execution if self.stage.shows(Stage.EXECUTED) else None

    @property
    def verification(self) -> Verification | None:
        return self.compilation.verification if self.stage.shows(Stage.EXECUTED) else None

    def timeline(self) -> Timeline | None:
        """The plan's timeline (measured once executed); None without a plan."""
        plan = self.plan
        return None if plan is None else timeline(plan, self.execution, self.compilation.devices)

    def why(self, cid: ClassId) -> Why | None:
        """Why class ``cid`` is made as it is in the plan (DAG cost, as the extractor decided); None without one."""
        if self.extraction is None:
            return None
        c = self.compilation
        assert c.egraph is not None
        return c.explainer().why(c.egraph.find(cid))

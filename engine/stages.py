"""The stages of a compilation, in order.  What one of them shows is ``engine.pipeline.StageView``
(``Compilation.view``), beside the compilation it reads."""

from __future__ import annotations

from enum import StrEnum


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

"""What the main screen shows, as every pane reads it (no Textual here): one stage of the session, the saturation
iteration scrubbed to, and how far the compilation has got."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from engine import EGraph, KernelNode, Stage, TuneResult, Variant
from zyx_explorer import model


@dataclass(frozen=True)
class View:
    """A pane's ``show(view)`` argument; a new one is made for each refresh (it is never changed)."""

    session: model.Session
    stage: str
    iteration: int | None = None
    """The saturation iteration scrubbed to (None: the stage as it ended)."""
    running: bool = False
    """The compilation worker is still at it."""
    activity: str | None = None
    """What the tuner is at (the stage bar shows it while tuning)."""
    stopped: bool = False
    """The user stopped the tuning (``c``)."""
    live: bool = False
    """Tuning now and following it: the costs show what the tuner has measured so far."""
    refill: int = 0
    """Bumped to make every pane refill although its sources look the same (a what-if changed what they hold)."""

    def egraph(self) -> EGraph | None:
        return self.session.egraph(self.stage, self.iteration)

    def reached(self, name: str) -> bool:
        """Whether this stage shows what stage ``name`` made."""
        return Stage(self.stage).shows(name)

    def cost_sources(self) -> tuple[Mapping[KernelNode, float], Mapping[KernelNode, TuneResult]]:
        """Kernel times and tuning results the costs show: those of the stage, or, while ``live``, a copy of what
        the tuner has measured so far (the rest predicted)."""
        c = self.session.compilation
        if self.live and c is not None:
            return dict(c.kernel_times), dict(c.tuning)
        return self.session.kernel_times(self.stage), self.session.tuning(self.stage)

    def launched(self, cand_id: str) -> tuple[str, Variant] | None:
        """(device, variant) the plan launches candidate ``cand_id`` with (else its fastest device's)."""
        c = self.session.current()
        if c is None or c.egraph is None:
            return None
        chosen = model.chosen_kernels(c.egraph, self.session.extraction(self.stage))
        return model.launched_variant(cand_id, self.session.kernel_times(self.stage), chosen,
                                      lambda kn: self.session.variant(self.stage, kn))


class Memo:
    """Whether a pane is to be refilled: its sources differ from last time (objects by identity, plain values by
    equality); a big e-graph's rows take a while to rebuild."""

    PLAIN = (int, float, str, tuple, type(None))

    def __init__(self) -> None:
        self._sources: tuple | None = None

    def changed(self, *sources: object) -> bool:
        old = self._sources
        if old is not None and len(old) == len(sources) and all(
                a == b if isinstance(a, self.PLAIN) else a is b for a, b in zip(old, sources)):
            return False
        self._sources = sources
        return True

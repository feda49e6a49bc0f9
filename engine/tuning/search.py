"""Variant search per (kernel, device): seeds, then beam search over one-parameter actions, within a budget.

Each round builds all of its candidates in one program (``compile_many``),
then verifies each against the numpy evaluator and times it.  Wrong variants
and those that fail to build or launch are recorded with the reason, never chosen;
when none verifies, the result's ``seconds`` is infinite (extraction then takes
another device).  A device that is lost (``device.lost`` set) ends the search at once.
Devices without variants (numpy, blas) time their one default variant.
"""

from __future__ import annotations

import contextlib
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from engine.devices.base import Device
from engine.fileio import CacheWarning
from engine.kernel.ir import Kernel
from engine.kernel.schedule import DEFAULT_VARIANT, Variant
from engine.tuning.cache import TuneCache
from engine.tuning.calibrate import Calibrations
from engine.tuning.measure import Bench, always_fresh
from engine.tuning.model import predict
from engine.tuning.space import neighbours, seeds

OK, WRONG, FAILED = "ok", "wrong", "failed"


@dataclass(frozen=True)
class Budget:
    """Bounds of one kernel's search: variants timed (seeds included), seconds spent, beam width."""

    variants: int = 24
    seconds: float = 30.0
    """Per kernel and device."""
    total: float = math.inf
    """Per compilation (a ``Tuner``'s, over all kernels)."""
    beam: int = 3
    per_round: int = 8
    """Candidates built (in one program) and timed per round."""


@dataclass(frozen=True)
class Trial:
    """One variant tried: ``ok`` (verified, timed), ``wrong`` (output differs) or ``failed`` (build or launch)."""

    variant: Variant
    status: str
    seconds: float | None
    """Median of the timed launches (``ok`` only)."""
    predicted: float
    reason: str = ""
    times: tuple[float, ...] = ()
    touch: float | None = None
    """Seconds a launch spends more on fresh outputs (a plan's) than on reused ones (the trial's): timed on the
    first variant of a kernel that verifies, where its host outputs are always new pages (``always_fresh``);
    what a first touch costs differs by kernel, not only by byte."""

    def to_json(self) -> dict[str, Any]:
        return {"variant": self.variant.to_json(), "status": self.status, "seconds": self.seconds,
                "predicted": self.predicted, "reason": self.reason, "times": list(self.times), "touch": self.touch}

    @staticmethod
    def from_json(data: dict[str, Any]) -> Trial:
        touch = data.get("touch")
        return Trial(Variant.from_json(data["variant"]), str(data["status"]), data["seconds"],
                     float(data["predicted"]), str(data.get("reason", "")), tuple(data.get("times", ())),
                     None if touch is None else float(touch))


@dataclass(frozen=True)
class TuneResult:
    """Every variant tried for one kernel on one device, and the best verified one."""

    kernel: str
    """``kernel.key``."""
    device: str
    trials: tuple[Trial, ...]
    best: Variant
    seconds: float
    """The best variant's median time; infinite when nothing verified (the kernel cannot run here)."""
    elapsed: float
    """Seconds the search took (0 for a cache hit)."""
    cache: str = "off"
    """``hit``, ``miss``, ``corrupt`` (read failed: rebuilt) or ``off``."""
    cancelled: bool = False
    ok: bool = True
    """Whether some variant verified (if not, ``best`` is the default and ``seconds`` infinite)."""

    @property
    def touch(self) -> float | None:
        """What a plan's launch pays more on fresh outputs than a trial, as a trial timed it; None where none did
        (the calibrated price per byte stands in)."""
        return next((t.touch for t in self.trials if t.touch is not None), None)

    @property
    def default(self) -> Trial | None:
        return next((t for t in self.trials if t.variant == DEFAULT_VARIANT), None)

    @property
    def failure(self) -> str:
        """Why nothing verified: the first reason recorded (empty when ``ok``)."""
        return "" if self.ok else next((t.reason for t in self.trials if t.reason), "no variant was tried")

    def to_json(self) -> dict[str, Any]:
        return {"best": self.best.to_json(), "seconds": self.seconds if self.ok else None, "elapsed": self.elapsed,
                "ok": self.ok, "trials": [t.to_json() for t in self.trials]}

    @staticmethod
    def from_json(kernel: str, device: str, data: dict[str, Any], cache: str) -> TuneResult:
        ok = bool(data.get("ok", True))
        seconds = float(data["seconds"]) if ok else math.inf
        if not math.isfinite(seconds) and ok:
            raise ValueError(f"a verified result with {seconds} seconds")
        return TuneResult(kernel, device, tuple(Trial.from_json(t) for t in data["trials"]),
                          Variant.from_json(data["best"]), seconds, 0.0, cache, False, ok)


@dataclass(frozen=True)
class Progress:
    """Reported before each variant is timed (``trial`` None) and after (its Trial): kernel ``kernel`` on
    ``device``, ``done`` of at most ``total`` variants, ``elapsed`` seconds of the search's ``budget``."""

    kernel: str
    device: str
    done: int
    total: int
    trial: Trial | None
    variant: Variant = DEFAULT_VARIANT
    elapsed: float = 0.0
    budget: float = math.inf


ProgressFn = Callable[[Progress], None]
CancelFn = Callable[[], bool]
Clock = Callable[[], float]
Model = Callable[[Kernel, Device, Variant], float]
"""Predicted seconds of a variant (the calibrated cost model)."""
Observe = Callable[[Kernel, Device, Variant, float], None]
"""Told every measured time (refits the cost model)."""

HOPELESS = 8.0
"""A candidate predicted this many times slower than the best variant timed so far is not tried."""
TOUCH_PAIRS = 5
"""Launches on reused and on fresh outputs behind a tuned kernel's first touch (``TuneResult.touch``): fresh
memory is slow in streaks of a few launches on a VM, which move a median of 5 pairs less often than one of 3."""


@dataclass
class _Search:
    kernel: Kernel
    device: Device
    budget: Budget
    progress: ProgressFn | None
    cancel: CancelFn | None
    limit: float
    """Seconds this search may take (the kernel's budget, or what is left of the compilation's)."""
    model: Model = predict
    observe: Observe | None = None
    clock: Clock = time.perf_counter
    start: float = 0.0
    trials: dict[Variant, Trial] = field(default_factory=dict)
    cancelled: bool = False

    def __post_init__(self) -> None:
        self.start = self.clock()

    def left(self) -> float:
        return self.limit - (self.clock() - self.start)

    def cancelling(self) -> bool:
        if self.cancel is not None and self.cancel():
            self.cancelled = True
        return self.cancelled

    def stop(self) -> bool:
        return self.cancelling() or self.left() <= 0 or len(self.trials) >= self.budget.variants or bool(self.device.lost)

    def run(self, bench: Bench, candidates: list[Variant]) -> None:
        """Build ``candidates`` together, then verify and time each (best predicted first) until the budget ends."""
        room = self.budget.variants - len(self.trials)
        predicted = {v: self.model(self.kernel, self.device, v) for v in candidates if v not in self.trials
                     and self.device.variant_error(self.kernel, v) is None}  # variants it cannot run are not tried
        candidates = sorted(predicted, key=lambda v: (predicted[v], v.tag))[: max(room, 0)]
        # before anything is timed the best predicted variant is built alone and timed first: a joint build of all
        # candidates (seconds on PoCL or a GPU driver) could use up the kernel's share before its first launch
        alone = 0 if self.ranked() else 1
        total = self.budget.variants if self.device.tunable else 1  # numpy and BLAS time one variant
        for i, v in enumerate(candidates):
            if i == alone and len(candidates) - alone > 1 and not self.stop():
                with contextlib.suppress(Exception):  # each variant's own compile() below records the failure
                    self.device.compile_many([(self.kernel, w) for w in candidates[alone:]])
            if self.stop():
                return
            guess = self.model(self.kernel, self.device, v)  # refitted by the trials before it
            if self.hopeless(guess):
                continue
            self._report(len(self.trials), total, None, v)
            trial = self.measure(bench, v, guess)
            if trial is None:  # cancelled while it was being built: never launched
                return
            self.trials[v] = trial
            if trial.status == OK and self.observe is not None:
                self.observe(self.kernel, self.device, v, trial.seconds)  # type: ignore[arg-type]
            self._report(len(self.trials), total, trial, v)

    def hopeless(self, predicted: float) -> bool:
        """Whether a variant predicted to take ``predicted`` seconds is not worth a run: once one is timed, it is
        predicted HOPELESS times slower than the best timed one, or (the model rescaled to that one's measured
        time) to take longer than what is left of the budget."""
        ranked = self.ranked()
        if not ranked:
            return False
        best = ranked[0]
        ratio = predicted / max(self.model(self.kernel, self.device, best.variant), 1e-12)  # one model, as refitted
        return ratio > HOPELESS or ratio * best.seconds > self.left()  # type: ignore[operator]

    def _report(self, done: int, total: int, trial: Trial | None, v: Variant) -> None:
        if self.progress is not None:
            self.progress(Progress(self.kernel.key, self.device.name, done, total, trial, v,
                                   self.clock() - self.start, self.limit))

    def measure(self, bench: Bench, v: Variant, predicted: float) -> Trial | None:
        """Build, verify and time ``v``; None when cancelled before its first launch."""
        try:
            compiled = self.device.compile(self.kernel, v)
        except Exception as e:  # a build error (with its log) or a variant the device refuses
            return Trial(v, FAILED, None, predicted, _first_lines(str(e)))
        if self.cancelling():
            return None
        outs: list[Any] = []
        try:
            wrong, outs, first = bench.verify(compiled)
            if wrong is not None:
                return Trial(v, WRONG, None, predicted, wrong)
            timing = bench.time(compiled, outs, first, self.left, self.cancelling)
            touch = None
            if always_fresh(self.kernel, self.device) and not any(t.touch is not None for t in self.trials.values()):
                touch = bench.first_touch(compiled, outs, timing.median, TOUCH_PAIRS, self.left, self.cancelling)
        except Exception as e:  # a launch error (out of resources, ...)
            return Trial(v, FAILED, None, predicted, _first_lines(f"launch: {e}"))
        finally:
            bench.free(outs)
        return Trial(v, OK, timing.median, predicted, times=timing.times, touch=touch)

    def ranked(self) -> list[Trial]:
        ok = [t for t in self.trials.values() if t.status == OK]
        return sorted(ok, key=lambda t: t.seconds if t.seconds is not None else float("inf"))


def _first_lines(text: str, n: int = 6) -> str:
    return "\n".join(text.strip().splitlines()[:n])


def tune(
    kernel: Kernel,
    device: Device,
    budget: Budget | int = Budget(),
    cache: TuneCache | None = None,
    progress: ProgressFn | None = None,
    cancel: CancelFn | None = None,
    *,
    limit: float | None = None,
    model: Model = predict,
    observe: Observe | None = None,
    clock: Clock = time.perf_counter,
    resume: TuneResult | None = None,
    store: bool = True,
) -> TuneResult:
    """Search variants of ``kernel`` on ``device``, best predicted (``model``) first, for at most ``limit``
    seconds (default ``budget.seconds``); ``budget`` may be a variant count; ``observe`` hears every measured
    time.  Raises ValueError when the device cannot run the kernel.  A cache hit returns the stored result; a
    cancelled search is not cached, nor one not to ``store`` (a first look); ``resume`` continues one (its
    trials and seconds count in the budget)."""
    if isinstance(budget, int):
        budget = Budget(variants=budget)
    if not device.supports(kernel):
        raise ValueError(f"{device.name} cannot run {kernel.name}")
    state = "off"
    if cache is not None:
        entry = cache.get(kernel, device)
        state = "corrupt" if cache.status.get(device.name, "").startswith("corrupt") else "miss"
        if entry is not None:
            try:
                return _checked(TuneResult.from_json(kernel.key, device.name, entry, "hit"), kernel, device)
            except (KeyError, TypeError, ValueError, OverflowError) as e:  # tune again and overwrite it
                state = "corrupt"
                warnings.warn(CacheWarning(f"tuning cache {cache.path(device)}: the entry of {kernel.name} is corrupt "
                                           f"({str(e)[:200]}); tuning it again"), stacklevel=2)
    search = _Search(kernel, device, budget, progress, cancel, budget.seconds if limit is None else limit, model,
                     observe, clock)
    if resume is not None:
        search.trials.update((t.variant, t) for t in resume.trials)
        search.start -= resume.elapsed
    try:
        bench = Bench(device, kernel)
    except Exception as e:  # the inputs cannot even be uploaded (the device is lost, out of memory)
        search.trials[DEFAULT_VARIANT] = Trial(DEFAULT_VARIANT, FAILED, None, model(kernel, device, DEFAULT_VARIANT),
                                               _first_lines(f"upload: {e}"))
        return _result(kernel, device, search, state)
    try:
        if not device.tunable:
            search.run(bench, [DEFAULT_VARIANT])
        else:
            search.run(bench, [*device.seeds(kernel), *seeds(kernel, device.is_gpu)])
            best = search.ranked()[:1]
            while not search.stop():
                beam = search.ranked()[: budget.beam]
                fresh = {n for t in beam for n in neighbours(kernel, t.variant) if n not in search.trials}
                if not fresh:
                    break
                order = sorted(fresh, key=lambda v: (model(kernel, device, v), v.tag))
                search.run(bench, order[: budget.per_round])
                top = search.ranked()[:1]
                if top == best:  # no round-over-round improvement: the beam has converged
                    break
                best = top
    finally:
        bench.close()
    result = _result(kernel, device, search, state)
    if cache is not None and store and not result.cancelled and result.trials and not device.lost:
        cache.put(kernel, device, result.to_json())
    return result


def _checked(result: TuneResult, kernel: Kernel, device: Device) -> TuneResult:
    """``result`` read from the cache if it could have come from a search here; else ValueError (corrupt)."""
    for t in result.trials:
        if t.status not in (OK, WRONG, FAILED):
            raise ValueError(f"a trial's status is {t.status!r}")
        if t.seconds is not None and (not isinstance(t.seconds, int | float) or not 0 <= t.seconds < math.inf):
            raise ValueError(f"a trial took {t.seconds!r} seconds")
        if t.touch is not None and not 0 <= t.touch < math.inf:
            raise ValueError(f"a trial's first touch took {t.touch} seconds")
    if result.ok and not 0 <= result.seconds < math.inf:
        raise ValueError(f"the best variant took {result.seconds} seconds")
    why = device.variant_error(kernel, result.best)
    if why is not None:
        raise ValueError(f"its best variant {result.best} cannot run: {why}")
    return result


def _result(kernel: Kernel, device: Device, search: _Search, state: str) -> TuneResult:
    ranked = search.ranked()
    elapsed = search.clock() - search.start
    trials = tuple(search.trials.values())
    if ranked:
        best = ranked[0]
        assert best.seconds is not None
        return TuneResult(kernel.key, device.name, trials, best.variant, best.seconds, elapsed, state, search.cancelled)
    return TuneResult(kernel.key, device.name, trials, DEFAULT_VARIANT, math.inf, elapsed, state, search.cancelled, False)


class Tuner:
    """Tunes kernels on devices once per process (and once per machine, through the disk cache), within the
    budget per kernel and ``budget.total`` seconds from its creation (calibrating the devices included);
    predictions come from the calibrated cost model (``calibrations``), which every measurement refits.

    ``kernel_time`` is what an extractor asks for: the best verified variant's median seconds.
    """

    def __init__(
        self,
        cache_dir: Path | str | None = None,
        budget: Budget | int = Budget(),
        use_cache: bool = True,
        progress: ProgressFn | None = None,
        cancel: CancelFn | None = None,
        calibrations: Calibrations | None = None,
        clock: Clock = time.perf_counter,
    ) -> None:
        self.cache = TuneCache(cache_dir) if use_cache else None
        self.budget = Budget(variants=budget) if isinstance(budget, int) else budget
        self.progress = progress
        self.cancel = cancel
        self.calibrations = calibrations or Calibrations(cache_dir, persist=use_cache)
        self.clock = clock
        self.started = clock()
        self.results: dict[tuple[str, str], TuneResult] = {}
        self.first_looks: dict[tuple[str, str], TuneResult] = {}
        """Searches stopped after their first variant (``tune(first=True)``), to be resumed."""

    @property
    def spent(self) -> float:
        """Seconds since this tuner was made: searches, and the calibration and predictions between them."""
        return self.clock() - self.started

    @property
    def left(self) -> float:
        """Seconds left of the total budget."""
        return self.budget.total - self.spent

    def predict(self, kernel: Kernel, device: Device, variant: Variant = DEFAULT_VARIANT) -> float:
        return self.calibrations.predict(kernel, device, variant)

    def tune(self, kernel: Kernel, device: Device, share: float = math.inf, first: bool = False) -> TuneResult:
        """The kernel's result, searched for at most its budget, what is left of the total, and ``share``;
        ``first``: only its best predicted variant (a first look, resumed by a later call), unless cached."""
        k = (kernel.key, device.name)
        if k in self.results or (first and k in self.first_looks):
            return self.results.get(k) or self.first_looks[k]
        first = first and device.tunable  # the others time their one variant anyway
        budget = replace(self.budget, variants=1) if first else self.budget
        result = tune(kernel, device, budget, self.cache, self.progress, self.cancel,
                      limit=min(self.budget.seconds, max(self.left, 0.0), share), model=self.predict,
                      observe=self.calibrations.observe, clock=self.clock, resume=self.first_looks.get(k),
                      store=not first)
        if result.cache != "hit":
            self.calibrations.save(device)
        if result.cancelled:
            return result  # not remembered: a later call searches again
        if first and result.cache != "hit":
            self.first_looks[k] = result
        else:
            self.results[k] = result
        return result

    def searched(self, kernel: Kernel, device: Device) -> bool:
        """Whether ``kernel``'s search on ``device`` is done (not only a first look)."""
        return (kernel.key, device.name) in self.results

    def kernel_time(self, kernel: Kernel, device: Device) -> float:
        return self.tune(kernel, device).seconds

    def variant(self, kernel: Kernel, device: Device) -> Variant:
        """The variant to launch ``kernel`` with on ``device`` (the default until tuned)."""
        result = self.results.get((kernel.key, device.name))
        return result.best if result is not None else DEFAULT_VARIANT

"""The autotuner's public API (implemented in ``engine.tuning``).

    tuner = Tuner(cache_dir=None)               # platformdirs user cache dir unless given
    seconds = tuner.kernel_time(kernel, device)  # tunes on first use (verified, timed, cached)
    result = tune(kernel, device, budget=Budget(variants=16), progress=print, cancel=lambda: False)
    result.best, result.seconds, result.trials   # every variant tried: ok / wrong / failed, with reasons
    predict(kernel, device, variant)             # the cost model, for untimed variants and --no-tune
"""

from __future__ import annotations

from engine.tuning import *  # noqa: F403 (this module is the tuning package's public face)
from engine.tuning import __all__  # noqa: F401

"""Autotuning: variant search per (kernel, device), verification, timing, a cost model, a disk cache."""

from __future__ import annotations

from engine.tuning.cache import TuneCache
from engine.tuning.model import predict, suggest
from engine.tuning.search import (
    FAILED,
    OK,
    WRONG,
    Budget,
    CancelFn,
    Progress,
    ProgressFn,
    Trial,
    Tuner,
    TuneResult,
    tune,
)

__all__ = [
    "FAILED",
    "OK",
    "WRONG",
    "Budget",
    "CancelFn",
    "Progress",
    "ProgressFn",
    "Trial",
    "TuneCache",
    "TuneResult",
    "Tuner",
    "predict",
    "suggest",
    "tune",
]

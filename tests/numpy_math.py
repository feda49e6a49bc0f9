"""Plain numpy versions of the composite ops, shared by the tests that check the engine against numpy."""

from __future__ import annotations

import numpy as np


def np_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - x.max(axis, keepdims=True))
    return e / e.sum(axis, keepdims=True)


def np_sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def np_gelu(x: np.ndarray) -> np.ndarray:
    """The tanh approximation of GELU."""
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))

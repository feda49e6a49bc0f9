"""Bundled sample programs as graph.json files (written by ``python -m sample_graphs.build``)."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

DEFAULT = "attention"


def path(name: str) -> Path:
    """The file of sample ``name`` (e.g. ``mlp`` or ``mlp.small``)."""
    return Path(str(files(__name__) / f"{name}.json"))


def names() -> list[str]:
    """Every bundled sample, large and small variants."""
    return sorted(p.name.removesuffix(".json") for p in Path(str(files(__name__))).glob("*.json"))

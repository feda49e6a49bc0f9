"""A table row as data (no Textual here): what ``model`` builds and the explorer's tables draw."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass


@dataclass(frozen=True)
class Row:
    key: Hashable
    cells: tuple[str, ...]
    style: str = ""
    sort: tuple = ()
    """Sort values, one per column (defaults to the cells)."""
    search: str = ""
    """What ``/`` filters on (defaults to the cells)."""

"""Where the explorer writes exports and screenshots: one folder per program, and never over an existing file
(two samples exported in one directory, or one stage exported twice, keep every file)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path


def program_dir(base: Path, name: str) -> Path:
    """``base/zyx-explore-<name>``: the folder of one program's exports (``name`` made safe for a file name)."""
    return base / f"zyx-explore-{re.sub(r'[^A-Za-z0-9._-]+', '_', name).strip('._') or 'program'}"


def free_stem(folder: Path, stem: str, suffixes: Sequence[str]) -> str:
    """``stem``, or ``stem-2``, ``stem-3``...: the first for which no ``<stem><suffix>`` exists in ``folder``."""
    n, candidate = 1, stem
    while any((folder / f"{candidate}{s}").exists() for s in suffixes):
        n += 1
        candidate = f"{stem}-{n}"
    return candidate

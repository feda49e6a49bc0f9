"""The tuning cache: one JSON file per device under the user cache dir, written atomically.

An entry is keyed by ``kernel.key | device name | driver version`` and holds the
whole tuning result (every trial).  A file that cannot be read as a cache is
reported (``CacheWarning`` and ``status``) and rebuilt on the next write.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from engine.devices.base import Device
from engine.fileio import write_atomic
from engine.kernel.ir import Kernel

FORMAT = 1


class CacheWarning(UserWarning):
    """A tuning cache file was corrupt (it is rebuilt)."""


def default_dir() -> Path:
    """``$ZYX_EXPLORE_CACHE/autotune`` when that is set, else the user cache dir's."""
    import platformdirs

    root = os.environ.get("ZYX_EXPLORE_CACHE") or platformdirs.user_cache_dir("zyx-explore")
    return Path(root) / "autotune"


def driver(device: Device) -> str:
    """What besides the device's name keys its entries: the OpenCL driver version, else numpy's version."""
    return str(getattr(device, "driver_version", f"numpy {np.__version__}"))


def key(kernel: Kernel, device: Device) -> str:
    return f"{kernel.key}|{device.name}|{driver(device)}"


class TuneCache:
    """Entries by device; each device's file is read once and rewritten (merged) after every ``put``."""

    def __init__(self, directory: Path | str | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_dir()
        self.entries: dict[str, dict[str, Any]] = {}
        """Loaded entries by device name."""
        self.status: dict[str, str] = {}
        """Per device: ``ok``, ``missing`` or ``corrupt: <why>`` (as last read)."""

    def path(self, device: Device) -> Path:
        slug = re.sub(r"[^A-Za-z0-9._-]+", "_", device.name).strip("_") or "device"
        return self.directory / f"{slug}.json"

    def _read(self, device: Device) -> dict[str, Any]:
        path = self.path(device)
        try:
            text = path.read_text()
        except FileNotFoundError:
            self.status[device.name] = "missing"
            return {}
        try:
            data = json.loads(text)
            if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("entries"), dict):
                raise ValueError("not a tuning cache of format 1")
            entries = data["entries"]
            if not all(isinstance(e, dict) for e in entries.values()):
                raise ValueError("an entry is not an object")
        except ValueError as e:  # json.JSONDecodeError is a ValueError
            self.status[device.name] = f"corrupt: {e}"
            warnings.warn(CacheWarning(f"tuning cache {path} is corrupt ({e}); rebuilding it"), stacklevel=3)
            return {}
        self.status[device.name] = "ok"
        return entries

    def _entries(self, device: Device) -> dict[str, Any]:
        if device.name not in self.entries:
            self.entries[device.name] = self._read(device)
        return self.entries[device.name]

    def get(self, kernel: Kernel, device: Device) -> dict[str, Any] | None:
        return self._entries(device).get(key(kernel, device))

    def put(self, kernel: Kernel, device: Device, entry: dict[str, Any]) -> None:
        """Store ``entry`` and rewrite the device's file (merged with what another process wrote meanwhile)."""
        mine = self._entries(device)
        mine[key(kernel, device)] = entry
        if self.status.get(device.name) == "ok":
            on_disk = self._read(device)
            mine.update({k: v for k, v in on_disk.items() if k not in mine})
        self.write(device)

    def write(self, device: Device) -> None:
        """Atomically replace the device's file by its loaded entries."""
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.path(device)
        data = {"format": FORMAT, "device": device.name, "driver": driver(device), "entries": self._entries(device)}
        write_atomic(path, json.dumps(data, indent=1, sort_keys=True))
        self.status[device.name] = "ok"

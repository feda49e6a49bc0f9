"""The tuning cache: one JSON file per device under the user cache dir, written atomically.

An entry is keyed by ``kernel.key | device name | driver version`` and holds the
whole tuning result (every trial).  A file that cannot be read as a cache is
reported (``CacheWarning`` and ``status``) and rebuilt on the next write; an entry
that is not an object is dropped alone.  Writers (threads or processes) take a lock
file beside the cache, re-read it and merge before replacing it, so none loses
another's entries.  A cache that cannot be written (a read-only folder, a full disk)
is reported the same way and the entries stay in memory.
"""

from __future__ import annotations

import contextlib
import json
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from engine.devices.base import Device
from engine.fileio import CacheWarning, UnsafeFileError, cache_root, read_bounded, set_aside, write_atomic
from engine.kernel.ir import Kernel

FORMAT = 1
MAX_FILE_BYTES = 64 << 20
"""A device's cache file beyond this is corrupt (thousands of kernels take a few MiB)."""


def default_dir() -> Path:
    """``autotune/`` in the cache root (``$ZYX_EXPLORE_CACHE`` when that is set, else the user cache dir)."""
    return cache_root() / "autotune"


def driver(device: Device) -> str:
    """What besides the device's name keys its entries (``Device.driver_version``)."""
    return str(device.driver_version)


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
            raw = read_bounded(path, MAX_FILE_BYTES)
        except (FileNotFoundError, NotADirectoryError):
            self.status[device.name] = "missing"
            return {}
        except UnsafeFileError as e:  # a FIFO, a device, a huge file: never read, set aside for the rebuild
            set_aside(path)
            return self._warn(device, "corrupt", f"is corrupt ({e}); rebuilding it")
        except OSError as e:  # unreadable (permissions): tune without it
            return self._warn(device, "corrupt", f"cannot be read ({e.strerror})")
        try:
            data = json.loads(raw.decode("utf-8"))
            if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("entries"), dict):
                raise ValueError("not a tuning cache of format 1")
        except (ValueError, RecursionError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            return self._warn(device, "corrupt", f"is corrupt ({e}); rebuilding it")
        entries = {k: v for k, v in data["entries"].items() if isinstance(v, dict)}
        bad = len(data["entries"]) - len(entries)
        if bad:
            return self._warn(device, "corrupt", f"has {bad} malformed entr{'y' if bad == 1 else 'ies'} (dropped)",
                              entries)
        self.status[device.name] = "ok"
        return entries

    def _warn(self, device: Device, state: str, why: str, entries: dict[str, Any] | None = None) -> dict[str, Any]:
        self.status[device.name] = f"{state}: {why}"
        warnings.warn(CacheWarning(f"tuning cache {self.path(device)} {why}"), stacklevel=4)
        return entries or {}

    def _entries(self, device: Device) -> dict[str, Any]:
        if device.name not in self.entries:
            self.entries[device.name] = self._read(device)
        return self.entries[device.name]

    def get(self, kernel: Kernel, device: Device) -> dict[str, Any] | None:
        return self._entries(device).get(key(kernel, device))

    def put(self, kernel: Kernel, device: Device, entry: dict[str, Any]) -> None:
        """Store ``entry`` and rewrite the device's file, merged (under the lock) with what others wrote meanwhile.

        A file that cannot be written is reported (``CacheWarning``, ``status`` ``unwritable: ...``), never raised.
        """
        mine = self._entries(device)
        mine[key(kernel, device)] = entry
        try:
            with self._lock(device):
                with warnings.catch_warnings():  # the corruption, if any, was reported when first read
                    warnings.simplefilter("ignore", CacheWarning)
                    on_disk = self._read(device)
                mine.update({k: v for k, v in on_disk.items() if k not in mine})
                self.write(device)
        except OSError as e:
            self._warn(device, "unwritable", f"cannot be written ({e.strerror or e}); results stay in memory")

    @contextlib.contextmanager
    def _lock(self, device: Device) -> Iterator[None]:
        """An exclusive lock on the device's file (``flock`` on a lock file beside it) for a read-merge-write."""
        import fcntl

        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.path(device)
        with open(path.with_name(f".{path.name}.lock"), "a") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f, fcntl.LOCK_UN)

    def write(self, device: Device) -> None:
        """Atomically replace the device's file by its loaded entries (raises OSError if it cannot)."""
        path = self.path(device)
        data = {"format": FORMAT, "device": device.name, "driver": driver(device), "entries": self._entries(device)}
        write_atomic(path, json.dumps(data, indent=1, sort_keys=True))
        self.status[device.name] = "ok"

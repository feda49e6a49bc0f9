"""The cache folder, atomic file writes (a reader sees the old file or the whole new one, never half of one)
and bounded reads of cache files (a FIFO, a device, a huge file or a link to /dev/zero is refused, never read)."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
import time
from pathlib import Path

STALE_SECONDS = 600.0
"""A temporary file of ours older than this was left by a killed writer (a write takes well under a second)."""


def write_atomic(path: Path, data: str | bytes) -> Path:
    """Write ``data`` (text as UTF-8) to ``path`` through a temporary file in the same folder and a rename.

    The file keeps the old file's permissions, or gets ``rw-r--r--`` (a temporary file's own are owner-only).
    Only a regular file is replaced (OSError for a device or a folder: a rename would swap the node itself);
    temporary files that killed writers left beside ``path`` are removed.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        st = path.stat()
    except FileNotFoundError:
        mode = 0o644
    else:
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EEXIST, "exists and is not a regular file", str(path))
        mode = st.st_mode & 0o777
    raw = data.encode("utf-8") if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _remove_stale(path)
    return path


def _remove_stale(path: Path) -> None:
    """Remove ``.<name>.*.tmp`` files beside ``path`` older than STALE_SECONDS (a writer killed by kill -9), and
    corrupt entries set aside (``set_aside``) as long ago."""
    now = time.time()
    for old in [*path.parent.glob(f".{path.name}.*.tmp"), *path.parent.glob(f".{path.name}.*.corrupt")]:
        with contextlib.suppress(OSError):  # another process removed it, or it is a folder set aside
            if now - old.lstat().st_mtime > STALE_SECONDS:
                old.unlink()


class CacheWarning(UserWarning):
    """A cache file was corrupt (it is rebuilt) or could not be written (its entries stay in memory)."""


def cache_root() -> Path:
    """``$ZYX_EXPLORE_CACHE`` when that is set, else the user cache dir: every cache lives in a folder of it
    (tuning results, calibrations and links in ``autotune/``, native objects in ``native/``, ONNX weights)."""
    import platformdirs

    return Path(os.environ.get("ZYX_EXPLORE_CACHE") or platformdirs.user_cache_dir("zyx-explore"))


class UnsafeFileError(OSError):
    """A cache file that is not a regular file, or bigger than its limit: treated as corrupt, never read."""


def set_aside(path: Path) -> None:
    """Rename a corrupt cache entry (whatever it is: a FIFO, a link, a folder) to ``.<name>.<time>.corrupt`` so a
    fresh one can take its place; the link's target or the folder's content is never touched.  Never raises."""
    with contextlib.suppress(OSError):  # gone already, or not ours: the rebuild then reports that it cannot write
        os.rename(path, path.with_name(f".{path.name}.{time.time_ns()}.corrupt"))


def read_bounded(path: Path, limit: int) -> bytes:
    """The bytes of the regular file ``path`` of at most ``limit`` bytes.

    Raises FileNotFoundError when it is missing, UnsafeFileError for a FIFO, a device (a link to /dev/zero), a folder
    or a file over ``limit``, OSError when it cannot be read.  Opened non-blocking, so a FIFO never blocks.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeFileError(f"{path} is not a regular file")
        if st.st_size > limit:
            raise UnsafeFileError(f"{path} has {st.st_size:,} bytes, more than the {limit:,} expected at most")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:  # grew while being read
        raise UnsafeFileError(f"{path} has more than the {limit:,} bytes expected at most")
    return data

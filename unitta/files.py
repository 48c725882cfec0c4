"""Writing a file so that a reader never sees half of it: temp file beside it, fsync, rename (atomic on POSIX).

Used by every writer of shared files: result cells and their consolidation (``unitta.results``), the decoded
ImageNet-C cache's manifest (``unitta.data.prepared``).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["write_atomically", "sync_dir"]


def _umask_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def write_atomically(path: Path, write, tmp_dir: Path | None = None) -> None:
    """``write(handle)`` into a temp file, fsync, give it the umask's mode, rename over ``path``.

    tmp_dir: where the temp file lives (default: beside ``path``); on the same file system as ``path``. A
    result folder keeps them out of ``cells/``, so that a reader of that folder never meets one.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp_dir = path.parent if tmp_dir is None else tmp_dir
    tmp_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".tmp", dir=tmp_dir)
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, _umask_mode())  # mkstemp creates 0600; results are shared like any file the user writes
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def sync_dir(directory: Path) -> None:
    """fsync a directory: the renames into it are on disk before what follows (e.g. deleting the files they replace)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

"""Writing a file so that a reader never sees half of it: temp file beside it, fsync, rename (atomic on POSIX).

Used by every writer of shared files: result cells and their consolidation (``unitta.results``), the decoded
ImageNet-C cache's manifest (``unitta.data.prepared``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["naming", "os_error_text", "sync_dir", "write_atomically"]


def _umask_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


@contextlib.contextmanager
def naming(path: Path) -> Iterator[None]:
    """Give an OSError raised in the body that names no file (a write that found the disk full) ``path``, so that
    its one-line report (``os_error_text``) says where."""
    try:
        yield
    except OSError as err:
        if err.filename is None and err.errno is not None:
            raise type(err)(err.errno, os.strerror(err.errno), str(path)) from err
        raise


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
        with naming(path), os.fdopen(fd, "wb") as handle:
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


def os_error_text(err: OSError) -> str:
    """'<path>: No space left on device (ENOSPC)': an operating-system error as one line naming the path and
    what the errno means (docs/results.md, "Exit codes"), for a user, not a traceback."""
    code = err.errno
    meaning = os.strerror(code) if code else (err.strerror or str(err))
    name = f" ({errno.errorcode[code]})" if code in errno.errorcode else ""
    paths = [str(p) for p in (err.filename, err.filename2) if p is not None]
    where = " -> ".join(paths) + ": " if paths else ""
    return f"{where}{meaning}{name}"

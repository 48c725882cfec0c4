"""Whether a folder can hold results: a check before anything is written (a run's ``--output``, a report's
output folder), one line naming the path and the fix (docs/results.md, "Exit codes")."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["OutputError", "check_output_dir", "is_writable", "not_writable"]


class OutputError(ValueError):
    """An output path that cannot hold results (a file, under a file, not writable); the message is one line."""


def _first_existing(path: Path) -> Path:
    """``path`` or its closest ancestor that exists."""
    for candidate in (path, *path.parents):
        if candidate.exists() or candidate.is_symlink():
            return candidate
    return Path(".")


def check_output_dir(out: Path, flag: str = "--output") -> None:
    """Raise ``OutputError`` (one line) when ``out`` cannot be a result directory: it is a file, or one of its
    parents is. Nothing is created; call it before anything is written. ``flag``: the option to name."""
    out = Path(out)
    existing = _first_existing(out)
    if existing.is_symlink() and not existing.exists():
        raise OutputError(f"output {out}: {existing} is a symbolic link to {os.readlink(existing)}, which does not "
                          f"exist; create that folder or give another directory with {flag}")
    if existing == out and not out.is_dir():
        raise OutputError(f"output {out} is a file, not a directory; give a directory with {flag}")
    if not existing.is_dir():
        raise OutputError(f"output {out} lies under {existing}, which is a file; give a directory with {flag}")


def is_writable(out: Path) -> bool:
    """Whether files can be created in ``out`` (or, when it does not exist yet, in its closest existing parent).

    Tried, not inferred from the mode bits: a read-only mount refuses root too, and root ignores the bits.
    """
    try:
        with tempfile.TemporaryFile(dir=_first_existing(Path(out))):
            return True
    except OSError:
        return False


def not_writable(out: Path, left: int, total: int) -> OutputError:
    """The one line for a result directory this process cannot write while ``left`` of ``total`` cells must run
    (a run, and ``--dry-run`` before it)."""
    return OutputError(f"output {out} is not writable and {left} of {total} cells still have to run; make it "
                       "writable or give another directory with --output")

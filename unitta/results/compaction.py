"""Compaction: a writer folds finished cell files into a few big Parquet files, so that reading a folder of
100,000 cells reads a handful of files instead of 100,000 (docs/results.md, "Layout at scale").

Only the directory's writer compacts, holding its lock (``unitta.run.outdir.OutputLock``), between two cell
writes. Each step leaves the folder readable with every row exactly once (``unitta.results.cell_files``): the
rows are copied into a new part (written atomically, its directory synced) before their cell files are
deleted; at the end of a run ``unitta.results.consolidate`` writes every row into ``results.parquet`` before it
deletes the parts, oldest first, and then (in a folder of ``COMPACT_AT`` rows or more) the cell files, so the
copies left after a crash are never older than what ``results.parquet`` holds of them.
"""

from __future__ import annotations

import re
from pathlib import Path

from unitta.files import sync_dir, write_atomically
from unitta.results.cell_files import cell_files, compacted_dir, part_files, read_cell_files, temp_dir

__all__ = ["COMPACT_AT", "Compactor", "compact", "remove_parts"]

# Cell files left in cells/ before they are compacted: reading 1,000 small files costs about a second, and a
# part of 1,000 rows is written in a fraction of one. A sweep smaller than this keeps one file per cell.
COMPACT_AT = 1000

_PART = re.compile(r"^part-(\d+)\.parquet$")


def _next_part(out: Path) -> Path:
    numbers = [int(m.group(1)) for p in part_files(out) if (m := _PART.match(p.name))]
    return compacted_dir(out) / f"part-{max(numbers, default=0) + 1:06d}.parquet"


def compact(out_dir: str | Path, at_least: int = COMPACT_AT, warn=print) -> int:
    """Move the rows of ``out_dir``'s cell files into a new part when there are at least ``at_least`` of them;
    unreadable ones go to the quarantine. Returns the number of rows compacted (0: nothing done)."""
    out = Path(out_dir)
    files = cell_files(out)
    if not files or len(files) < at_least:
        return 0
    read, rows = read_cell_files(out, files, move_aside=True, warn=warn)
    if rows is None:
        return 0
    part = _next_part(out)
    write_atomically(part, lambda handle: rows.write_parquet(handle), tmp_dir=temp_dir(out))
    sync_dir(part.parent)  # the part is on disk before any of its cell files goes
    for path in read:
        path.unlink(missing_ok=True)
    return rows.height


def remove_parts(parts: list[Path], base: Path, then: list[Path] = ()) -> None:
    """Delete ``parts`` (their rows are in ``base`` now) oldest first, then the cell files ``then``, after syncing
    ``base``'s directory. In that order what is left at any moment holds no row older than ``base``'s copy:
    a part is only ever shadowed by a newer part or a cell file, and those go after it."""
    sync_dir(base.parent)
    for part in sorted(parts):
        part.unlink(missing_ok=True)
    for path in then:
        path.unlink(missing_ok=True)


class Compactor:
    """The executor's compaction schedule: after ``at`` cell writes, compact (counted, not listed each time)."""

    def __init__(self, out_dir: Path, at: int = COMPACT_AT, warn=print) -> None:
        self.out, self.at, self.warn = Path(out_dir), max(1, int(at)), warn
        self.pending = len(cell_files(self.out))

    def written(self, n: int = 1) -> int:
        """``n`` more cell files were written; compacts when due. Returns the rows compacted."""
        self.pending += n
        if self.pending < self.at:
            return 0
        done = compact(self.out, self.at, self.warn)
        self.pending = len(cell_files(self.out))
        return done

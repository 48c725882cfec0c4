"""Where a result directory keeps its rows, and how every row is read back fast and exactly once.

Rows live in three layers (docs/results.md, "Layout"), read in this order of precedence:

1. ``<out>/cells/<cell_id>.parquet``: one row per file, written atomically when a cell finishes;
2. ``<out>/compacted/part-<N>.parquet``: many rows per file, the cell files a writer compacted
   (``unitta.compaction``); a higher N is newer;
3. ``<out>/results.parquet``: every row as of the end of the last run (or a file copied in).

A cell's row is taken from the first layer that has it: a writer only ever copies a row into a lower layer
before it deletes it from a higher one, and a cell written again (a failed cell retried) is written to the
top layer, so the first copy found is the newest and a crash between two steps never shows a row twice or
loses one. Unreadable files are skipped with a warning, or moved to ``<out>/quarantine/`` by a writer.
Reading is multi-threaded (Arrow's reader for the big files, a thread pool for the cell files); a reader that
races a compaction (a part appears or goes, a cell file vanishes) reads again.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = [
    "CELLS_DIR",
    "COMPACTED_DIR",
    "QUARANTINE_DIR",
    "TEMP_DIR",
    "BASE_FILE",
    "Layers",
    "cells_dir",
    "compacted_dir",
    "quarantine_dir",
    "temp_dir",
    "cell_files",
    "part_files",
    "read_layers",
    "read_cell_files",
    "quarantine",
    "move_old_quarantine",
    "newest_first",
]

CELLS_DIR = "cells"
COMPACTED_DIR = "compacted"
QUARANTINE_DIR = "quarantine"  # outside cells/: a reader of cells/ (polars, a glob) sees only good files
TEMP_DIR = ".tmp"  # writers' temp files, renamed into place: never inside cells/ or compacted/
BASE_FILE = "results.parquet"
_OLD_QUARANTINE = ".corrupt"  # under cells/ before the quarantine moved out (older folders)
_THREADS = min(32, 4 * (os.cpu_count() or 1))  # reading a small file is mostly waiting on the disk
_RETRIES = 5


def cells_dir(out_dir: str | Path) -> Path:
    return Path(out_dir) / CELLS_DIR


def compacted_dir(out_dir: str | Path) -> Path:
    return Path(out_dir) / COMPACTED_DIR


def quarantine_dir(out_dir: str | Path) -> Path:
    return Path(out_dir) / QUARANTINE_DIR


def temp_dir(out_dir: str | Path) -> Path:
    return Path(out_dir) / TEMP_DIR


def _parquet_files(directory: Path) -> list[Path]:
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.glob("*.parquet") if not p.name.startswith("."))


def cell_files(out_dir: str | Path) -> list[Path]:
    return _parquet_files(cells_dir(out_dir))


def part_files(out_dir: str | Path) -> list[Path]:
    """The compacted parts, oldest first (their names sort by number: ``part-000001.parquet``)."""
    return [p for p in _parquet_files(compacted_dir(out_dir)) if p.name.startswith("part-")]


def quarantine(path: Path, out_dir: str | Path, reason: str, warn) -> Path:
    """Move an unreadable result file to ``<out>/quarantine/`` (a unique name there); one line on ``warn``."""
    target = quarantine_dir(out_dir) / path.name
    target.parent.mkdir(parents=True, exist_ok=True)
    n = 1
    while target.exists():
        target = target.with_name(f"{path.stem}.{n}{path.suffix}")
        n += 1
    os.replace(path, target)
    what = "cell file" if path.parent.name == CELLS_DIR else "result file"
    warn(f"warning: unreadable {what} {path} ({reason}) moved to {target}; its cell(s) will run again")
    return target


def move_old_quarantine(out_dir: str | Path) -> None:
    """Move what an older version quarantined under ``cells/.corrupt/`` to ``<out>/quarantine/`` (a writer's job)."""
    old = cells_dir(out_dir) / _OLD_QUARANTINE
    if not old.is_dir():
        return
    target = quarantine_dir(out_dir)
    target.mkdir(parents=True, exist_ok=True)
    for path in old.iterdir():
        if not (target / path.name).exists():
            os.replace(path, target / path.name)
    try:
        old.rmdir()
    except OSError:  # a name clash left a file behind: keep it where it is
        pass


def _reason(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


class _Vanished(Exception):
    """A file listed a moment ago is gone: a writer compacted or merged it (the reader reads again)."""


def _read_cell(path: Path, columns: list[str] | None) -> pa.Table:
    try:
        table = pq.read_table(path, columns=columns, use_threads=False)
    except FileNotFoundError:
        raise _Vanished(str(path)) from None
    if "cell_id" not in table.column_names or "status" not in table.column_names:
        raise ValueError("no cell_id/status columns (not a unitta cell file)")
    if table.num_rows != 1 or table.column("cell_id")[0].as_py() != path.stem:
        raise ValueError(f"expected one row for cell {path.stem}")
    return table


def _read_many(path: Path, columns: list[str] | None) -> pa.Table:
    try:
        if columns is not None:  # a base file copied from elsewhere may lack some of them
            names = set(pq.read_schema(path).names)
            columns = [c for c in columns if c in names]
        return pq.read_table(path, columns=columns)  # Arrow reads its column chunks on several threads
    except FileNotFoundError:
        raise _Vanished(str(path)) from None


@dataclass
class Layers:
    """What ``read_layers`` found: every row once (``table``), and the ids of unreadable cell files."""

    table: pa.Table
    unreadable: set[str] = field(default_factory=set)
    n_cell_files: int = 0
    parts: list[Path] = field(default_factory=list)  # the compacted parts read (oldest first)
    cells: list[Path] = field(default_factory=list)  # the cell files read


def _generation(out: Path) -> tuple:
    base = out / BASE_FILE
    try:
        st = base.stat()
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
    except FileNotFoundError:
        stamp = None
    return stamp, tuple(p.name for p in part_files(out))


def read_cell_files(
    out: Path, files: list[Path], columns: list[str] | None = None, move_aside: bool = False, warn=print,
    unreadable: set[str] | None = None, settle: bool = False,
) -> list[tuple[Path, pa.Table]]:
    """``(path, one-row table)`` of each readable cell file of ``files``, read on a thread pool. An unreadable
    one is skipped with a warning (quarantined if ``move_aside``) and its id added to ``unreadable``; a file
    gone since it was listed raises ``_Vanished`` if ``settle`` (the caller reads again), else is skipped."""
    with ThreadPoolExecutor(_THREADS) as pool:
        results = list(pool.map(lambda p: _try(_read_cell, p, columns), files))
    read = []
    for path, result in zip(files, results):
        if isinstance(result, _Vanished):
            if settle:
                raise result
        elif isinstance(result, Exception):
            if unreadable is not None:
                unreadable.add(path.stem)
            _unreadable(path, out, result, move_aside, warn)
        else:
            read.append((path, result))
    return read


def _read_once(out: Path, columns: list[str] | None, move_aside: bool, warn, settle: bool = True) -> Layers:
    parts = part_files(out)  # parts before cells: a compaction writes the part before it deletes the files
    files = cell_files(out)
    found = Layers(table=pa.table({}), n_cell_files=len(files), parts=parts)
    read = read_cell_files(out, files, columns, move_aside, warn, found.unreadable, settle)
    found.cells = [path for path, _ in read]
    tables = [table for _, table in read]
    for path in [*reversed(parts), out / BASE_FILE]:
        if not path.is_file():
            continue
        result = _try(_read_many, path, columns)
        if isinstance(result, _Vanished):
            if settle:
                raise result
        elif isinstance(result, Exception):
            _unreadable(path, out, result, move_aside, warn)
        else:
            tables.append(result)
    found.table = newest_first(tables)
    return found


def _try(read, path: Path, columns):
    try:
        return read(path, columns)
    except _Vanished as exc:
        return exc
    except (OSError, ValueError, pa.ArrowException) as exc:
        return exc


def _unreadable(path: Path, out: Path, exc: BaseException, move_aside: bool, warn) -> None:
    if move_aside:
        quarantine(path, out, _reason(exc), warn)
    else:
        what = "cell file" if path.parent.name == CELLS_DIR else "result file"
        warn(f"warning: skipping unreadable {what} {path} ({_reason(exc)})")


def newest_first(tables: list[pa.Table]) -> pa.Table:
    """One table of ``tables`` (in order of precedence) with each ``cell_id`` once: its first row. Rows
    without a ``cell_id`` column or value (written by another tool) are all kept."""
    tables = [t for t in tables if t.num_rows or t.num_columns]
    if not tables:
        return pa.table({})
    table = pa.concat_tables(tables, promote_options="permissive") if len(tables) > 1 else tables[0]
    if "cell_id" not in table.column_names:
        return table
    ids = table.column("cell_id").to_pylist()
    seen: set[str] = set()
    keep = []
    for cid in ids:
        keep.append(cid is None or cid not in seen)
        seen.add(cid)
    return table if all(keep) else table.filter(pa.array(keep))


def read_layers(out_dir: str | Path, columns: list[str] | None = None, move_aside: bool = False, warn=print) -> Layers:
    """Every row of ``out_dir`` once, newest copy first (see the module docstring).

    columns: only these (``cell_id`` and ``status`` must be among them); move_aside: quarantine unreadable
    files (only the directory's writer, holding its lock, passes it). A read that races a writer's compaction
    is done again, until two listings agree.
    """
    out = Path(out_dir)
    for _ in range(_RETRIES):
        before = _generation(out)
        try:
            found = _read_once(out, columns, move_aside, warn)
        except _Vanished:
            continue
        if _generation(out) == before:
            return found
    return _read_once(out, columns, move_aside, warn, settle=False)  # a writer that never pauses: take what is there

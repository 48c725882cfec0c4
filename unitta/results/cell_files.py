"""Where a result directory keeps its rows, and how every row is read back fast and exactly once.

Rows live in three layers (docs/results.md, "Layout at scale"), read in this order of precedence:

1. ``<out>/cells/<cell_id>.parquet``: one row per file, written atomically when a cell finishes;
2. ``<out>/compacted/part-<N>.parquet``: many rows per file, the cell files a writer compacted
   (``unitta.results.compaction``); a higher N is newer;
3. ``<out>/results.parquet``: every row as of the end of the last run (or a file copied in).

A cell's row is taken from the first layer that has it: a writer only ever copies a row into a lower layer
before it deletes it from a higher one, and a cell written again (a failed cell retried) is written to the
top layer, so the first copy found is the newest and a crash between two steps never shows a row twice or
loses one. Unreadable files are skipped with a warning, or moved to ``<out>/quarantine/`` by a writer.
Reading is multi-threaded (Polars' reader: all cell files in one read, each big file on several threads); a
reader that races a compaction (a part appears or goes, a cell file vanishes) reads again.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq

if TYPE_CHECKING:  # Polars is imported where rows are read: a Ray worker imports this module and never reads
    import polars as pl

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
    "move_to_quarantine",
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
_FILE = "__unitta_file__"  # the file-name column of a multi-file read


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


def move_to_quarantine(path: Path, out_dir: str | Path) -> Path:
    """Move ``path`` to ``<out>/quarantine/`` under a name not taken there (``name.1.ext``, ...); the new path."""
    target = quarantine_dir(out_dir) / path.name
    target.parent.mkdir(parents=True, exist_ok=True)
    n = 1
    while target.exists():
        target = target.with_name(f"{path.stem}.{n}{path.suffix}")
        n += 1
    os.replace(path, target)
    return target


def quarantine(path: Path, out_dir: str | Path, reason: str, warn) -> Path:
    """Move an unreadable result file to ``<out>/quarantine/`` (a unique name there); one line on ``warn``."""
    target = move_to_quarantine(path, out_dir)
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


def _check_cell(df: pl.DataFrame, path: Path) -> pl.DataFrame:
    if "cell_id" not in df.columns or "status" not in df.columns:
        raise ValueError("no cell_id/status columns (not a unitta cell file)")
    if df.height != 1 or df["cell_id"][0] != path.stem:
        raise ValueError(f"expected one row for cell {path.stem}")
    return df


def _read_cell(path: Path, columns: list[str] | None) -> pl.DataFrame:
    import polars as pl

    if not path.exists():
        raise _Vanished(str(path))
    return _check_cell(pl.read_parquet(path, columns=columns, glob=False, hive_partitioning=False), path)


def _read_many(path: Path, columns: list[str] | None) -> pl.DataFrame:
    import polars as pl

    if not path.exists():
        raise _Vanished(str(path))
    if columns is not None:  # a base file copied from elsewhere may lack some of them
        names = set(pq.read_schema(path).names)
        columns = [c for c in columns if c in names]
    return pl.read_parquet(path, columns=columns, glob=False, hive_partitioning=False)  # on several threads


def _read_cells_at_once(files: list[Path], columns: list[str] | None) -> pl.DataFrame | None:
    """Every file of ``files`` in one multi-threaded read (Polars'), checked to be one row each with the id of its
    file name; None when that fails (a file unreadable, foreign, of another schema, gone): read them one by one."""
    import polars as pl

    if not files:
        return None
    try:
        df = pl.read_parquet([str(p) for p in files], columns=None if columns is None else [*columns, _FILE],
                             glob=False, hive_partitioning=False, include_file_paths=_FILE)
    except Exception:  # noqa: BLE001 - any failure: the careful path below finds which file and why
        return None
    if df.height != len(files) or "cell_id" not in df.columns or "status" not in df.columns:
        return None
    stems = df[_FILE].str.extract(r"([^/\\]+)\.parquet$")
    if not (stems == df["cell_id"]).all() or stems.n_unique() != len(files):
        return None
    return df.drop(_FILE)


def read_cell_files(
    out: Path, files: list[Path], columns: list[str] | None = None, move_aside: bool = False, warn=print,
    unreadable: set[str] | None = None, settle: bool = False,
) -> tuple[list[Path], pl.DataFrame | None]:
    """(the files read, their rows) of the cell files ``files``: at once when all are good, else one by one on
    a thread pool. An unreadable file is skipped with a warning (quarantined if ``move_aside``) and its id added
    to ``unreadable``; a file gone since it was listed raises ``_Vanished`` if ``settle`` (the caller reads
    again), else is skipped."""
    import polars as pl

    at_once = _read_cells_at_once(files, columns)
    if at_once is not None:
        return list(files), at_once
    with ThreadPoolExecutor(_THREADS) as pool:
        results = list(pool.map(lambda p: _try(_read_cell, p, columns), files))
    read, frames = [], []
    for path, result in zip(files, results):
        if isinstance(result, _Vanished):
            if settle:
                raise result
        elif isinstance(result, Exception):
            if unreadable is not None:
                unreadable.add(path.stem)
            _unreadable(path, out, result, move_aside, warn)
        else:
            read.append(path)
            frames.append(result)
    return read, (pl.concat(frames, how="diagonal_relaxed") if frames else None)


@dataclass
class Layers:
    """What ``read_layers`` found: every row once (``rows``), the files read, the ids of unreadable cell files."""

    rows: pl.DataFrame
    unreadable: set[str] = field(default_factory=set)
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


def _read_once(out: Path, columns: list[str] | None, move_aside: bool, warn, settle: bool = True) -> Layers:
    import polars as pl

    parts = part_files(out)  # parts before cells: a compaction writes the part before it deletes the files
    found = Layers(rows=pl.DataFrame(), parts=parts)
    found.cells, cells = read_cell_files(out, cell_files(out), columns, move_aside, warn, found.unreadable, settle)
    frames = [cells] if cells is not None else []
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
            frames.append(result)
    found.rows = newest_first(frames)
    return found


def _try(read, path: Path, columns):
    import polars as pl

    try:
        return read(path, columns)
    except _Vanished as exc:
        return exc
    except FileNotFoundError:
        return _Vanished(str(path))
    except (OSError, ValueError, pa.ArrowException, pl.exceptions.PolarsError) as exc:
        return exc


def _unreadable(path: Path, out: Path, exc: BaseException, move_aside: bool, warn) -> None:
    if move_aside:
        quarantine(path, out, _reason(exc), warn)
    else:
        what = "cell file" if path.parent.name == CELLS_DIR else "result file"
        warn(f"warning: skipping unreadable {what} {path} ({_reason(exc)})")


def newest_first(frames: list[pl.DataFrame]) -> pl.DataFrame:
    """One frame of ``frames`` (in order of precedence) with each ``cell_id`` once: its first row. Rows
    without a ``cell_id`` column or value (written by another tool) are all kept."""
    import polars as pl

    frames = [f for f in frames if f.height or f.width]
    if not frames:
        return pl.DataFrame()
    df = pl.concat(frames, how="diagonal_relaxed") if len(frames) > 1 else frames[0]
    if "cell_id" not in df.columns or len(frames) == 1:
        return df
    return df.filter(pl.col("cell_id").is_null() | pl.col("cell_id").is_first_distinct())


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

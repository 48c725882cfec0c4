"""A sweep's output directory: where it is, its manifest, and how a finished cell is recorded.

Layout (docs/results.md): ``cells/<cell_id>.parquet`` (one row per finished cell), ``logs/<cell_id>.log``,
``results.parquet`` (consolidated), ``sweep.yaml`` and ``manifest.json`` (the config and the runs' provenance).
Whether a folder can hold results at all is ``unitta.results.output_checks``'s (the report reads it too).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from unitta.evaluate.provenance import git_commit, now, ray_version
from unitta.files import naming
from unitta.results import check_cell_id, write_cell_result
from unitta.results.cell_files import move_to_quarantine

__all__ = ["fresh_output_dir", "write_manifest", "set_aside_broken_manifest", "record",
           "OutputLock", "OutputBusy", "remove_stale_temp_files",
           "removed_if_unused"]


# what a run writes before its first result; a folder holding nothing else has no results to lose
_BOOKKEEPING = {".lock", ".lock.owner", "sweep.yaml", "manifest.json", "tune_config.json"}


@contextlib.contextmanager
def removed_if_unused(out: Path, errors: tuple[type[BaseException], ...]) -> Iterator[None]:
    """Run the body; if it raises one of ``errors`` (a usage problem: exit 2) and ``out`` did not exist before,
    remove what the run created there (its lock, manifest and membership files, empty folders), so that a run
    that stops with exit 2 leaves nothing behind. A folder with any other file in it is left as it is."""
    out = Path(out)
    created = [p for p in (out, *out.parents) if not (p.exists() or p.is_symlink())]
    try:
        yield
    except errors:
        if created:
            _remove_bookkeeping(out, created[-1])
        raise


def _remove_bookkeeping(out: Path, top: Path) -> None:
    if not out.is_dir():
        return
    files = [p for p in out.rglob("*") if not p.is_dir()]
    ours = [p for p in files if p.name in _BOOKKEEPING or p.parent == out / "sweeps"]
    if len(ours) != len(files):
        return
    for path in ours:
        path.unlink(missing_ok=True)
    folders = sorted((p for p in out.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True)
    for folder in [*folders, out, *[p for p in out.parents if top in (p, *p.parents)]]:
        with contextlib.suppress(OSError):  # not empty: someone else's
            folder.rmdir()


class OutputBusy(RuntimeError):
    """Another live sweep or tune run writes into the same output directory; the message is one line."""


class OutputLock:
    """An exclusive lock on an output directory for the whole run (``<out>/.lock``, with its owner beside it).

    A second sweep into the same directory fails at once with one line naming the other process,
    instead of both writing the same cells. The lock is the OS's (``filelock``): a killed driver
    leaves no stale lock behind.
    """

    def __init__(self, out_dir: Path) -> None:
        from filelock import FileLock

        self.out_dir = Path(out_dir)
        self.owner = self.out_dir / ".lock.owner"
        self._lock = FileLock(str(self.out_dir / ".lock"), timeout=0)

    def __enter__(self) -> OutputLock:
        from filelock import Timeout

        self.out_dir.mkdir(parents=True, exist_ok=True)
        try:
            self._lock.acquire()
        except Timeout:
            try:
                who = json.loads(self.owner.read_text())
                other = f"pid {who.get('pid')} on {who.get('host')}, started {who.get('started_at')}: {who.get('argv')}"
            except (OSError, ValueError):
                other = "another process"
            raise OutputBusy(
                f"{self.out_dir} is in use by another run ({other}); wait for it to finish, or use --output"
            ) from None
        self.owner.write_text(json.dumps(
            {"pid": os.getpid(), "host": socket.gethostname(), "started_at": now().isoformat(), "argv": sys.argv}
        ))
        return self

    def __exit__(self, *exc) -> None:
        self.owner.unlink(missing_ok=True)
        self._lock.release()


def remove_stale_temp_files(directory: Path) -> int:
    """Delete the ``.*.tmp`` files a killed writer left in ``directory``; call it only while holding its
    ``OutputLock`` (then no live writer of this directory exists). Returns how many were removed."""
    removed = 0
    for stale in Path(directory).glob(".*.tmp"):
        stale.unlink(missing_ok=True)
        removed += 1
    return removed


def fresh_output_dir(out_dir: Path) -> Path:
    """``out_dir`` if it is absent or empty, else a new sibling '<out_dir>-<UTC timestamp>' (never deletes)."""
    if not out_dir.exists() or not any(out_dir.iterdir()):
        return out_dir
    stamp = now().strftime("%Y%m%d-%H%M%S")
    candidate = out_dir.with_name(f"{out_dir.name}-{stamp}")
    n = 2
    while candidate.exists():
        candidate = out_dir.with_name(f"{out_dir.name}-{stamp}-{n}")
        n += 1
    return candidate


def _read_manifest(out_dir: Path, path: Path, warn: Callable[[str], None]) -> dict[str, Any]:
    """The manifest's runs so far; a file that does not parse or holds no list of runs is moved to
    ``<out>/quarantine/`` (as an unreadable cell file is: ``unitta.results.cell_files.quarantine``) with one line
    on ``warn``, and a new manifest starts (the results are in the cell files, not here)."""
    try:
        manifest = json.loads(path.read_text())
        if isinstance(manifest, dict) and isinstance(manifest.get("runs", []), list):
            return {**manifest, "runs": manifest.get("runs", [])}
        reason = "not a manifest: no list of runs"
    except (ValueError, UnicodeDecodeError) as exc:
        reason = f"not JSON: {exc}"
    target = move_to_quarantine(path, out_dir)
    warn(f"warning: unreadable {path} ({reason}) moved to {target}; a new manifest starts with this run")
    return {"runs": []}


def _stderr(line: str) -> None:
    print(line, file=sys.stderr)


def set_aside_broken_manifest(out_dir: Path, warn: Callable[[str], None] = _stderr) -> None:
    """At a resume, before anything runs: a broken ``manifest.json`` to ``<out>/quarantine/`` (``_read_manifest``)."""
    path = Path(out_dir) / "manifest.json"
    if path.is_file():
        _read_manifest(Path(out_dir), path, warn)


def write_manifest(out_dir: Path, cfg, n_cells: int, mode: str, argv: list[str] | None,
                   warn: Callable[[str], None] = _stderr) -> None:
    import yaml

    from unitta import __version__

    overrides = list(getattr(cfg, "overrides", ()))
    # the copy holds the values the run used; the command line's overrides (already in them) are named on top
    head = "".join(f"# override: {text}\n" for text in overrides)
    (out_dir / cfg.config_file_name).write_text(head + yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
    manifest_path = out_dir / "manifest.json"
    manifest = _read_manifest(out_dir, manifest_path, warn) if manifest_path.is_file() else {"runs": []}
    manifest.update(name=cfg.name, config_hash=cfg.config_hash(), n_cells=n_cells)
    manifest["runs"].append(
        {
            "started_at": now().isoformat(),
            "mode": mode,
            "git_commit": git_commit(),
            "unitta_version": __version__,
            "ray_version": ray_version(),
            "hostname": socket.gethostname(),
            "argv": argv,
            "overrides": overrides,
            "config_hash": cfg.config_hash(),
        }
    )
    tmp = manifest_path.with_name(".manifest.json.tmp")
    tmp.write_text(json.dumps(manifest, indent=2))
    os.replace(tmp, manifest_path)


def record(out_dir: Path, row: dict[str, Any], log: str) -> None:
    logs = out_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    log_path = logs / f"{check_cell_id(row['cell_id'])}.log"  # the cell file's check, for the log too
    with naming(log_path):
        log_path.write_text(log)
    write_cell_result(out_dir, row)  # last: a cell counts as done only once its row is on disk

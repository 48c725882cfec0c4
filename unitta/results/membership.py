"""Sweep membership: which cells make up each sweep's grid in an output directory, computed there or reused
(``<out>/sweeps/<name>.json``, docs/results.md); ``unitta.results.load_results(out, sweep=name)`` reads it."""

from __future__ import annotations

import json
from pathlib import Path

from unitta.files import write_atomically

__all__ = ["add_to_membership", "sweep_cell_ids", "sweep_names", "write_membership"]


# ---------------------------------------------------------------------- sweep membership
def _membership_path(out_dir: str | Path, name: str) -> Path:
    if not name or "/" in name or "\\" in name or name.startswith("."):
        raise ValueError(f"sweep name {name!r} is not a file-name-safe name")
    return Path(out_dir) / "sweeps" / f"{name}.json"


def write_membership(out_dir: str | Path, name: str, cell_ids: list[str]) -> Path:
    """Record that the cells ``cell_ids`` (computed here or reused) make up sweep ``name``'s grid.

    ``<out>/sweeps/<name>.json``, written atomically; a later run of the same name replaces it (its grid
    is that run's config's). ``load_results(out, sweep=name)`` reads it.
    """
    path = _membership_path(out_dir, name)
    text = json.dumps({"name": name, "cell_ids": list(cell_ids)}, indent=1).encode()
    write_atomically(path, lambda handle: handle.write(text))
    return path


def add_to_membership(out_dir: str | Path, name: str, cell_ids: list[str]) -> Path:
    """Add ``cell_ids`` to sweep ``name``'s recorded cells (a search whose cells come trial by trial: tune)."""
    try:
        known = sweep_cell_ids(out_dir, name)
    except ValueError:
        known = []
    return write_membership(out_dir, name, list(dict.fromkeys([*known, *cell_ids])))


def sweep_names(out_dir: str | Path) -> list[str]:
    """The names of the sweeps recorded in ``out_dir`` (``write_membership``), sorted."""
    directory = Path(out_dir) / "sweeps"
    return sorted(p.stem for p in directory.glob("*.json") if not p.name.startswith(".")) if directory.is_dir() else []


def sweep_cell_ids(out_dir: str | Path, name: str) -> list[str]:
    """The cell ids of sweep ``name``'s grid in ``out_dir``; ValueError (one line) naming the known sweeps."""
    path = _membership_path(out_dir, name)
    try:
        return list(json.loads(path.read_text())["cell_ids"])
    except FileNotFoundError:
        known = ", ".join(sweep_names(out_dir)) or "none"
        raise ValueError(f"no sweep named {name!r} was run in {out_dir} (sweeps there: {known})") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: unreadable sweep membership ({exc}); rerun the sweep to write it again") from None

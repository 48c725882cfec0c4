"""The cell ids ``--dry-run`` prints for every config in sweeps/, and the fixture that records them.

A cell's id hashes its identity (``unitta.cell``; docs/results.md, "Resume"): a field that joins it by mistake, or
a default that moves, changes the id of every result row already written. ``cell_ids.json`` records, per config,
how many cells its dry run lists and the SHA-256 of their ids in order; ``test_cell_ids.py`` recomputes them.

The ids are computed by the commands themselves (``unitta sweep|tune|select CONFIG --dry-run --no-preflight``, in
this process) on a fixed view of the disk, the same on every machine: no checkpoint file but the embedded
ResNet-20's (so a cifar / ImageNet cell's weights digest is None, as on a machine without them), and a
zoo model's layers read from its architecture (a BDN-layer search lists them without the weights).

Rewrite the fixture (only when ids are meant to change, e.g. a method's version is bumped)::

    PYTHONPATH=. python -m tests.cell.dry_run_ids
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import sys
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = Path(__file__).with_name("cell_ids.json")
# sweep: a grid (unitta sweep); tune: a search over factors / a layer (unitta tune); select: unitta select
COMMANDS = {"sweep": "unitta.sweep", "tune": "unitta.tune", "select": "unitta.select.run"}


def config_files() -> list[str]:
    """Every config in sweeps/ and sweeps/cluster/, relative to the repository root, sorted."""
    return sorted(str(p.relative_to(ROOT)) for p in [*ROOT.glob("sweeps/*.yaml"), *ROOT.glob("sweeps/cluster/*.yaml")])


def command_of(path: str) -> str:
    """Which command runs the config: 'select' and 'tune' configs have a ``space``, a select one ``protocols``."""
    import yaml

    data = yaml.safe_load((ROOT / path).read_text())
    if "space" not in data:
        return "sweep"
    return "select" if "protocols" in data else "tune"


def _digest_of_present_files(dataset, name, checkpoint, checkpoint_dir):
    """The weights digest on a machine that has only the embedded ResNet-20 (``zoo.REFERENCE_WEIGHTS``)."""
    from unitta.models.zoo import REFERENCE_WEIGHTS

    if checkpoint is None and dataset == "fmnist-c" and name in (None, "resnet20"):
        return REFERENCE_WEIGHTS[("fmnist-c", "resnet20")]
    return None


def _architecture(dataset="fmnist-c", name=None, checkpoint_dir=None, trust_checkpoints=False):
    from unitta.models.zoo import build_model

    return build_model(dataset, name)


@contextlib.contextmanager
def fixed_disk():
    """The same checkpoints on every machine (see the module docstring)."""
    with (
        mock.patch("unitta.models.any_model.any_weights_digest", _digest_of_present_files),
        mock.patch("unitta.models.load_model", _architecture),
    ):
        yield


def dry_run_ids(path: str, command: str, out_dir: Path) -> list[str]:
    """The cell ids the command's ``--dry-run`` lists for ``path``, in order."""
    import importlib

    main = importlib.import_module(COMMANDS[command]).main
    printed, errors = io.StringIO(), io.StringIO()
    with fixed_disk(), contextlib.redirect_stdout(printed), contextlib.redirect_stderr(errors):
        code = main([str(ROOT / path), "--dry-run", "--no-preflight", "--output", str(out_dir)])
    if code != 0:
        raise AssertionError(f"{path}: the {command} dry run exited {code}: {errors.getvalue().strip()}")
    return [line.split()[-1] for line in printed.getvalue().splitlines() if line.startswith(("  todo ", "  done "))]


def record(ids: list[str], command: str) -> dict:
    """One fixture entry: the command, the number of cells, the SHA-256 of their ids (one per line) and the first."""
    return {"command": command, "cells": len(ids), "sha256": hashlib.sha256("\n".join(ids).encode()).hexdigest(),
            "first": ids[0] if ids else None}


def main() -> None:
    import tempfile

    entries = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, path in enumerate(config_files()):
            command = command_of(path)
            entries[path] = record(dry_run_ids(path, command, Path(tmp) / str(i)), command)
            print(f"{path}: {entries[path]['cells']} cells", file=sys.stderr)
    FIXTURE.write_text(json.dumps(entries, indent=1) + "\n")


if __name__ == "__main__":
    main()

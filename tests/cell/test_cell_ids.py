"""Every config in sweeps/ lists the cells it listed when ``cell_ids.json`` was recorded, with the same ids, byte
for byte (``tests/cell/dry_run_ids.py`` says how they are computed and how to record them again)."""

from __future__ import annotations

import json

import pytest

from tests.cell.dry_run_ids import FIXTURE, config_files, dry_run_ids, record

RECORDED = json.loads(FIXTURE.read_text())


def test_every_recorded_config_is_there():
    # a config added later is not checked until the ids are recorded again (tests/cell/dry_run_ids.py)
    gone = sorted(set(RECORDED) - set(config_files()))
    assert not gone, f"{gone}: recorded but no longer in sweeps/; record the ids again"


@pytest.mark.parametrize("path", sorted(RECORDED))
def test_dry_run_ids_unchanged(path, tmp_path):
    was = RECORDED[path]
    ids = dry_run_ids(path, was["command"], tmp_path / "out")
    now = record(ids, was["command"])
    assert now["cells"] == was["cells"], f"{path}: {now['cells']} cells, {was['cells']} recorded"
    assert now == was, f"{path}: the cell ids changed (first now {now['first']}, recorded {was['first']})"

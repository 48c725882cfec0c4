"""A run whose cells failed says so in its exit status (1, docs/results.md "Exit codes"), with one line per kind of
failure and where the logs are; also when the checkpoint changed mid-run, which changes the cells' ids."""

from __future__ import annotations

import yaml

from tests.sweep.conftest import SMALL
from tests.sweep.test_weights import _retrain, own_checkpoint  # noqa: F401 (a fixture)
from unitta.run import executor
from unitta.sweep import main


def test_cells_failing_after_a_checkpoint_swap_exit_1(tmp_path, own_checkpoint, monkeypatch, capsys):  # noqa: F811
    config = tmp_path / "sweep.yaml"
    config.write_text(yaml.safe_dump({"name": "swap", "datasets": ["fmnist-c"], "methods": ["test", "bn"],
                                      "settings": ["i111"], **SMALL, "resources": {"num_cpus": 1, "num_gpus": 0}}))
    manifest = executor.write_manifest

    def swap_then_write(*args, **kwargs):  # the cells are planned; the weights change before any runs
        _retrain(own_checkpoint)
        return manifest(*args, **kwargs)

    monkeypatch.setattr(executor, "write_manifest", swap_then_write)
    out = tmp_path / "out"
    code = main([str(config), "--output", str(out), "--local", "--no-progress", "--no-preflight"])
    printed = capsys.readouterr().out
    assert code == 1
    assert "(no results)" not in printed
    failures = [line for line in printed.splitlines() if line.startswith("failed: ")]
    assert len(failures) == 1 and "2 cell(s)" in failures[0] and str(out / "logs") in failures[0]
    assert "not those the cell was planned with" in failures[0]

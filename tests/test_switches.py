"""The environment switches (``unitta.switches``; docs/benchmarks.md): a value none of them takes is one line naming
the variable, its values and the fix, exit code 2, before anything runs or is written (issue 52 item 4); never a
traceback at import, never a failure found only inside every cell."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from unitta.__main__ import main as unitta_main

ROOT = Path(__file__).resolve().parents[1]
QUICK = str(ROOT / "sweeps" / "quick.yaml")


def test_a_bogus_device_paths_value_is_one_line_not_an_import_traceback(tmp_path):
    env = {**os.environ, "UNITTA_DEVICE_PATHS": "bogus", "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "unitta", "sweep", QUICK, "--dry-run", "--output", str(tmp_path / "o")],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "UNITTA_DEVICE_PATHS='bogus'" in lines[0] and "auto" in lines[0], lines
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("name", ["UNITTA_CUDNN_BENCHMARK", "UNITTA_FAST_PATHS"])
@pytest.mark.parametrize("command", ["sweep", "select"])
def test_a_bogus_switch_stops_the_run_commands_before_the_first_cell(name, command, tmp_path, monkeypatch, capsys):
    from unitta.run.cli import run_command

    monkeypatch.setenv(name, "bogus")
    config = QUICK if command == "sweep" else str(ROOT / "sweeps" / "select_quick.yaml")
    assert unitta_main([command, config, "--dry-run", "--output", str(tmp_path / "o")]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and f"{name}='bogus'" in lines[0], lines
    assert not (tmp_path / "o").exists()
    # ``python -m unitta.sweep`` (no ``unitta`` front door): the run commands check too
    assert run_command(lambda: 0) == 2

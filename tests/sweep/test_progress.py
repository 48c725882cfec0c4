"""Off a terminal (``ray job submit`` logs, files, CI) the sweep's progress is whole lines, never ``\\r``."""

from __future__ import annotations

import unitta.run.progress as progress
from tests.sweep.conftest import small_config
from unitta.sweep import run_sweep


def test_progress_off_a_terminal_is_whole_lines(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(progress, "LINE_EVERY_S", 0.0)  # a line per cell, to see several
    outcome = run_sweep(small_config(methods=["test", "bn"], settings=["i111"]), tmp_path / "out", local=True)
    assert outcome.n_ok == 2
    err = capsys.readouterr().err
    assert "\r" not in err
    lines = [line for line in err.splitlines() if line.startswith("small: ")]
    assert lines[-1].startswith("small: 2/2 cells (done=2 failed=0 running=0)"), err
    finished = [line for line in lines if "running=0" in line or "/2 cells (done=1" in line]
    assert [line.split(" cells")[0] for line in finished][-2:] == ["small: 1/2", "small: 2/2"] and err.endswith("\n")


def test_progress_lines_are_rate_limited_but_the_last_always_comes(tmp_path, capsys):
    run_sweep(small_config(methods=["test", "bn"], settings=["i111"]), tmp_path / "out", local=True)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("small: ")]
    assert len(lines) == 1 and lines[0].startswith("small: 2/2 cells")

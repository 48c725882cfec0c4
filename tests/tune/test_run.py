"""A tune run gets the sweep's guarantees from the one executor (unitta.run): --local, --dry-run with the
checks before the first cell, the output lock, cells written by the sweep's writer, resume. No Ray."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import yaml

from unitta.results import load_results
from unitta.run.outdir import OutputLock
from unitta.tune import main

CELL = {
    "dataset": "fmnist-c",
    "setting": "nunu",
    "sampler": "exact",
    "length": 200,
    "n_per_domain": 20,
    "factors": {"domain_beta": 5.0},
    "batch_size": 50,
}
# domain (n,u), beta = 5 over 15 domains: Cor. 1 needs alpha_1 >= 0.8133, so 0.5 is infeasible
CONFIG = {"name": "tiny", "cell": CELL, "methods": ["test"], "space": {"domain_alpha": [0.5, 0.9]}}


def _write(tmp_path: Path, cfg: dict) -> str:
    path = tmp_path / "tune.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return str(path)


def test_dry_run_lists_each_trials_first_cell_and_writes_nothing(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    assert main([_write(tmp_path, CONFIG), "--output", str(out), "--dry-run"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("tiny (first cell of each trial): 2 cells, 0 already done")
    assert len(lines) == 3 and all(line.strip().startswith("todo") for line in lines[1:])
    assert {"domain_alpha=0.5" in lines[1], "domain_alpha=0.9" in lines[2]} == {True}
    assert not out.exists()


def test_dry_run_reports_missing_data_like_the_sweep(tmp_path: Path, capsys) -> None:
    cfg = {**CONFIG, "cell": {**CELL, "dataset": "cifar10-c", "data_dir": str(tmp_path / "nodata")}}
    assert main([_write(tmp_path, cfg), "--output", str(tmp_path / "out"), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "problem(s) found before running" in err and "CIFAR-10-C" in err and "unitta.data fetch cifar10-c" in err
    assert not (tmp_path / "out").exists()


def test_a_second_tune_into_the_same_folder_is_refused_in_one_line(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    with OutputLock(out):
        assert main([_write(tmp_path, CONFIG), "--output", str(out), "--local", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is in use by another run" in err[0]
    assert not (out / "cells").exists()


def test_local_tune_writes_cells_logs_and_manifest_and_resumes(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    args = [_write(tmp_path, CONFIG), "--output", str(out), "--local", "--no-progress"]
    assert main(args) == 0
    files = sorted((out / "cells").glob("*.parquet"))
    rows = load_results(out)
    assert len(files) == 2 and rows.height == 2 and sorted(rows["cell_id"]) == sorted(p.stem for p in files)
    assert {p.stem for p in (out / "logs").glob("*.log")} == {p.stem for p in files}
    assert (out / "tune.yaml").is_file() and (out / "manifest.json").is_file() and (out / "results.parquet").is_file()
    ok = rows.filter(pl.col("status") == "ok").row(0, named=True)
    assert ok["trial_id"] and ok["tune_objective_value"] == ok["error"] and ok["tune_feasible"]
    bad = rows.filter(pl.col("status") == "failed").row(0, named=True)
    assert bad["error_text"].startswith("infeasible: ") and bad["tune_feasible"] is False
    ok_file = out / "cells" / f"{ok['cell_id']}.parquet"
    mtime = ok_file.stat().st_mtime_ns
    capsys.readouterr()
    assert main(args) == 0  # resume: the done trial is not run again
    assert ok_file.stat().st_mtime_ns == mtime
    assert "resume: 1 of 2 cells already done" in capsys.readouterr().err

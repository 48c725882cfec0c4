"""The Parquet result files: schema, atomic per-cell writes, resume bookkeeping, consolidation."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import polars as pl
import pyarrow.parquet as pq
import pytest

from unitta.cell import Cell
from unitta.results import (
    SCHEMA,
    cells_dir,
    consolidate,
    done_cells,
    load_results,
    write_cell_result,
)


def _row(cell: Cell, status: str = "ok", error: float | None = 12.5, **extra) -> dict:
    row = {**cell.coordinates(), "status": status}
    if status == "ok":
        row.update(
            error=error,
            n_samples=8,
            n_correct=7,
            per_domain=[{"key": 0, "name": "fog_5", "n": 5, "error": 20.0}, {"key": 3, "name": "snow_5", "n": 3, "error": 0.0}],
            per_class=[{"key": 1, "name": "1", "n": 8, "error": 12.5}],
            started_at=datetime(2026, 1, 1, tzinfo=UTC),
        )
    else:
        row["error_text"] = "FloatingPointError: boom"
    row.update(extra)
    return row


def test_roundtrip_keeps_nested_columns_and_types(tmp_path):
    cell = Cell(method="bn", setting="nui1", seed=3, n_per_domain=200, S=5)
    path = write_cell_result(tmp_path, _row(cell, trial_id="t-01"))
    assert path == tmp_path / "cells" / f"{cell.cell_id()}.parquet"
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp file left behind
    schema = pq.read_schema(path)
    for f in SCHEMA:
        assert schema.field(f.name).type == f.type
    df = load_results(tmp_path)
    assert df.height == 1
    r = df.row(0, named=True)
    assert r["per_domain"] == [{"key": 0, "name": "fog_5", "n": 5, "error": 20.0}, {"key": 3, "name": "snow_5", "n": 3, "error": 0.0}]
    assert r["trial_id"] == "t-01" and r["seed"] == 3 and r["S"] == 5 and r["error"] == 12.5
    assert r["started_at"] == datetime(2026, 1, 1, tzinfo=UTC)


def test_failed_rows_have_coordinates_and_null_metrics(tmp_path):
    ok, bad = Cell(method="test", setting="i111"), Cell(method="bn", setting="i111")
    write_cell_result(tmp_path, _row(ok))
    write_cell_result(tmp_path, _row(bad, status="failed"))
    df = load_results(tmp_path).sort("method")
    assert df["status"].to_list() == ["failed", "ok"]
    failed = df.row(0, named=True)
    assert failed["error"] is None and failed["per_domain"] is None
    assert failed["error_text"].startswith("FloatingPointError") and failed["dataset"] == "fmnist-c"
    assert done_cells(tmp_path) == {ok.cell_id()}
    assert done_cells(tmp_path, include_failed=True) == {ok.cell_id(), bad.cell_id()}


def test_rewrite_replaces_the_cell_file(tmp_path):
    cell = Cell(method="bn")
    write_cell_result(tmp_path, _row(cell, status="failed"))
    write_cell_result(tmp_path, _row(cell, error=3.0))
    df = load_results(tmp_path)
    assert df.height == 1 and df["status"].to_list() == ["ok"] and df["error"].to_list() == [3.0]


def test_bad_rows_are_refused(tmp_path):
    with pytest.raises(ValueError, match="status"):
        write_cell_result(tmp_path, {"cell_id": "x", "status": "done"})
    with pytest.raises(ValueError, match="cell_id"):
        write_cell_result(tmp_path, {"status": "ok"})
    with pytest.raises(ValueError, match="file-name-safe"):
        write_cell_result(tmp_path, {"cell_id": "../x", "status": "ok"})
    assert not (tmp_path / "cells").exists() or not any((tmp_path / "cells").iterdir())


def test_consolidate_and_ignore_temp_files(tmp_path):
    cells = [Cell(method=m, setting=s) for m in ("test", "bn") for s in ("i111", "nuiu")]
    for i, cell in enumerate(cells):
        write_cell_result(tmp_path, _row(cell, error=float(i)))
    (tmp_path / "cells" / f".{cells[0].cell_id()}.abc.tmp").write_bytes(b"partial")  # a killed writer's leftover
    path = consolidate(tmp_path)
    df = pl.read_parquet(path)
    assert df.height == 4
    assert df.select("method", "setting").rows() == [("bn", "i111"), ("bn", "nuiu"), ("test", "i111"), ("test", "nuiu")]
    assert not any(math.isnan(e) for e in df["error"].to_list())


def test_empty_directory(tmp_path):
    assert load_results(tmp_path).height == 0
    assert done_cells(tmp_path / "absent") == set()


def test_polars_reads_a_sweep_folder_and_a_tune_folder_of_cell_files(tmp_path):
    """Every cell file of a folder has one schema: a plain Parquet reader reads the folder (typed nulls)."""
    from tests.sweep.conftest import small_config
    from unitta.run import RunOptions
    from unitta.sweep import run_sweep
    from unitta.tune import run_tune
    from unitta.tune.config import parse_tune_config

    sweep_out = tmp_path / "sweep"
    run_sweep(small_config(settings=("i111",), n_per_domain=20), sweep_out, local=True, progress=False)
    sweep = pl.read_parquet(cells_dir(sweep_out))
    assert sweep.height == load_results(sweep_out).height == 2
    # A tune grid searched one factor at a time: each trial sets one param_* column, the others are null,
    # and no trial searches a layer (param_layer null everywhere); one point is infeasible (a failed row).
    cell = {"dataset": "fmnist-c", "setting": "nunu", "sampler": "exact", "length": 120, "n_per_domain": 20,
            "factors": {"domain_beta": 5.0}, "batch_size": 60}
    cfg = parse_tune_config({"name": "t", "methods": ["test"], "cell": cell, "search": {"grid": "one_at_a_time"},
                             "space": {"domain_alpha": [0.5, 0.9], "class_beta": [2.0]}})
    run_tune(cfg, tmp_path / "tune", opts=RunOptions(local=True, progress=False))
    tune = pl.read_parquet(cells_dir(tmp_path / "tune"))
    assert tune.height == 3 and sorted(tune["status"]) == ["failed", "ok", "ok"]
    assert tune["param_domain_alpha"].dtype == pl.Float64 and tune["param_domain_alpha"].null_count() == 1
    assert tune["param_class_beta"].dtype == pl.Float64 and tune["param_layer"].dtype == pl.String
    assert tune["param_layer_index"].dtype == pl.Int64 and tune["tune_feasible"].dtype == pl.Boolean
    assert pq.read_schema(next(cells_dir(tmp_path / "tune").glob("*.parquet"))).field("param_layer").type == "string"


def test_a_cell_id_that_would_leave_the_folder_is_refused_for_the_log_too(tmp_path):
    from unitta.run.outdir import record

    with pytest.raises(ValueError, match="not a file-name-safe id"):
        record(tmp_path, {"cell_id": "../../evil", "status": "ok"}, "log text")
    assert not (tmp_path.parent / "evil.log").exists() and not any((tmp_path / "logs").iterdir())

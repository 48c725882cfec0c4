"""The Parquet result schema, atomic per-cell files, resume bookkeeping and consolidation.

The results package, the reading side of a run: the Parquet result schema, a row's status values and its files
(this module), which cells each sweep wrote into a shared output directory (``membership``), the checks of an
output folder (``output_checks``), the method x setting table of a run's rows (``summary``) and where a folder's
cells were logged by an experiment tracker (``tracking_record``).


Layout of a sweep's output directory (docs/results.md)::

    <out>/cells/<cell_id>.parquet     one row per finished cell, written atomically (temp file + rename)
    <out>/compacted/part-<N>.parquet  cell files compacted by the writer, 1,000 or more rows each
    <out>/results.parquet             every row consolidated (written at the end of a run)
    <out>/quarantine/                 unreadable result files moved aside by a writer
    <out>/logs/<cell_id>.log          what the cell printed, its timing, its traceback if it failed
    <out>/sweep.yaml, manifest.json   the validated config and the run's provenance
    <out>/sweeps/<name>.json          the cells of each sweep written here, computed or reused (membership)
    <out>/tracking.json               where the cells were logged by experiment trackers (tracking_record)

A row is ``unitta.evaluate.run_cell``'s row plus the sweep's bookkeeping columns (status, error text,
timing, host, Ray node, CUDA_VISIBLE_DEVICES, git commit). ``per_domain`` / ``per_class`` are nested
``list<struct<key, name, n, error>>`` columns. Failed cells carry their coordinates and null metrics.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from unitta.cell import cell_columns
from unitta.cell.choices import CRITERIA
from unitta.files import write_atomically
from unitta.results.cell_files import BASE_FILE, QUARANTINE_DIR, cells_dir, read_layers, temp_dir
from unitta.results.compaction import remove_parts
from unitta.results.membership import add_to_membership, sweep_cell_ids, sweep_names, write_membership

__all__ = [
    "QUARANTINE_DIR",
    "SCHEMA",
    "EXTRA_TYPES",
    "BREAKDOWN_TYPE",
    "STATUS_OK",
    "STATUS_FAILED",
    "STATUS_STOPPED",
    "METRIC_COLUMNS",
    "cells_dir",
    "cell_path",
    "check_cell_id",
    "write_cell_result",
    "load_results",
    "done_cells",
    "cell_statuses",
    "consolidate",
    "write_membership",
    "add_to_membership",
    "sweep_cell_ids",
    "sweep_names",
]

# A row's status (docs/results.md): a result, a failed cell, or a cell stopped early by its progress-report hook
# (``unitta select``'s ASHA: not a result).
STATUS_OK = "ok"
STATUS_FAILED = "failed"
STATUS_STOPPED = "stopped"


# One entry of per_domain / per_class (evaluate._breakdown): error in percent over n images.
BREAKDOWN_TYPE = pa.list_(
    pa.struct([("key", pa.int64()), ("name", pa.string()), ("n", pa.int64()), ("error", pa.float64())])
)
_TS = pa.timestamp("us", tz="UTC")

# The Parquet type of each column type a cell field names (``cell_field(column=...)``, ``unitta.cell.fields``).
_ARROW_TYPES = {"string": pa.string(), "int64": pa.int64(), "float64": pa.float64(), "bool": pa.bool_()}

# The columns of a result row (docs/results.md): first the cell's (``Cell.coordinates``: its identity and
# fields, from the table of cell fields), then what the run adds.
SCHEMA = pa.schema(
    [
        *((name, _ARROW_TYPES[kind]) for name, kind in cell_columns()),
        ("sweep_name", pa.string()),
        ("class_setting", pa.string()),
        ("domain_setting", pa.string()),
        # outcome
        ("status", pa.string()),
        ("error_text", pa.string()),
        # metrics (null when status == 'failed')
        ("error", pa.float64()),
        ("severity5_error", pa.float64()),  # the gradual samplers' error at severity 5; null otherwise and in old files
        ("n_samples", pa.int64()),
        ("n_correct", pa.int64()),
        ("images_reused", pa.int64()),
        ("domains_discovered", pa.int64()),
        ("per_domain", BREAKDOWN_TYPE),
        ("balanced_error", pa.float64()),
        ("worst_class_error", pa.float64()),
        ("ece", pa.float64()),
        ("nll", pa.float64()),
        ("domain_errors", pa.list_(pa.float64())),
        ("error_curve", pa.list_(pa.float64())),
        ("realtime_cost", pa.string()),
        ("realtime_k", pa.float64()),
        ("adapted_fraction", pa.float64()),
        ("round_errors", pa.list_(pa.float64())),
        ("resets", pa.int64()),
        ("ccc_severities", pa.string()),
        ("source_error_before", pa.float64()),
        ("source_error_after", pa.float64()),
        ("source_probe_error", pa.float64()),
        ("warnings", pa.string()),
        ("per_class", BREAKDOWN_TYPE),
        ("method_extra", pa.string()),
        # cost
        ("wall_time_s", pa.float64()),
        ("adapt_time_s", pa.float64()),
        ("data_time_s", pa.float64()),
        ("images_per_s", pa.float64()),
        ("forwards_per_batch", pa.float64()),
        ("backwards_per_batch", pa.float64()),
        ("setup_forwards", pa.int64()),  # one-off set-up before the stream (TTAMethod.one_off); null in old files
        ("setup_backwards", pa.int64()),
        ("setup_time_s", pa.float64()),
        ("peak_memory_mb", pa.float64()),
        # where and when
        ("started_at", _TS),
        ("finished_at", _TS),
        ("duration_s", pa.float64()),
        ("hostname", pa.string()),
        ("node_id", pa.string()),
        ("worker_pid", pa.int64()),
        ("cuda_visible_devices", pa.string()),
        ("device", pa.string()),
        ("num_threads", pa.int64()),
        # versions
        ("git_commit", pa.string()),
        ("unitta_version", pa.string()),
        ("torch_version", pa.string()),
        ("ray_version", pa.string()),
        ("python_version", pa.string()),
    ]
)

# Columns other writers add to SCHEMA's, with their types: Tune's trial columns (unitta/tune/trials.py TRIAL_COLUMNS).
# A null there is written with this type, so that every cell file of a folder has the same schema and any
# Parquet reader reads the folder (``polars.read_parquet("<out>/cells")``); an unknown extra column that is
# null is written as a string column.
EXTRA_TYPES = {
    "trial_id": pa.string(),
    "tune_name": pa.string(),
    "tune_objective": pa.string(),
    "tune_objective_value": pa.float64(),
    "tune_feasible": pa.bool_(),
    **{f"param_{k}": pa.float64() for k in ("domain_alpha", "domain_beta", "class_alpha", "class_beta")},
    "param_layer": pa.string(),
    "param_layer_index": pa.int64(),
    "tune_default_layer": pa.string(),
    "tune_algorithm": pa.string(),
    # unitta select (docs/selection.md): the cell's domains, label-free criteria, progress reports, early stop
    **{f"criterion_{name}": pa.float64() for name in CRITERIA},
    "report_values": pa.string(),
    "stopped_at_batch": pa.int64(),
}

# The columns whose values must not depend on where or when a cell ran (same config + seed on CPU).
METRIC_COLUMNS = (
    "error",
    "severity5_error",
    "n_samples",
    "n_correct",
    "images_reused",
    "domains_discovered",
    "per_domain",
    "per_class",
    "balanced_error",
    "worst_class_error",
    "ece",
    "nll",
    "domain_errors",
    "error_curve",
    "round_errors",
    "resets",
    "source_error_before",
    "source_error_after",
    "source_probe_error",
    "S",
    "domain_alpha",
    "domain_beta",
    "class_alpha",
    "class_beta",
)


def check_cell_id(cell_id: str) -> str:
    """``cell_id`` if it can name a file inside the output directory, else a ValueError."""
    if not cell_id or "/" in cell_id or "\\" in cell_id or cell_id.startswith("."):
        raise ValueError(f"cell_id={cell_id!r} is not a file-name-safe id")
    return cell_id


def cell_path(out_dir: str | Path, cell_id: str) -> Path:
    return cells_dir(out_dir) / f"{check_cell_id(cell_id)}.parquet"


def _to_table(row: dict[str, Any]) -> pa.Table:
    """One row -> a one-row table with SCHEMA's columns (missing ones null) plus any extra keys."""
    if "cell_id" not in row or not row["cell_id"]:
        raise ValueError("row has no 'cell_id'")
    if row.get("status") not in (STATUS_OK, STATUS_FAILED, STATUS_STOPPED):
        raise ValueError(
            f"row status={row.get('status')!r}: expected {STATUS_OK!r}, {STATUS_FAILED!r} or {STATUS_STOPPED!r}"
        )
    arrays, fields = [], []
    for f in SCHEMA:
        arrays.append(pa.array([row.get(f.name)], type=f.type))
        fields.append(f)
    for key in sorted(set(row) - set(SCHEMA.names)):  # e.g. Tune's trial_id: kept, type inferred
        value = row[key]
        if isinstance(value, (dict, list)) and not (isinstance(value, list) and value and isinstance(value[0], dict)):
            value = json.dumps(value, sort_keys=True, default=str)
        array = _extra_array(key, value)
        arrays.append(array)
        fields.append(pa.field(key, array.type))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))


def _extra_array(key: str, value: Any) -> pa.Array:
    """A one-value array for a column outside SCHEMA: EXTRA_TYPES' type, else inferred (a null: string)."""
    if key in EXTRA_TYPES:
        return pa.array([value], type=EXTRA_TYPES[key])
    return pa.array([value], type=pa.string() if value is None else None)


def write_cell_result(out_dir: str | Path, row: dict[str, Any]) -> Path:
    """Write ``row`` as ``<out>/cells/<cell_id>.parquet`` atomically (temp file, fsync, rename).

    A reader never sees a half-written file: it sees the old file, the new one, or none. Rewriting a
    cell replaces its file, so a cell has at most one file.
    """
    table = _to_table(row)
    path = cell_path(out_dir, row["cell_id"])
    write_atomically(path, lambda handle: pq.write_table(table, handle), tmp_dir=temp_dir(out_dir))
    return path




def _stderr(text: str) -> None:
    print(text, file=sys.stderr)


def cell_statuses(out_dir: str | Path, quarantine: bool = False, warn=_stderr) -> dict[str, str]:
    """cell_id -> status of every row in ``out_dir`` (see ``load_results`` for ``quarantine``).

    A cell whose file is unreadable is left out (it runs again), even if an older layer still has its row.
    """
    layers = read_layers(out_dir, ["cell_id", "status"], move_aside=quarantine, warn=warn)
    rows = layers.rows
    if not {"cell_id", "status"} <= set(rows.columns):
        return {}
    statuses = zip(rows["cell_id"].to_list(), rows["status"].to_list())
    return {cid: status for cid, status in statuses if cid is not None and cid not in layers.unreadable}


def done_cells(out_dir: str | Path, include_failed: bool = False, quarantine: bool = False) -> set[str]:
    """Ids of the cells that have a result row: status 'ok' only, or any status if ``include_failed``.

    A sweep skips these on resume (with ``quarantine=True``: an unreadable file is moved aside to
    ``<out>/quarantine/`` and its cells run again); failed cells are run again unless ``include_failed``.
    """
    statuses = cell_statuses(out_dir, quarantine=quarantine)
    return {cid for cid, status in statuses.items() if include_failed or status == STATUS_OK}


def load_results(out_dir: str | Path, quarantine: bool = False, warn=_stderr, sweep: str | None = None):
    """Every result row of a sweep directory as a ``polars.DataFrame``, each cell once: its cell file, else
    its row in the newest compacted part, else in ``results.parquet`` (a directory may hold only a
    ``results.parquet``; ``unitta.results.cell_files`` says why this order never shows a stale row).

    sweep: only the rows of that sweep's grid (``<out>/sweeps/<name>.json``): the cells it computed and
    those it reused from earlier sweeps, whatever their ``sweep_name`` column says (the sweep that
    computed the row). An unknown name is a ValueError naming the sweeps recorded there.

    Rows are sorted by ``cell_id``. Columns follow SCHEMA (docs/results.md); extra columns written by a tool
    (e.g. Tune's trial_id) are kept, null where absent. Unreadable files are skipped with a warning (moved aside to
    ``<out>/quarantine/`` with ``quarantine=True``, which only a writer of the directory passes).
    """
    import polars as pl

    members = sweep_cell_ids(out_dir, sweep) if sweep is not None else None
    df = read_layers(out_dir, move_aside=quarantine, warn=warn).rows
    if not df.width:
        df = pl.from_arrow(SCHEMA.empty_table())
    df = _later_defaults(df)
    if "cell_id" in df.columns:  # the same order however the rows are laid out (cell files are read by name)
        df = df.sort("cell_id", nulls_last=True, maintain_order=True)
    return df if members is None else df.filter(pl.col("cell_id").is_in(members))


# Columns added after result folders existed, with the value every older row had: filled in when read, so that
# older files read like new ones (round_errors of a one-round row is its error; resets stays null: not recorded).
LATER_DEFAULTS: dict[str, Any] = {"rounds": 1, "reset": "none", "curve_points": 10}


def _later_defaults(df):
    import polars as pl

    for name in ("rounds", "round_errors", "reset", "resets", "curve_points", "ccc", "ccc_severities",
                 "severity5_error"):
        value = LATER_DEFAULTS.get(name)
        column = pl.lit(value, dtype=pl.from_arrow(pa.array([value], type=SCHEMA.field(name).type)).dtype)
        df = df.with_columns(pl.col(name).fill_null(column) if name in df.columns else column.alias(name))
    if "error" in df.columns:
        one_round = pl.when(pl.col("error").is_not_null() & (pl.col("rounds") == 1)).then(pl.concat_list("error"))
        df = df.with_columns(pl.col("round_errors").fill_null(one_round.otherwise(None)))
    return df


def consolidate(out_dir: str | Path, compact_at: int | None = None) -> Path:
    """Write every row of ``out_dir`` into ``<out>/results.parquet`` (atomically); returns its path.

    The rows are ``load_results``': the cell files, the compacted parts and the rows already in
    ``results.parquet``, so consolidating never loses a row. Then the parts are deleted (their rows are in
    ``results.parquet`` now), and with ``compact_at`` also the cell files when the folder holds at least that
    many rows (a large folder is then one file to read; a small one keeps a file per cell). Only the
    directory's writer calls it (``unitta.results.compaction`` says why a crash at any point loses nothing).
    """
    import polars as pl

    layers = read_layers(out_dir, warn=_stderr)
    df = layers.rows if layers.rows.width else pl.from_arrow(SCHEMA.empty_table())
    keys = [c for c in ("dataset", "model", "method", "method_kwargs", "setting", "factor_overrides",
                        "seed", "batch_size", "cell_id") if c in df.columns]
    if df.height:
        df = df.sort(keys, nulls_last=True)
    path = Path(out_dir) / BASE_FILE
    write_atomically(path, lambda handle: df.write_parquet(handle), tmp_dir=temp_dir(out_dir))
    drop = layers.cells if compact_at is not None and df.height >= compact_at else []
    if layers.parts or drop:
        remove_parts(layers.parts, path, then=drop)
    return path

"""Reading result directories for the analysis scripts: validation, sweep/tune split, panels.

A result directory is what ``python -m unitta.sweep`` or ``python -m unitta.tune`` wrote:
``<dir>/cells/*.parquet`` (one row per cell) or a consolidated ``<dir>/results.parquet``
(docs/results.md). Rows with a ``trial_id`` come from Tune; the others from a sweep.

A *panel* is a group of sweep rows that belong in one table: the same value of every coordinate of the cell
identity but the method (a row of the table), the setting (a column) and the seed (averaged over), so that a
mean or ± interval is only ever taken over seeds (``unitta.results.replicates``; docs/analysis.md).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from unitta.data.records import RECORDS
from unitta.files import os_error_text
from unitta.results.replicates import (
    METHOD_KEYS,
    apply_where,
    fixed_keys,
    method_label,
    normalise_rows,
    with_method_labels,
)
from unitta.streams.protocols import GRADUAL_SAMPLERS
from unitta.streams.settings import SETTING_CODES_36

__all__ = [
    "AnalysisError",
    "run_analysis",
    "check_dirs",
    "REQUIRED_COLUMNS",
    "SETTING_ORDER",
    "SETTING_CAPTION",
    "Panel",
    "load_dirs",
    "split_rows",
    "sweep_panels",
    "method_label",
    "method_order",
    "half_notation",
    "METRICS",
    "metric_label",
    "use_metric",
]

# What a table, heatmap, ranking or report can show (docs/results.md, "Metrics"): result column -> label.
# Lower is better for all of them.
METRICS = {
    "error": "Error (%)",
    "severity5_error": "Error at severity 5 (%)",  # the gradual samplers' only (docs/streams.md)
    "balanced_error": "Balanced error (%)",
    "worst_class_error": "Worst-class error (%)",
    "ece": "ECE (%)",
    "nll": "NLL (nats)",
    "source_error_after": "Clean source error after the stream (%)",
}


def metric_label(metric: str) -> str:
    """'Balanced error (%)' for 'balanced_error' (METRICS)."""
    return METRICS[metric]


def use_metric(df: pl.DataFrame, metric: str) -> pl.DataFrame:
    """The rows with ``metric`` in the ``error`` column, which every table and figure reads (the paper's error
    is kept as ``error_rate``). An unknown metric, or one these results lack (folders written before the
    metric columns existed hold nulls), is an AnalysisError."""
    if metric not in METRICS:
        raise AnalysisError(f"--metric {metric!r}: expected one of {', '.join(METRICS)}")
    if metric == "error":
        return df
    ok = df.filter(pl.col("status") == "ok")
    if metric not in df.columns or ok[metric].is_null().all():
        hint = {"source_error_after": " (run the cells with forgetting: true)",
                "severity5_error": " (only the gradual samplers' cells have it: sampler: gradual or "
                                   "gradual_correlated, docs/streams.md)"}.get(
            metric, " (result folders written before unitta's metric columns hold only error; rerun them)")
        raise AnalysisError(f"--metric {metric}: no result row has it{hint}")
    if metric == "severity5_error":  # the other samplers' streams have no severity steps: their panels are left out
        df = df.filter(pl.col("sampler").is_in(GRADUAL_SAMPLERS))
    return df.with_columns(pl.col("error").alias("error_rate"), pl.col(metric).alias("error"))

REQUIRED_COLUMNS = ("cell_id", "dataset", "method", "setting", "status", "error")

# The paper's 24-setting grid in its table order (class corr, class imb, domain corr, domain imb; the
# reference's sh/run.sh), then the 12 class-continual settings that the paper leaves out.
SETTING_ORDER: tuple[str, ...] = SETTING_CODES_36

SETTING_CAPTION = (
    "Setting code = class correlation, class imbalance, domain correlation, domain imbalance; "
    "correlation i = i.i.d., n = non-i.i.d., 1 = continual; imbalance 1 = balanced, u = imbalanced "
    "(e.g. nui1 = class (n,u), domain (i,1))."
)

# Baselines first in roughly the paper's order, UniTTA variants last; unknown names alphabetically between.
_METHOD_RANK = {
    name: i
    for i, name in enumerate(
        ["source", "test", "bn", "tent", "cotta", "note", "lame", "rotta", "robust_bn", "balanced_bn", "tribe",
         "roid", "roid_unmixtns", "unmixtns", "cofa_nofilter", "cofa", "bdn_nofilter", "bdn", "unitta"]
    )
}


class AnalysisError(Exception):
    """A problem with the input directories; the CLI prints it and exits with code 2."""


def run_analysis(body: Callable[[], int], *expected: type[Exception]) -> int:
    """An analysis script's ``body`` (its work and its printing) with the scripts' one exit-code rule: an
    ``AnalysisError``, one of ``expected`` or an operating-system error (disk full, read-only, a file in the way)
    is one line on stderr and exit 2, not a traceback."""
    try:
        return body()
    except (AnalysisError, *expected) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"error: {os_error_text(exc)}", file=sys.stderr)
        return 2


def add_sweep_argument(parser) -> None:
    """The analysis scripts' ``--sweep NAME`` and ``--where KEY=VALUE`` options (``load_dirs(sweep=, where=)``)."""
    parser.add_argument("--sweep", metavar="NAME",
                        help="only the cells of this sweep's grid (<RESULTS_DIR>/sweeps/NAME.json), those it reused "
                             "from earlier sweeps in the directory included; default: every row (docs/results.md)")
    parser.add_argument("--where", metavar="KEY=VALUE", action="append",
                        help="only the rows whose column KEY has this value, e.g. --where protocol=realtime "
                             "(repeatable; docs/analysis.md, Replicates); default: every row, one panel per value")


def check_dirs(dirs: list[str | Path]) -> None:
    """AnalysisError (one line, exit 2) for a RESULTS_DIR argument that is not a directory: said before anything
    about the output folder, which defaults to one inside it."""
    for d in dirs:
        if not Path(d).is_dir():
            what = "is a file, not a result directory" if Path(d).exists() else "no such directory"
            raise AnalysisError(f"{d}: {what}; give the folder a sweep or tune wrote")


def load_dirs(dirs: list[str | Path], sweep: str | None = None, where: list[str] | None = None) -> pl.DataFrame:
    """Every result row of the given directories, one DataFrame, with a ``source`` column (the directory).

    sweep: only the rows of that sweep's grid in each directory (``unitta.results.load_results(sweep=...)``);
    over several directories, those that did not run it are named on stderr and contribute nothing.
    where: ``KEY=VALUE`` terms, only the rows that match all (``unitta.results.replicates.apply_where``).
    Older rows' missing coordinates read as their defaults (``unitta.results.replicates.normalise_rows``).
    Raises AnalysisError for a missing, empty or foreign directory (no result rows, or rows without
    the result schema's columns), or a ``sweep`` no directory has rows of.
    """
    from unitta.results import load_results

    if not dirs:
        raise AnalysisError("give at least one result directory")
    frames, without_sweep = [], []
    for d in dirs:
        path = Path(d)
        if not path.is_dir():
            raise AnalysisError(f"{path}: no such directory")
        try:
            df = load_results(path, sweep=sweep)
        except ValueError as exc:
            if sweep is None:
                raise AnalysisError(f"{path}: cannot read its result files: {exc}") from None
            without_sweep.append(f"{path}: --sweep {sweep}: {exc}")  # fine if another directory ran it
            continue
        except Exception as exc:  # unreadable Parquet, a foreign file named *.parquet, ...
            raise AnalysisError(f"{path}: cannot read its result files: {exc}") from None
        if df.height == 0 and sweep is not None:
            without_sweep.append(f"{path}: sweep {sweep!r} has no result rows yet (its cells have not finished)")
            continue
        if df.height == 0:
            raise AnalysisError(
                f"{path}: no result rows (expected {path}/cells/*.parquet or {path}/results.parquet, "
                "as written by python -m unitta.sweep or python -m unitta.tune)"
            )
        missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
        if missing:
            raise AnalysisError(
                f"{path}: not a unitta result directory: its Parquet rows lack column(s) {', '.join(missing)}"
            )
        df, n_validation = _without_validation_trials(df, path)
        if n_validation:
            print(f"note: {path}: {n_validation} held-out validation trial row(s) of its selection left out: they "
                  "ran on the validation corruptions, not the test stream (docs/selection.md)", file=sys.stderr)
        frames.append(df.with_columns(pl.lit(str(path)).alias("source")))
    if not frames:  # --sweep: no directory has that sweep's rows
        raise AnalysisError("; ".join(without_sweep))
    for note in without_sweep:  # several directories: the sweep's rows are those of the ones that ran it
        print(f"note: {note}; the sweep's rows come from the other directories", file=sys.stderr)
    df = pl.concat(frames, how="diagonal_relaxed")
    # The same cell in two directories (a re-run): keep one row, an 'ok' one if there is one.
    df = df.sort(pl.col("status") != "ok").unique(subset="cell_id", keep="first", maintain_order=True)
    # trials an early stop ended (unitta select's ASHA, docs/selection.md) are not results, nor failures
    df = df.filter(pl.col("status") != "stopped")
    try:
        return apply_where(normalise_rows(df), where)
    except ValueError as exc:
        raise AnalysisError(str(exc)) from None


def _without_validation_trials(df: pl.DataFrame, path: Path) -> tuple[pl.DataFrame, int]:
    """``df`` less the rows of ``unitta select``'s held-out validation trials (a folder with a selection.parquet):
    the rows whose ``corruptions`` are the selection's validation corruptions. They are trials of hyper-parameter
    points on other domains than the test stream's, never results to put in a table (docs/selection.md)."""
    selection = path / "selection.parquet"
    if not selection.is_file() or "corruptions" not in df.columns:
        return df, 0
    lists = pl.read_parquet(selection, columns=["validation_corruptions"])["validation_corruptions"].drop_nulls()
    held_out = {tuple(names) for names in lists.to_list()}
    if not held_out:
        return df, 0
    is_validation = pl.col("corruptions").map_elements(
        lambda text: tuple(json.loads(text)) in held_out, return_dtype=pl.Boolean, skip_nulls=True).fill_null(False)
    kept = df.filter(~is_validation)
    return kept, df.height - kept.height


def split_rows(df: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(sweep rows, tune rows): tune rows carry a non-null ``trial_id``."""
    if "trial_id" not in df.columns:
        return df, df.clear()
    is_tune = pl.col("trial_id").is_not_null()
    return df.filter(~is_tune), df.filter(is_tune)


def method_order(labels) -> list[str]:
    """Labels in table order: baselines first, UniTTA variants last, then by name."""
    def key(label: str):
        base = label.split("{", 1)[0]
        return (_METHOD_RANK.get(base, len(_METHOD_RANK) // 2 + 0.5), base, label)

    return sorted(set(labels), key=key)


def half_notation(half: str) -> str:
    """'nu' -> '(n,u)'."""
    return f"({half[0]},{half[1]})"


# The coordinates a caption always names (the others only where they vary or differ from the default).
_CAPTION_KEYS = ("dataset", "model", "sampler", "delta", "batch_size", "S_cell", "length", "n_per_domain", "severity",
                 "factor_overrides")
# A dataset whose domains are folders, not corruptions (an image folder, a natural-shift set): its caption names
# its content (the folder's digest) and input size in place of a severity it does not have.
_FOLDER_CAPTION_KEYS = ("data_digest", "input_size")
# A panel's axes: its rows (method variants) and columns (settings); every other coordinate is fixed in it.
_PANEL_AXES = (*METHOD_KEYS, "setting")


@dataclass(frozen=True)
class Panel:
    """One table's worth of sweep rows. name: file-name-safe; caption: what is fixed in it."""

    name: str
    caption: str
    rows: pl.DataFrame


def sweep_panels(df: pl.DataFrame) -> list[Panel]:
    """Split sweep rows into panels: one per value of the coordinates that are fixed in a table (every replicate
    coordinate but the method and the setting; ``unitta.results.replicates``): means over seeds only."""
    if df.height == 0:
        return []
    df = normalise_rows(df)
    keys = fixed_keys(df, _PANEL_AXES)
    panels = []
    for dataset in sorted(df["dataset"].unique().to_list()):
        sub = df.filter(pl.col("dataset") == dataset)
        groups = sub.select(keys).unique(maintain_order=True).sort(keys, nulls_last=True).to_dicts()
        shown = [k for k in keys if k in _caption_keys(dataset, groups) or len({str(g[k]) for g in groups}) > 1]
        for i, key in enumerate(groups):
            cond = pl.lit(True)
            for k, v in key.items():
                cond = cond & (pl.col(k).is_null() if v is None else (pl.col(k) == v))
            rows = with_method_labels(sub.filter(cond))
            name = dataset if len(groups) == 1 else f"{dataset}_{i + 1}"
            fixed = ", ".join(f"{k}={_caption_value(k, key[k], key.get('sampler'))}" for k in shown
                              if k != "dataset" and key[k] not in (None, "{}"))
            seeds = sorted(rows["seed"].unique().to_list()) if "seed" in rows.columns else []
            caption = f"{dataset}: {fixed}; seeds {seeds} (mean)" if fixed else f"{dataset}; seeds {seeds} (mean)"
            panels.append(Panel(name.replace("/", "_"), caption, rows))
    return panels


def _caption_keys(dataset: str, groups: list[dict]) -> tuple[str, ...]:
    """The keys a caption of ``dataset`` always names: no severity for a dataset without corruptions, its digest
    and input size instead (where the rows have them)."""
    record = RECORDS.get(dataset)
    if record is None or record.has_corruptions:
        return _CAPTION_KEYS
    present = tuple(k for k in _FOLDER_CAPTION_KEYS if any(g.get(k) is not None for g in groups))
    return tuple(k for k in _CAPTION_KEYS if k != "severity") + present


def _caption_value(key: str, value, sampler: str | None = None) -> str:
    if key == "severity" and sampler in GRADUAL_SAMPLERS:
        return "1..5..1"  # a gradual stream plays every severity (its severity field stays at the default, 5)
    return str(value)[:12] if key in ("model_code", "model_weights", "data_digest") else str(value)

"""The inputs of a recommendation (``unitta.recommend``): the benchmark table, from result folders or the
paper's published table, with standard errors (docs/recommend.md), and the label files of a user's stream."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from unitta.paper.stream_lengths import PAPER_STREAM_LENGTHS
from unitta.results.replicates import (
    METHOD_KEYS,
    apply_where,
    fixed_keys,
    normalise_rows,
    varying,
    where_hint,
    with_method_labels,
)
from unitta.streams.settings import FACTOR_KEYS, default_factors

__all__ = ["RANK_METRICS", "SEEDS_BASIS", "STREAM_BASIS", "UsageError", "benchmark_table", "read_labels"]

SEEDS_BASIS, STREAM_BASIS = "seeds", "stream sampling only"



class UsageError(ValueError):
    """Bad input from the command line: reported as one line, exit status 2."""


def read_labels(path: str | Path, name: str = "labels") -> np.ndarray:
    """Integer labels from a .npy file, or a text/.csv file with one integer per line (a .csv may have a header)."""
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"{name} file {str(p)!r} does not exist")
    if p.suffix == ".npy":
        try:
            arr = np.load(p, allow_pickle=False)
        except (ValueError, OSError) as err:
            raise UsageError(f"{name} file {str(p)!r}: not a readable .npy array ({err})") from None
        if arr.ndim != 1 or arr.size == 0:
            raise UsageError(f"{name} file {str(p)!r}: expected a non-empty 1-d array, got shape {arr.shape}")
        if arr.dtype.kind in "iu":
            return arr.astype(np.int64)
        if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            if np.abs(arr).max() >= 2.0**63:
                raise UsageError(f"{name} file {str(p)!r}: label {np.abs(arr).max():g} is not a class index")
            return arr.astype(np.int64)
        raise UsageError(f"{name} file {str(p)!r}: expected integer labels, got dtype {arr.dtype}")
    try:
        lines = p.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as err:
        raise UsageError(f"{name} file {str(p)!r}: not a readable text file ({err})") from None
    rows = [(i + 1, line.strip()) for i, line in enumerate(lines) if line.strip()]
    if p.suffix == ".csv" and rows and not _is_int(rows[0][1]):
        rows = rows[1:]  # a header line
    if not rows:
        raise UsageError(f"{name} file {str(p)!r} holds no labels")
    out = np.empty(len(rows), dtype=np.int64)
    for j, (line_no, text) in enumerate(rows):
        if not _is_int(text):
            raise UsageError(f"{name} file {str(p)!r} line {line_no}: {text[:40]!r} is not an integer label")
        try:
            out[j] = int(text)
        except OverflowError:
            raise UsageError(f"{name} file {str(p)!r} line {line_no}: {text[:40]!r} is not a class index") from None
    return out


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def _binomial_se(error_pct: float, n: float | None) -> float:
    """Standard error (in points) of an error rate measured on n stream positions."""
    if n is None or not n or n <= 0 or not math.isfinite(error_pct):
        return float("nan")
    p = min(max(error_pct / 100.0, 0.0), 1.0)
    return 100.0 * math.sqrt(p * (1.0 - p) / n)


# The result columns a recommendation can rank by (docs/results.md, "Metrics"; lower is better). The binomial
# standard error of one run applies to the error rates; ECE and NLL get an interval only from seeds.
RANK_METRICS = ("error", "balanced_error", "worst_class_error", "ece", "nll")
RATE_METRICS = ("error", "balanced_error", "worst_class_error")


def benchmark_table(*, results: Sequence[str | Path] | None = None, paper: str | None = None,
                    dataset: str | None = None, metric: str = "error", sweep: str | None = None,
                    where: Sequence[str] | None = None) -> tuple[Any, str]:
    """Benchmark points as a polars DataFrame (method, setting, the 4 factors, error, se, n_runs, basis) and a label.

    results: sweep or Tune result directories (``unitta.results.load_results``), ok rows only; several seeds
    of one point give mean and standard error over seeds (basis 'seeds'), one run the binomial standard error
    sqrt(p (1 - p) / n_samples), which holds the stream's sampling noise only (basis 'stream sampling only').
    paper: a dataset of the paper's published table (``unitta.paper``), whose cells get the benchmark's default
    factors of their setting (one run per cell: 'stream sampling only'). metric: the result column ranked
    (RANK_METRICS; the paper publishes only ``error``). sweep: only that sweep's cells of each results directory
    (``load_results(sweep=...)``). where: ``KEY=VALUE`` terms selecting rows (``replicates.apply_where``);
    results whose rows differ in a coordinate other than the method, the setting and the factors (protocol,
    weights, ...) are refused with the ``--where`` that picks one, never averaged as seeds.
    """
    if metric not in RANK_METRICS:
        raise UsageError(f"--metric {metric!r}: expected one of {', '.join(RANK_METRICS)}")
    if paper is not None and metric != "error":
        raise UsageError(f"--metric {metric}: the paper publishes only error; use --results for other metrics")
    if paper is not None:
        if sweep is not None or where:
            raise UsageError("--sweep and --where select cells of --results directories, not of --paper")
        return _paper_points(paper)
    df, chosen = _result_rows(results, dataset, metric, sweep, where)
    source = ", ".join(map(str, results or [])) + f" ({chosen}{f', sweep {sweep}' if sweep else ''})"
    if metric != "error":
        source += f", ranked by {metric}"
    return _aggregate(df, metric), source


def _paper_points(paper: str) -> tuple[Any, str]:
    """The paper's published cells at their setting's default factors, binomial standard errors."""
    import polars as pl

    from unitta.paper import PAPER_DATASETS, load_paper_table

    name = paper if paper in PAPER_DATASETS else f"{paper}-c"
    if name not in PAPER_DATASETS:
        raise UsageError(f"--paper {paper!r}: the paper has tables for {', '.join(sorted(PAPER_DATASETS))}")
    df = load_paper_table(name)
    rows = []
    for r in df.iter_rows(named=True):
        f = default_factors(r["setting"], name)
        n = PAPER_STREAM_LENGTHS[name].get(r["setting"])
        rows.append({"method": r["method"], "setting": r["setting"], **f, "error": r["error"],
                     "se": _binomial_se(r["error"], n), "n_runs": 1, "basis": STREAM_BASIS})
    return pl.DataFrame(rows), f"the paper's table for {name}"


def _result_rows(results: Sequence[str | Path] | None, dataset: str | None, metric: str,
                 sweep: str | None = None, where: Sequence[str] | None = None) -> tuple[Any, str]:
    """The ok rows of ``results`` for one dataset, ``metric`` as the ``error`` column; (rows, the dataset)."""
    import polars as pl

    from unitta.results import STATUS_OK, load_results

    frames = []
    for d in results or []:
        if not Path(d).is_dir():
            raise UsageError(f"--results {str(d)!r} is not a directory")
        try:
            frames.append(load_results(d, sweep=sweep))
        except ValueError as exc:
            if sweep is None:
                raise
            raise UsageError(f"--results {str(d)!r}: --sweep {sweep}: {exc}") from None  # not recorded there
    df = pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()
    need = ("method", "setting", "error", "status", "dataset", *FACTOR_KEYS)
    if df.height == 0 or any(c not in df.columns for c in need):
        raise UsageError(f"--results {' '.join(map(str, results or []))}: no result rows found")
    if metric != "error":
        if metric not in df.columns or df[metric].is_null().all():
            raise UsageError(f"--metric {metric}: no result row has it (folders from before the metric columns)")
        df = df.with_columns(pl.col(metric).alias("error"))
    df = df.filter((pl.col("status") == STATUS_OK) & pl.col("error").is_not_null())
    datasets = sorted(df["dataset"].unique().drop_nulls().to_list())
    if dataset is not None:
        if dataset not in datasets:
            raise UsageError(f"--dataset {dataset!r}: the results hold {', '.join(datasets) or 'no successful rows'}")
        df = df.filter(pl.col("dataset") == dataset)
    elif len(datasets) > 1:
        raise UsageError(f"the results hold several datasets ({', '.join(datasets)}); choose one with --dataset")
    if df.height == 0:
        raise UsageError("the results hold no successful rows")
    return _one_experiment(df, where), datasets[0] if dataset is None else dataset


def _one_experiment(df, where: Sequence[str] | None):
    """The rows selected by ``where``, refused in one line if they still differ in a coordinate other than the
    method variant, the setting and the factors (those would be averaged as if they were seeds)."""
    try:
        df = apply_where(normalise_rows(df), where)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    spread = varying(df, fixed_keys(df, (*METHOD_KEYS, "setting", "factor_overrides", "dataset")))
    if spread:
        raise UsageError(f"the results differ in {where_hint(spread)}")
    labelled = with_method_labels(df)
    return labelled.with_columns(labelled["method_label"].alias("method"))


def _aggregate(df, metric: str):
    """Mean and standard error per (method, setting, factors): over seeds, or binomial for one run of a rate."""
    import polars as pl

    if "n_samples" not in df.columns:
        df = df.with_columns(pl.lit(None, dtype=pl.Int64).alias("n_samples"))
    keys = ["method", "setting", *FACTOR_KEYS]
    df = df.with_columns([pl.col(k).round(6) for k in FACTOR_KEYS])
    agg = df.group_by(keys).agg(
        pl.col("error").mean().alias("mean"), pl.col("error").std().alias("sd"), pl.len().alias("n_runs"),
        pl.col("n_samples").mean().alias("n_samples"),
    )
    rows = []
    for r in agg.iter_rows(named=True):
        if r["n_runs"] >= 2:
            se = r["sd"] / math.sqrt(r["n_runs"])
        elif metric in RATE_METRICS:
            se = _binomial_se(r["mean"], r["n_samples"])
        else:
            se = float("nan")
        rows.append({**{k: r[k] for k in keys}, "error": r["mean"], "se": se, "n_runs": r["n_runs"],
                     "basis": SEEDS_BASIS if r["n_runs"] >= 2 else STREAM_BASIS})
    return pl.DataFrame(rows)

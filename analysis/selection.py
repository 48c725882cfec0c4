"""What hyper-parameter selection without test labels changes: tables and a figure from ``selection.parquet``.

Example::

    unitta select sweeps/select_quick.yaml --local
    python analysis/selection.py results/select_quick          # -> results/select_quick/analysis/

Writes ``selection.md`` and ``selection.png`` (``--out``, default ``<dir>/analysis``):
- what each protocol chose: the chosen hyper-parameter values per method x setting (x seed);
- each method's test error under each protocol (mean over settings and seeds; the gap to the oracle);
- per protocol the ranking of the methods, Kendall's tau against the ranking under the methods' defaults, and
  the winner, each with its uncertainty: a bootstrap over the (setting, seed) units (resampled with
  replacement, ``N_BOOTSTRAP`` times, seeded): a 95 % percentile interval of tau and how often the winner wins.
docs/selection.md says how to read them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import polars as pl

from analysis.common import run_analysis

__all__ = ["N_BOOTSTRAP", "load_selection", "point_label", "chosen_table", "error_table", "rankings", "analyse",
           "main"]

N_BOOTSTRAP = 1_000
SEED = 0


def load_selection(dirs: list[str | Path]) -> pl.DataFrame:
    """The rows of every ``<dir>/selection.parquet``, with ``choice`` (protocol, or 'unsupervised:<criterion>')."""
    frames = []
    for d in dirs:
        path = Path(d) / "selection.parquet"
        if not path.is_file():
            raise FileNotFoundError(f"{path}: no selection.parquet (run `unitta select CONFIG.yaml --output {d}`)")
        frames.append(pl.read_parquet(path))
    df = pl.concat(frames, how="diagonal_relaxed")
    label = pl.when(pl.col("criterion").is_null()).then(pl.col("protocol")).otherwise(
        pl.col("protocol") + ":" + pl.col("criterion"))
    return df.with_columns(label.alias("choice"), pl.format("{}/{}", "setting", "seed").alias("unit"))


def _choices(df: pl.DataFrame) -> list[str]:
    order = {"default": 0, "oracle": 1, "holdout": 2}
    return sorted(set(df["choice"]), key=lambda c: (order.get(c, 3), c))


def point_label(chosen: str | None) -> str:
    """A ``chosen`` JSON point as ``lr=0.001, eta=0.1`` ('–' when nothing was chosen: every trial failed or stopped)."""
    if chosen is None:
        return "–"
    point = json.loads(chosen)
    return ", ".join(f"{name}={value:g}" if isinstance(value, float) else f"{name}={value}"
                     for name, value in point.items()) or "defaults"


def chosen_table(df: pl.DataFrame) -> str:
    """Markdown: what each protocol chose, one row per method x setting (x seed when there are several)."""
    choices = _choices(df)
    keys = ["method", "setting"] + (["seed"] if df["seed"].n_unique() > 1 else [])
    labels = {(tuple(r[k] for k in keys), r["choice"]): point_label(r["chosen"])
              for r in df.select(*keys, "choice", "chosen").iter_rows(named=True)}
    lines = ["| " + " | ".join(keys) + " | " + " | ".join(choices) + " |",
             "|" + "---|" * len(keys) + "---|" * len(choices)]
    for group in sorted({k for k, _ in labels}, key=lambda k: tuple(str(v) for v in k)):
        cells = [labels.get((group, choice), "–") for choice in choices]
        lines.append("| " + " | ".join(str(v) for v in group) + " | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def error_table(df: pl.DataFrame) -> str:
    """Markdown: method x choice, mean test error (%) over settings and seeds, the gap to the oracle in brackets."""
    choices = _choices(df)
    means = df.group_by("method", "choice").agg(pl.col("test_error").mean(), pl.col("gap_to_oracle").mean())
    lines = ["| method | " + " | ".join(choices) + " |", "|---|" + "---:|" * len(choices)]
    for method in sorted(set(df["method"])):
        cells = []
        for choice in choices:
            row = means.filter((pl.col("method") == method) & (pl.col("choice") == choice))
            if row.height == 0 or row["test_error"][0] is None:
                cells.append("–")
                continue
            gap = row["gap_to_oracle"][0]
            extra = "" if gap is None or choice == "oracle" else f" (+{gap:.2f})"
            cells.append(f"{row['test_error'][0]:.2f}{extra}")
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _matrix(df: pl.DataFrame, choice: str, methods: list[str], units: list[str]) -> np.ndarray:
    """test_error[unit, method] for one choice (NaN where missing)."""
    sub = df.filter(pl.col("choice") == choice)
    out = np.full((len(units), len(methods)), np.nan)
    index_u, index_m = {u: i for i, u in enumerate(units)}, {m: j for j, m in enumerate(methods)}
    for u, m, e in sub.select("unit", "method", "test_error").iter_rows():
        if e is not None:
            out[index_u[u], index_m[m]] = e
    return out


def _tau(a: np.ndarray, b: np.ndarray) -> float:
    from scipy.stats import kendalltau

    ok = ~(np.isnan(a) | np.isnan(b))
    if ok.sum() < 2:
        return float("nan")
    return float(kendalltau(a[ok], b[ok]).statistic)


def rankings(df: pl.DataFrame, n_boot: int = N_BOOTSTRAP, seed: int = SEED) -> pl.DataFrame:
    """Per choice: the ranking (best first), Kendall's tau vs the default ranking with a bootstrap 95 % interval
    over the (setting, seed) units, the winner and the fraction of resamples it wins."""
    methods, units = sorted(set(df["method"])), sorted(set(df["unit"]))
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(units), size=(n_boot, len(units)))
    default = _matrix(df, "default", methods, units) if "default" in set(df["choice"]) else None
    out = []
    for choice in _choices(df):
        m = _matrix(df, choice, methods, units)
        means = np.nanmean(m, axis=0) if len(units) else np.full(len(methods), np.nan)
        order = [methods[j] for j in np.argsort(np.where(np.isnan(means), np.inf, means), kind="stable")]
        taus, wins = [], 0
        for idx in draws:
            boot = np.nanmean(m[idx], axis=0)
            wins += int(methods[int(np.nanargmin(boot))] == order[0]) if not np.isnan(boot).all() else 0
            if default is not None:
                taus.append(_tau(boot, np.nanmean(default[idx], axis=0)))
        tau = _tau(means, np.nanmean(default, axis=0)) if default is not None else float("nan")
        lo, hi = (np.nanpercentile(taus, [2.5, 97.5]) if taus and not np.isnan(taus).all() else (np.nan, np.nan))
        out.append({"choice": choice, "ranking": " < ".join(order), "winner": order[0],
                    "winner_share": wins / n_boot, "kendall_tau": tau, "tau_low": float(lo), "tau_high": float(hi)})
    return pl.DataFrame(out)


def rankings_markdown(ranks: pl.DataFrame, n_units: int) -> str:
    lines = [f"Bootstrap over {n_units} (setting, seed) unit(s), {N_BOOTSTRAP} resamples; tau: Kendall's tau of the "
             "methods' mean errors against the default protocol's.", "",
             "| choice | winner (share of resamples) | Kendall's tau vs default [95 % interval] "
             "| ranking (best first) |",
             "|---|---|---:|---|"]
    for r in ranks.iter_rows(named=True):
        tau = "–" if np.isnan(r["kendall_tau"]) else (
            f"{r['kendall_tau']:.2f} [{r['tau_low']:.2f}, {r['tau_high']:.2f}]")
        lines.append(f"| {r['choice']} | **{r['winner']}** ({r['winner_share']:.0%}) | {tau} | {r['ranking']} |")
    return "\n".join(lines)


def figure(df: pl.DataFrame, path: Path) -> Path:
    """Grouped bars: each method's mean test error under each choice."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    methods, choices = sorted(set(df["method"])), _choices(df)
    means = df.group_by("method", "choice").agg(pl.col("test_error").mean())
    width = 0.8 / max(len(choices), 1)
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(methods) + 2) + 2, 4))
    for k, choice in enumerate(choices):
        values = [next(iter(means.filter((pl.col("method") == m) & (pl.col("choice") == choice))["test_error"]),
                       np.nan) for m in methods]
        ax.bar(np.arange(len(methods)) + k * width, [np.nan if v is None else v for v in values], width, label=choice)
    ax.set_xticks(np.arange(len(methods)) + width * (len(choices) - 1) / 2, methods, rotation=30, ha="right")
    ax.set_ylabel("test error (%), mean over settings and seeds")
    ax.set_title("Error of each protocol's choice")
    ax.set_ylim(*_error_limits(means["test_error"].drop_nulls().drop_nans().to_list()))
    # outside the axes: bars of similar height leave no free corner for it
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, title="choice")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _error_limits(values: list[float]) -> tuple[float, float]:
    """y limits that show 0.5-5 point differences: the errors' range plus a margin, not the axis from 0."""
    if not values:
        return 0.0, 100.0
    low, high = min(values), max(values)
    margin = max(0.15 * (high - low), 0.5)
    return max(0.0, low - margin), min(100.0, high + margin)


def analyse(dirs: list[str | Path], out: Path) -> list[Path]:
    """Write selection.md and selection.png into ``out``; return their paths."""
    df = load_selection(dirs)
    out.mkdir(parents=True, exist_ok=True)
    ranks = rankings(df)
    md = ("## What each protocol chose\n\nThe hyper-parameter values to use, per method and setting ('defaults': the "
          "method's own values; –: no trial finished).\n\n" + chosen_table(df) + "\n\n"
          "## Test error (%) of each protocol's choice\n\nMean over settings and seeds; (+x): the gap to the oracle's "
          "choice.\n\n" + error_table(df) + "\n\n## Rankings and winners\n\n"
          + rankings_markdown(ranks, df["unit"].n_unique()) + "\n")
    (out / "selection.md").write_text(md)
    return [out / "selection.md", figure(df, out / "selection.png")]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Tables and a figure of a selection's protocols (docs/selection.md).")
    parser.add_argument("dirs", nargs="+", metavar="SELECT_DIR", help="output folders of `unitta select`")
    parser.add_argument("--out", help="where to write (default: <first dir>/analysis)")
    args = parser.parse_args(argv)

    def body() -> int:
        written = analyse(args.dirs, Path(args.out) if args.out else Path(args.dirs[0]) / "analysis")
        print((written[0]).read_text())
        print("written: " + ", ".join(str(p) for p in written))
        return 0

    return run_analysis(body, FileNotFoundError)


if __name__ == "__main__":
    sys.exit(main())

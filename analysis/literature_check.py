"""The literature's continual findings checked on a sweep's rows, one by one (docs/benchmarks.md, "The literature's
findings on longer streams").

Example::

    python -m unitta.sweep sweeps/fmnist_literature_check.yaml
    python analysis/literature_check.py results/fmnist_literature_check     # Markdown on stdout
    python analysis/literature_check.py results/fmnist_full_length --out check.md

The findings, each with the published figures it is held against:
- RoTTA below BN on continual streams (i111): UniTTA's appendix, CIFAR-10-C, RoTTA 17.84 % vs BN 21.0 %;
- EATA below TENT on continual streams (i111): the mariodoebler benchmark, CIFAR-10-C continual, 17.9 vs 20.0 %;
- BN and TENT worse than the source model on correlated streams (n111): UniTTA's appendix, CIFAR-10-C, BN 49.42 %
  and TENT 70.29 % vs TEST 43.76 %;
- the real-time protocol costs the methods that are slower than the stream accuracy (Alfarra et al., ICML'24:
  3.6-7.2 points on ImageNet-C): every method with a real-time k above 1, real-time minus online error.
A finding is checked on every stream (same dataset, model, sampler, size, batch; errors averaged over seeds)
that has the cells it needs; a stream without them says which cells are missing.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import polars as pl

from analysis.common import add_sweep_argument, check_dirs, load_dirs, run_analysis
from unitta.results.replicates import METHOD_KEYS, fixed_keys

__all__ = ["FINDINGS", "stream_errors", "check_stream", "markdown", "main"]

# (name, setting, method below, methods above, literature) for the "lower error than" findings
FINDINGS = (
    ("RoTTA below BN on continual streams", "i111", "rotta", ("bn",), "CIFAR-10-C (UniTTA appendix): 17.84 vs 21.0"),
    ("EATA below TENT on continual streams", "i111", "eata", ("tent",),
     "CIFAR-10-C continual (mariodoebler): 17.9 vs 20.0"),
    ("BN and TENT worse than the source model on correlated streams", "n111", "test", ("bn", "tent"),
     "CIFAR-10-C (UniTTA appendix): TEST 43.76 vs BN 49.42, TENT 70.29"),
)
REALTIME = ("Real time costs the methods slower than the stream accuracy", "Alfarra et al. (ImageNet-C): +3.6 to +7.2")
FREE = {*METHOD_KEYS, "setting", "protocol", "realtime_cost", "seed"}
NAME_KEYS = ("model", "sampler", "n_per_domain", "S_cell", "length", "batch_size", "rounds")  # a stream's heading


def stream_errors(df: pl.DataFrame) -> list[tuple[str, pl.DataFrame]]:
    """[(stream name, rows: method, setting, protocol, error, realtime_k averaged over seeds)] for the default
    methods (no ``method_kwargs``) of each stream."""
    ok = df.filter((pl.col("status") == "ok") & (pl.col("method_kwargs").fill_null("{}") == "{}"))
    if "protocol" not in ok.columns:
        ok = ok.with_columns(pl.lit("online").alias("protocol"))
    if "realtime_k" not in ok.columns:
        ok = ok.with_columns(pl.lit(None, pl.Float64).alias("realtime_k"))
    keys = fixed_keys(ok, free=FREE)
    groups = [(dict(zip(keys, key)), group) for key, group in ok.group_by(keys, maintain_order=True)]
    out = []
    for values, group in groups:
        shown = [k for k in NAME_KEYS if values.get(k) is not None]
        # streams of one name (two image folders of one dataset: another data_digest) also show what tells them apart
        same = ("dataset", *shown)
        twins = [v for v, _ in groups if v is not values and all(v.get(k) == values.get(k) for k in same)]
        shown += [k for k in keys if k not in same and any(v.get(k) != values.get(k) for v in twins)]
        name = ", ".join(f"{k.removesuffix('_cell')} {values[k]}" for k in shown)
        seeds = group["seed"].n_unique()
        means = group.group_by("method", "setting", "protocol").agg(pl.col("error").mean(), pl.col("realtime_k").mean())
        out.append((f"{values.get('dataset')} ({name}; {seeds} seed{'s' * (seeds > 1)})", means))
    return out


def _error(means: pl.DataFrame, method: str, setting: str, protocol: str = "online") -> float | None:
    hit = means.filter((pl.col("method") == method) & (pl.col("setting") == setting) & (pl.col("protocol") == protocol))
    return None if hit.is_empty() else float(hit["error"][0])


def check_stream(means: pl.DataFrame) -> list[dict]:
    """One dict per finding: finding, literature, here (the errors), agrees (True / False / None: cells missing)."""
    rows = []
    for name, setting, below, above, literature in FINDINGS:
        errors = {m: _error(means, m, setting) for m in (below, *above)}
        missing = [m for m, e in errors.items() if e is None]
        here = (f"missing online {setting} cells of {', '.join(missing)}" if missing else
                f"{setting}: " + ", ".join(f"{m} {e:.2f}" for m, e in errors.items()))
        agrees = None if missing else all(errors[below] < errors[m] for m in above)
        rows.append({"finding": name, "literature": literature, "here": here, "agrees": agrees})
    rows.append(_realtime_row(means))
    return rows


def _realtime_row(means: pl.DataFrame) -> dict:
    slow = means.filter((pl.col("protocol") == "realtime") & (pl.col("realtime_k") > 1)).sort("setting", "method")
    parts, losses = [], []
    for r in slow.iter_rows(named=True):
        online = _error(means, r["method"], r["setting"])
        if online is not None:
            losses.append(r["error"] - online)
            parts.append(f"{r['method']} {r['setting']} k {r['realtime_k']:.0f}: {r['error'] - online:+.2f}")
    here = "; ".join(parts) if parts else "missing: real-time cells with k > 1 and their online cells"
    return {"finding": REALTIME[0], "literature": REALTIME[1], "here": here,
            "agrees": (min(losses) > 0) if losses else None}


def markdown(streams: list[tuple[str, pl.DataFrame]]) -> str:
    verdict = {True: "agrees", False: "disagrees", None: "not checked"}
    lines = []
    for name, means in streams:
        lines += [f"### {name}", "", "| finding | literature | here (error %) | verdict |", "|---|---|---|---|"]
        lines += [f"| {r['finding']} | {r['literature']} | {r['here']} | {verdict[r['agrees']]} |"
                  for r in check_stream(means)]
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="+", metavar="RESULTS_DIR")
    parser.add_argument("--out", help="also write the Markdown here")
    add_sweep_argument(parser)
    args = parser.parse_args(argv)

    def body() -> int:
        check_dirs(args.dirs)
        text = markdown(stream_errors(load_dirs(args.dirs, sweep=args.sweep, where=args.where)))
        if args.out:
            Path(args.out).write_text(text + "\n")
        print(text)
        return 0

    return run_analysis(body)


if __name__ == "__main__":
    raise SystemExit(main())

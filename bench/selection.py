"""Selection figures: what ASHA saves, what it costs in test error, and how busy the Ray workers are.

    python bench/selection.py [--quick] [--workers 2] [--out DIR] [--local]

Runs the same holdout selection twice on Ray (``--workers`` CPUs; ``--local``: in this process), 27 points
per method (each method's main hyper-parameter on a log grid over its declared range):
(a) every validation trial to the end, then ``scheduler: asha`` (Ray Tune's AsyncHyperBandScheduler, reduction
    factor 3); prints per method the adapted validation batches of each run and their ratio (target <= 1/3),
    and the test error of ASHA's choice and of the full search's choice (target: within 0.5 points);
(b) the workers' busy fraction of each run: the cells' summed durations / (workers x the run's wall time from
    the first cell's start to the last cell's end) (target >= 85 %).
Full: six methods on four settings of a 200-images-per-domain subset, S = 10, batch 16 (validation streams of
25 batches; 27 x 6 x 4 trials per run);
``--quick``: tent on one setting of the same subset (minutes on a contended CPU). Ratios within one run count.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import polars as pl

from unitta.results import load_results
from unitta.run import RunOptions
from unitta.select import parse_select_config, run_select

MAIN = {"tent": ("lr", 1e-4, 1e-2), "eata": ("lr", 1e-4, 1e-2), "sar": ("lr", 1e-4, 1e-2),
        "rotta": ("lr", 1e-4, 1e-2), "roid": ("lr", 1e-4, 1e-2), "unitta": ("eta", 1e-3, 0.5)}
FULL = {"methods": list(MAIN), "settings": ["n111", "nu11", "i111", "nuiu"],
        "cell": {"dataset": "fmnist-c", "n_per_domain": 200, "S": 10, "batch_size": 16}}
QUICK = {"methods": ["tent"], "settings": ["n111"], "cell": FULL["cell"]}


def config(scale: dict, scheduler: str, points: int = 27) -> dict:
    space = {m: {MAIN[m][0]: {"low": MAIN[m][1], "high": MAIN[m][2], "log": True, "num": points}}
             for m in scale["methods"]}
    return {"name": f"bench_select_{scheduler}", "cell": scale["cell"], "settings": scale["settings"],
            "methods": scale["methods"], "space": space, "protocols": ["default", "holdout"],
            "search": {"scheduler": scheduler, "reduction_factor": 3}}


def busy_fraction(out: Path, workers: int) -> tuple[float, float]:
    """(busy fraction, wall seconds) of a run's cells: summed durations / (workers x first start..last end)."""
    rows = load_results(out).filter(pl.col("started_at").is_not_null())
    wall = (rows["finished_at"].max() - rows["started_at"].min()).total_seconds()
    return float(rows["duration_s"].sum()) / (workers * wall), wall


def run(raw: dict, out: Path, opts: RunOptions) -> tuple[pl.DataFrame, float]:
    t0 = time.perf_counter()
    _, selection = run_select(parse_select_config(raw), out, opts)
    return selection.filter(pl.col("protocol") == "holdout"), time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tent on one setting")
    parser.add_argument("--workers", type=int, default=2, help="Ray CPUs (one cell each)")
    parser.add_argument("--local", action="store_true", help="run in this process (no Ray; no busy fraction)")
    parser.add_argument("--out", help="keep the runs here (default: a temporary folder)")
    args = parser.parse_args(argv)
    scale = QUICK if args.quick else FULL
    root = Path(args.out or tempfile.mkdtemp(prefix="bench_select_"))
    opts = RunOptions(local=args.local, num_cpus=args.workers, progress=False)
    full, full_s = run(config(scale, "none"), root / "full", opts)
    asha, asha_s = run(config(scale, "asha"), root / "asha", opts)
    print(f"## ASHA (reduction factor 3, 27 points per method) vs every trial to the end  [{root}]")
    print("| method | setting | batches full | batches ASHA | ratio | validation error: full's choice | ASHA's | "
          "test error: full's choice | ASHA's | diff |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    both = full.join(asha, on=["method", "setting", "seed"], suffix="_asha")
    for r in both.sort("method", "setting").iter_rows(named=True):
        ratio = r["batches_spent_asha"] / r["batches_spent"]
        diff = r["test_error_asha"] - r["test_error"]
        print(f"| {r['method']} | {r['setting']} | {r['batches_spent']} | {r['batches_spent_asha']} | {ratio:.2f} | "
              f"{r['selection_score']:.2f} | {r['selection_score_asha']:.2f} | "
              f"{r['test_error']:.2f} | {r['test_error_asha']:.2f} | {diff:+.2f} |")
    total = both["batches_spent_asha"].sum() / both["batches_spent"].sum()
    worst = (both["test_error_asha"] - both["test_error"]).abs().max()
    within = int(((both["test_error_asha"] - both["test_error"]).abs() <= 0.5).sum())
    worst_val = (both["selection_score_asha"] - both["selection_score"]).max()
    print(f"\nall: ASHA spent {total:.2f} of the full search's adapted validation batches (target <= 0.33); "
          f"largest |test error difference| of the choices {worst:.2f} points (target <= 0.5), {within} of "
          f"{both.height} groups within 0.5; ASHA's choice at most {worst_val:.2f} points worse on validation")
    print(f"wall: full {full_s:.0f} s, ASHA {asha_s:.0f} s")
    if not args.local:
        for name in ("full", "asha"):
            fraction, wall = busy_fraction(root / name, args.workers)
            print(f"(b) {name}: {args.workers} Ray workers busy {fraction:.0%} of {wall:.0f} s (target >= 85 %)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Sweep orchestration figures: per-cell overhead and throughput with 1 vs 2 concurrent workers.

    python bench/sweep.py                      # 8 small real cells (fmnist-c subset), about 2 minutes
    python bench/sweep.py --settings 8 --S 40  # more / longer cells

The same cells run three ways, each into a fresh directory:
  local      --local: in this process, one after another (no Ray)
  ray x1     a local Ray with 1 CPU: one cell at a time
  ray x2     a local Ray with 2 CPUs: two cells at a time (each cell pinned to 1 torch thread)
Per-cell orchestration overhead = (sweep wall time x concurrency - sum of the cells' own times) / cells:
what the driver, Ray scheduling, result writing and worker start-up add to each cell. The Ray
clusters are started before the clock starts (ray.init is not part of a sweep's cost on a cluster),
but worker start-up (importing torch) is inside it, as it is in a real sweep.
Target of issue 6: ray x2 / ray x1 throughput >= 1.8 on 2 cores.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from unitta.config import SETTINGS_24, parse_config  # noqa: E402
from unitta.results import load_results  # noqa: E402
from unitta.sweep import run_sweep  # noqa: E402


def _config(args, name: str):
    return parse_config(
        {
            "name": name,
            "datasets": ["fmnist-c"],
            "methods": args.methods,
            "settings": list(SETTINGS_24[: args.settings]),
            "n_per_domain": args.n_per_domain,
            "S": args.S,
            "resources": {"num_cpus": 1},
        }
    )


def _run(args, mode: str, workers: int, root: Path) -> dict:
    import ray

    cfg = _config(args, f"bench_{mode.replace(' ', '')}")
    out = root / mode.replace(" ", "")
    if mode != "local":
        ray.init(address="local", num_cpus=workers, include_dashboard=False, log_to_driver=False,
                 logging_level="WARNING")
    try:
        t0 = time.perf_counter()
        outcome = run_sweep(cfg, out, local=(mode == "local"), progress=False)
        wall = time.perf_counter() - t0
    finally:
        if mode != "local":
            ray.shutdown()
    df = load_results(out)
    assert outcome.n_failed == 0, df.filter(df["status"] == "failed")["error_text"].to_list()
    cell_sum = float(df["duration_s"].sum())
    n = df.height
    return {
        "mode": mode,
        "cells": n,
        "wall_s": wall,
        "cell_sum_s": cell_sum,
        "overhead_per_cell_s": (wall * workers - cell_sum) / n,
        "cells_per_min": 60 * n / wall,
        "images": int(df["n_samples"].sum()),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--methods", nargs="+", default=["test", "bn"])
    p.add_argument("--settings", type=int, default=4, help="the first N of the paper's 24 settings")
    p.add_argument("--n-per-domain", type=int, default=1000)
    p.add_argument("--S", type=int, default=20)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="unitta-bench-") as tmp:
        root = Path(tmp)
        rows = [_run(args, "local", 1, root), _run(args, "ray x1", 1, root), _run(args, "ray x2", 2, root)]
    print(f"{len(args.methods)} methods x {args.settings} settings, fmnist-c n_per_domain={args.n_per_domain}, "
          f"S={args.S}, {os.cpu_count()} CPUs")
    print(f"{'mode':<8} {'cells':>5} {'images':>7} {'wall s':>8} {'sum cell s':>10} {'overhead/cell s':>15} {'cells/min':>9}")
    for r in rows:
        print(f"{r['mode']:<8} {r['cells']:>5} {r['images']:>7} {r['wall_s']:>8.2f} {r['cell_sum_s']:>10.2f} "
              f"{r['overhead_per_cell_s']:>15.3f} {r['cells_per_min']:>9.1f}")
    speedup = rows[1]["wall_s"] / rows[2]["wall_s"]
    print(f"throughput ray x2 / ray x1: {speedup:.2f}x (target >= 1.8x on 2 cores)")


if __name__ == "__main__":
    main()

"""Sweep orchestration figures: per-cell overhead and throughput with 1 vs 2 concurrent workers.

    python bench/sweep.py                      # 8 small real cells (fmnist-c subset), about 2 minutes
    python bench/sweep.py --settings 8 --S 40  # more / longer cells
    python bench/sweep.py --skip-local --cold  # Ray only, worker start-up included

The same cells run three ways, each into a fresh directory:
  local      --local: in this process, one after another (no Ray)
  ray x1     a local Ray with 1 CPU: one cell at a time
  ray x2     a local Ray with 2 CPUs: two cells at a time (each cell pinned to 1 torch thread)
Per-cell orchestration overhead = (sweep wall time x concurrency - sum of the cells' own times) / cells:
what the driver, Ray scheduling, result writing and worker start-up add to each cell. The Ray
clusters are started, and their workers warmed up (torch and unitta imported), before the clock
starts: on a cluster both happen once per sweep, not per cell (``--cold`` counts worker start-up).
Target: ray x2 / ray x1 throughput >= 1.8 on 2 cores.
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

from unitta.results import load_results  # noqa: E402
from unitta.streams.settings import SETTING_CODES_24 as SETTINGS_24  # noqa: E402
from unitta.sweep import run_sweep  # noqa: E402
from unitta.sweep.config import parse_config  # noqa: E402


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


def _spin(_: int = 0) -> float:
    t0 = time.perf_counter()
    x = 0
    for i in range(10_000_000):
        x += i
    return time.perf_counter() - t0


def _cpu_control() -> float:
    """Speed-up of 2 concurrent pure-Python busy loops over 1: what this machine can give right now
    (2.0 on 2 idle cores; less when other processes share them)."""
    import multiprocessing as mp

    one = _spin()
    with mp.get_context("spawn").Pool(2) as pool:
        pool.map(_spin, [0, 1])  # start-up outside the clock
        t0 = time.perf_counter()
        pool.map(_spin, [0, 1])
        two = time.perf_counter() - t0
    return 2 * one / two


def _warm() -> int:
    import time as _time

    import unitta.evaluate  # noqa: F401
    import unitta.methods  # noqa: F401
    import unitta.sweep  # noqa: F401

    _time.sleep(1.0)  # hold the CPU so that each warm-up task lands on its own worker
    return os.getpid()


def _run(args, mode: str, workers: int, root: Path) -> dict:
    import ray

    cfg = _config(args, f"bench_{mode.replace(' ', '')}")
    out = root / mode.replace(" ", "")
    if mode != "local":
        ray.init(address="local", num_cpus=workers, include_dashboard=False, log_to_driver=False,
                 logging_level="WARNING")
        if args.warm:  # start the workers and import torch + unitta in them before the clock starts
            ray.get([_warm.options(num_cpus=1).remote() for _ in range(workers)])
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
    p.add_argument("--cold", dest="warm", action="store_false",
                   help="count Ray worker start-up (importing torch) in the sweep time")
    p.add_argument("--skip-local", action="store_true", help="skip the --local baseline")
    args = p.parse_args()
    import ray

    global _warm
    _warm = ray.remote(_warm)
    control_before = _cpu_control()
    with tempfile.TemporaryDirectory(prefix="unitta-bench-") as tmp:
        root = Path(tmp)
        rows = [] if args.skip_local else [_run(args, "local", 1, root)]
        rows += [_run(args, "ray x1", 1, root), _run(args, "ray x2", 2, root)]
    print(f"{len(args.methods)} methods x {args.settings} settings, fmnist-c n_per_domain={args.n_per_domain}, "
          f"S={args.S}, {os.cpu_count()} CPUs")
    print(f"{'mode':<8} {'cells':>5} {'images':>7} {'wall s':>8} {'sum cell s':>10} "
          f"{'overhead/cell s':>15} {'cells/min':>9}")
    for r in rows:
        print(f"{r['mode']:<8} {r['cells']:>5} {r['images']:>7} {r['wall_s']:>8.2f} {r['cell_sum_s']:>10.2f} "
              f"{r['overhead_per_cell_s']:>15.3f} {r['cells_per_min']:>9.1f}")
    speedup = rows[-2]["wall_s"] / rows[-1]["wall_s"]
    print(f"throughput ray x2 / ray x1: {speedup:.2f}x (target >= 1.8x on 2 cores)")
    print(f"control, 2 vs 1 busy-loop processes on this machine now: {control_before:.2f}x before, "
          f"{_cpu_control():.2f}x after (2.0 = two idle cores)")


if __name__ == "__main__":
    main()

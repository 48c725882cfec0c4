"""Long horizons (docs/long_horizon.md): planning a 1,000,000-image stream, CCC generation against the source
model's forward pass, and the wall time per method of a long-horizon sweep. Prints figures; not a test.

    python bench/long_horizon.py                                   # plan + generation
    python bench/long_horizon.py --results results/long_horizon     # + wall time per method of that sweep

* plan: wall time and peak memory of the numpy allocations (tracemalloc) of the stream plan of 1,000,000
  positions (indices, domains, classes; and the batch plan of 4 recurring rounds of 250,000): the exact
  sampler (continual domains, i.i.d. and non-i.i.d. imbalanced classes) and the ccc walk;
* generation: images per second of the ccc sampler's image source (``unitta.data.ccc``, on the CPU, the
  calibrated severities of the target) against the embedded ResNet-20's forward pass on the same batches.
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np

from unitta.evaluate.horizon import batch_bounds
from unitta.streams import make_ccc_stream, make_stream, synthetic_labels

N = 1_000_000


def _measured(fn):
    tracemalloc.start()
    t0 = time.perf_counter()
    out = fn()
    seconds = time.perf_counter() - t0
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return seconds, peak, out


def bench_plan() -> None:
    labels, domains = synthetic_labels("cifar10")
    cases = {
        "exact i111": lambda: make_stream(labels, domains, "i111", sampler="exact", length=N),
        "exact nu11": lambda: make_stream(labels, domains, "nu11", sampler="exact", length=N),
        "ccc n111": lambda: make_ccc_stream(labels[:10_000], "n111", eligible=np.array([2, 5, 7, 8, 11]),
                                            num_domains=15, length=N, transition=50_000, seed=1),
        "batch plan 4 x 250,000, each_shift": lambda: batch_bounds(
            N // 4, 4, 64, make_stream(labels, domains, "i111", sampler="exact", length=N // 4).domains),
    }
    print(f"plan of a {N:,}-position stream (targets: < 10 s, < 100 MB)")
    for name, fn in cases.items():
        seconds, peak, _ = _measured(fn)
        print(f"  {name:36s} {seconds:6.2f} s   peak {peak:6.1f} MB")


def bench_generation(batches: int, target: float) -> None:
    import torch

    from unitta.cell import Cell
    from unitta.evaluate.ccc_calibration import ccc_stream
    from unitta.models import load_model

    torch.set_num_threads(1)
    cell = Cell(sampler="ccc", length=batches * 64, ccc={"target_error": target, "transition": batches * 16})
    model, _ = load_model(cell.dataset)
    model.eval()
    stream, source = ccc_stream(cell, model, torch.device("cpu"))
    starts = range(0, len(stream.indices), 64)
    t0 = time.perf_counter()
    xs = [source.get_batch(stream.indices[s : s + 64]) for s in starts]
    generate = time.perf_counter() - t0
    with torch.no_grad():
        model(xs[0])
        t0 = time.perf_counter()
        for x in xs:
            model(x)
        forward = time.perf_counter() - t0
    n = len(stream.indices)
    print(f"ccc generation vs forward, {batches} batches of 64, target error {target:g} (1 torch thread; severities "
          f"{stream.meta['severities']})")
    print(f"  generation {n / generate:8.0f} images/s   source forward {n / forward:8.0f} images/s   "
          f"ratio {forward / generate:.1f}x (target >= 3x)")


def bench_results(paths: list[str]) -> None:
    import polars as pl

    from unitta.results import load_results

    df = pl.concat([load_results(p) for p in paths], how="diagonal_relaxed").filter(pl.col("status") == "ok")
    table = df.group_by("method").agg(pl.len().alias("cells"), pl.col("wall_time_s").sum().alias("wall_s"),
                                      pl.col("n_samples").sum().alias("images")).sort("wall_s")
    print(f"wall time per method of {', '.join(paths)} (cells run one after another)")
    for row in table.iter_rows(named=True):
        print(f"  {row['method']:10s} {row['cells']:3d} cells  {row['wall_s']:8.0f} s  "
              f"{row['images'] / row['wall_s']:7.0f} images/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=40, help="ccc batches of 64 to generate (default 40)")
    parser.add_argument("--target", type=float, default=60.0, help="ccc target error (default 60)")
    parser.add_argument("--results", nargs="+", help="long-horizon sweep result directories: wall time per method")
    args = parser.parse_args()
    bench_plan()
    bench_generation(args.batches, args.target)
    if args.results:
        bench_results(args.results)


if __name__ == "__main__":
    main()

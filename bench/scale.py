"""Planning and loading at cluster scale: per-cell costs at 1k / 10k / 100k cells and the ratios of docs/benchmarks.md.

    python bench/scale.py            # planning up to 100,000 cells, loading 1k / 10k / 100k: ~5 minutes on 2 cores
    python bench/scale.py --quick    # planning up to 50,000 cells, loading 1k / 10k: ~2 minutes

Planning: ``python -m unitta.sweep CONFIG --dry-run`` (the cell listing, then the preflight checks) in a child
process for grids of 100, 1k, 10k, 50k (and 100k) cells: 5 methods x 20 settings x seeds. CPU time is the
child's (``getrusage(RUSAGE_CHILDREN)``), imports included; per cell = (CPU - CPU of the 100-cell grid) / extra cells.
Target: the 50,000-cell grid costs at most 3x the CPU of the 100-cell grid.

Loading: four tiny real cells run --local; their rows, copied with rewritten ids, make folders laid out as the
sweep driver leaves them (``unitta.results.compaction``): 1,000 cell files written by the real writer and compacted by
the real compaction into a part, the other parts copies of it with other ids, then
  mid-run   every 1,000 rows in a part, plus 999 cell files not compacted yet (the most a running sweep leaves);
  finished  after ``consolidate``: results.parquet alone.
Each load runs in a fresh child process (wall and CPU of the load itself, imports excluded; peak memory
``VmHWM`` of the child, imports included: about 140 MB), against ``polars.read_parquet`` of the same rows in one file.
Targets: ``load_results`` of 10,000 cells costs at most 3x the one-file read; 100,000 cells load in under 30 s
wall; loading 100,000 rows stays under 2 GB.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from unitta.results import consolidate, load_results, write_cell_result  # noqa: E402
from unitta.results.cell_files import compacted_dir  # noqa: E402
from unitta.results.compaction import COMPACT_AT, compact  # noqa: E402
from unitta.streams.settings import SETTING_CODES_24  # noqa: E402
from unitta.sweep import run_sweep  # noqa: E402
from unitta.sweep.config import parse_config  # noqa: E402

METHODS = ["test", "bn", "tent", "balanced_bn", "unitta"]
SETTINGS = list(SETTING_CODES_24[:20])  # 5 x 20 = 100 cells per seed
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


# ---------------------------------------------------------------------- planning
def _child_cpu(cmd: list[str]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of a child process."""
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=ENV)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, time.perf_counter() - start


def plan(sizes: list[int], work: Path) -> dict[int, float]:
    import yaml

    print(f"{'planning: cells':>18} {'CPU s':>8} {'wall s':>8} {'ms/cell':>8}")
    cpu = {}
    for n in sizes:
        cfg = {"name": f"plan{n}", "output": str(work / f"plan{n}"), "datasets": ["fmnist-c"], "methods": METHODS,
               "settings": SETTINGS, "seeds": list(range(n // 100)), "n_per_domain": 100, "S": 5}
        path = work / f"plan{n}.yaml"
        path.write_text(yaml.safe_dump(cfg))
        cpu[n], wall = _child_cpu([sys.executable, "-m", "unitta.sweep", str(path), "--dry-run"])
        per = (cpu[n] - cpu[sizes[0]]) / (n - sizes[0]) * 1e3 if n > sizes[0] else float("nan")
        print(f"{n:>18,} {cpu[n]:>8.2f} {wall:>8.2f} {per:>8.3f}")
    return cpu


# ---------------------------------------------------------------------- folders of real rows
def real_rows(work: Path) -> list[dict]:
    """The rows of four tiny real cells (run --local)."""
    cfg = parse_config({"name": "seed", "datasets": ["fmnist-c"], "methods": ["test", "bn"],
                        "settings": ["i111", "nui1"], "n_per_domain": 100, "S": 5, "seeds": [425]})
    out = work / "seed"
    run_sweep(cfg, out, local=True, progress=False)
    return list(load_results(out).iter_rows(named=True))


def _renamed(row: dict, i: int) -> dict:
    digest = f"{i:016x}"
    return {**row, "cell_id": f"{row['dataset']}__{row['method']}__{row['setting']}__{digest}", "config_hash": digest}


def _id_table(template: pa.Table, start: int) -> pa.Table:
    """``template`` (a compacted part) with the ids ``start``, ``start + 1``, ...: the same rows, other cells."""
    digests = [f"{i:016x}" for i in range(start, start + template.num_rows)]
    prefixes = [cid.rsplit("__", 1)[0] for cid in template.column("cell_id").to_pylist()]
    table = template.set_column(template.schema.get_field_index("cell_id"), "cell_id",
                                pa.array([f"{p}__{d}" for p, d in zip(prefixes, digests)]))
    return table.set_column(table.schema.get_field_index("config_hash"), "config_hash", pa.array(digests))


def build(rows: list[dict], n: int, folder: Path) -> tuple[Path, Path]:
    """(mid-run folder, finished folder) of ``n`` cells (see the module docstring)."""
    mid = folder / "mid"
    for i in range(COMPACT_AT):  # the real writer, then the real compaction
        write_cell_result(mid, _renamed(rows[i % len(rows)], i))
    compact(mid, COMPACT_AT)
    (first,) = compacted_dir(mid).glob("part-*.parquet")
    template = pq.read_table(first)
    for k in range(1, n // COMPACT_AT):  # the other parts: the same rows under other ids
        pq.write_table(_id_table(template, k * COMPACT_AT), compacted_dir(mid) / f"part-{k + 1:06d}.parquet")
    for i in range(n, n + COMPACT_AT - 1):
        write_cell_result(mid, _renamed(rows[i % len(rows)], i))
    finished = folder / "finished"
    subprocess.run(["cp", "-r", str(mid), str(finished)], check=True)
    consolidate(finished, compact_at=COMPACT_AT)
    return mid, finished


# ---------------------------------------------------------------------- loading
# Peak memory: the kernel's high-water mark of this process (VmHWM; ru_maxrss would carry the parent's over exec).
_LOAD = """
import json, resource, sys, time
def peak_mb():
    try:
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) for l in f if l.startswith("VmHWM")) / 1024
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
import polars as pl
from unitta.results import load_results
before = peak_mb()
wall, cpu = time.perf_counter(), time.process_time()
df = load_results(sys.argv[2]) if sys.argv[1] == "load_results" else pl.read_parquet(sys.argv[2])
print(json.dumps({"rows": df.height, "wall": time.perf_counter() - wall, "cpu": time.process_time() - cpu,
                  "maxrss_mb": peak_mb(), "imports_mb": before}))
"""


def measure(how: str, path: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", _LOAD, how, str(path)], check=True, capture_output=True, text=True,
                         env=ENV)
    return json.loads(out.stdout.strip().splitlines()[-1])


def load(rows: list[dict], sizes: list[int], work: Path) -> dict:
    print(f"\n{'loading: cells':>18} {'layout':>9} {'rows':>8} {'wall s':>8} {'CPU s':>8} {'us/cell':>8} "
          f"{'peak MB':>8}")
    figures = {}
    for n in sizes:
        mid, finished = build(rows, n, work / f"load{n}")
        one = work / f"one{n}.parquet"
        load_results(mid).write_parquet(one)  # the same rows in one file
        for label, how, path in (("mid-run", "load_results", mid), ("finished", "load_results", finished),
                                 ("one file", "read_parquet", one)):
            f = measure(how, path)
            figures[n, label] = f
            print(f"{n:>18,} {label:>9} {f['rows']:>8,} {f['wall']:>8.2f} {f['cpu']:>8.2f} "
                  f"{f['cpu'] / f['rows'] * 1e6:>8.1f} {f['maxrss_mb']:>8.0f}")
    return figures


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="planning up to 50k cells, loading 1k and 10k cells")
    args = p.parse_args(argv)
    plan_sizes = [100, 1_000, 10_000, 50_000] + ([] if args.quick else [100_000])
    load_sizes = [1_000, 10_000] + ([] if args.quick else [100_000])
    with tempfile.TemporaryDirectory(prefix="unitta-scale-") as tmp:
        work = Path(tmp)
        cpu = plan(plan_sizes, work)
        figures = load(real_rows(work), load_sizes, work)
    print(f"\nratios ({os.cpu_count()} CPUs):")
    print(f"  dry-run CPU 50,000 / 100 cells: {cpu[50_000] / cpu[100]:.2f} (target <= 3)")
    for label in ("finished", "mid-run"):
        ours, one = figures[10_000, label], figures[10_000, "one file"]
        print(f"  load_results 10,000 cells ({label}) / one-file read: CPU {ours['cpu'] / one['cpu']:.2f}, "
              f"wall {ours['wall'] / one['wall']:.2f} (target <= 3 for a finished folder)")
    if 100_000 in load_sizes:
        for label in ("finished", "mid-run"):
            f = figures[100_000, label]
            print(f"  100,000 cells ({label}): {f['wall']:.2f} s wall (target < 30), peak {f['maxrss_mb']:.0f} MB "
                  "(target < 2,048)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

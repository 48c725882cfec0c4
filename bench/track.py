"""Experiment-tracker figures (docs/tracking.md): a 1,000-cell folder logged to a local MLflow server by
``unitta track``, and a quick sweep with tracking on vs off.

    python bench/track.py                              # both: about 10 minutes on 2 cores
    python bench/track.py --skip-sweep --cells 1000    # the folder only
    python bench/track.py --settings i111              # a shorter quick sweep (5 cells instead of 20)

1. folder: one real cell is run (sweeps/quick.yaml's first: the embedded Fashion-MNIST-C, ``--local``) and its
   row replicated into ``--cells`` rows that differ only in their cell id (``<cell_id>-r0000`` ...): the real
   schema, with the real sizes of what is logged (26 parameters, 40 metrics with the 15 per-domain errors, a
   10-step error curve). ``unitta track DIR --mlflow URI`` logs them as a subprocess (imports included) into a
   new experiment, then runs again (every cell is there: the search alone). Target: at most 60 s on 2 cores. The
   CPU seconds of ``unitta track`` and of the server are printed too: on a busy machine the wall time measures
   the other jobs as well, the CPU time does not.
2. sweep: sweeps/quick.yaml ``--local`` into fresh folders, without tracking and with
   ``--track mlflow=URI``, in alternating order ``--repeats`` times after a one-cell warm-up; wall and CPU seconds
   of this process (the tracking thread's included). Target: tracked at most 10 % longer.

The MLflow server is a real ``mlflow server`` on 127.0.0.1 with a SQLite backend in a temp folder (the tests'
``tests/track/servers.py``).
"""

from __future__ import annotations

import argparse
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

from tests.track.servers import group_cpu_seconds, mlflow_server  # noqa: E402
from unitta.results import load_results  # noqa: E402
from unitta.schema.yaml_files import read_yaml_file  # noqa: E402
from unitta.sweep import run_sweep  # noqa: E402
from unitta.sweep.config import parse_config  # noqa: E402

QUICK = ROOT / "sweeps" / "quick.yaml"


def _quick(settings: list[str] | None, name: str):
    data = read_yaml_file(QUICK)
    data.pop("output", None)
    if settings:
        data["settings"] = settings
    return parse_config({**data, "name": name})


def replicated_folder(tmp: Path, cells: int) -> Path:
    """``tmp/folder/results.parquet``: one real cell's row, ``cells`` times with distinct cell ids."""
    import polars as pl

    real = tmp / "real"
    cfg = _quick(None, "bench-track-real")
    run_sweep(cfg, real, local=True, progress=False, cells=cfg.cells()[:1])
    row = load_results(real)
    folder = tmp / "folder"
    folder.mkdir()
    copies = pl.concat([row] * cells).with_columns(
        (pl.col("cell_id") + "-r" + pl.int_range(cells).cast(pl.String).str.zfill(4)).alias("cell_id"))
    copies.write_parquet(folder / "results.parquet")
    return folder


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def track_seconds(folder: Path, uri: str, experiment: str, jobs: int, server: list[int]) -> tuple[float, str]:
    """Wall seconds of ``unitta track`` and its output line, with the CPU seconds it and the server used."""
    client, served = _children_cpu(), group_cpu_seconds(server[0])
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "unitta", "track", str(folder), "--mlflow", uri, "--experiment",
                           experiment, "--jobs", str(jobs)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    if done.returncode:
        raise SystemExit(f"unitta track failed ({done.returncode}): {done.stderr.strip()}")
    wall = time.perf_counter() - start
    cpu = f"CPU: unitta track {_children_cpu() - client:.1f} s, server {group_cpu_seconds(server[0]) - served:.1f} s"
    return wall, f"{done.stdout.strip()}; {cpu}"


def sweep_seconds(tmp: Path, settings: list[str] | None, track: list[str] | None, tag: str) -> tuple[float, float]:
    """(wall, CPU) seconds of the quick sweep run --local in this process (the tracking thread's CPU included)."""
    cfg = _quick(settings, f"bench-track-{tag}")
    start, cpu = time.perf_counter(), time.process_time()
    outcome = run_sweep(cfg, tmp / tag, local=True, progress=False, track=track)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    assert outcome.n_failed == 0, "a quick cell failed"
    return seconds, cpu


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cells", type=int, default=1000)
    p.add_argument("--jobs", type=int, default=8, help="unitta track --jobs")
    p.add_argument("--server-workers", type=int, default=1,
                   help="mlflow server --workers (over 1, uvicorn restarts slow-starting workers on a busy machine)")
    p.add_argument("--settings", nargs="+", help="the quick sweep's settings (default: all four of quick.yaml)")
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--skip-folder", action="store_true")
    p.add_argument("--skip-sweep", action="store_true")
    args = p.parse_args()
    server: list[int] = []  # the server's process group id (its CPU time is measured)
    with tempfile.TemporaryDirectory(prefix="bench-track-") as name, \
            mlflow_server(Path(name), args.server_workers, on_start=server.append) as uri:
        tmp = Path(name)
        print(f"mlflow server {uri} (SQLite, {args.server_workers} worker(s)); {os.cpu_count()} CPUs, load average "
              f"{os.getloadavg()[0]:.1f}")
        if not args.skip_folder:
            folder = replicated_folder(tmp, args.cells)
            first, said = track_seconds(folder, uri, "bench-folder", args.jobs, server)
            print(f"unitta track, {args.cells} cells, new experiment, --jobs {args.jobs}: {first:.1f} s ({said})")
            again, said = track_seconds(folder, uri, "bench-folder", args.jobs, server)
            print(f"unitta track again (all there): {again:.1f} s ({said}); load average {os.getloadavg()[0]:.1f}")
        if not args.skip_sweep:
            off, on = [], []  # (wall, CPU) seconds
            cfg = _quick(args.settings, "bench-track-warm-up")  # imports, the cached dataset, the model: paid once
            run_sweep(cfg, tmp / "warm-up", local=True, progress=False, cells=cfg.cells()[:1])
            for i in range(args.repeats):
                first_on = i % 2 == 1  # alternated, so that neither side always runs on a cooler machine
                if first_on:
                    on.append(sweep_seconds(tmp, args.settings, [f"mlflow={uri}"], f"on{i}"))
                off.append(sweep_seconds(tmp, args.settings, None, f"off{i}"))
                if not first_on:
                    on.append(sweep_seconds(tmp, args.settings, [f"mlflow={uri}"], f"on{i}"))
                print(f"quick sweep --local, repeat {i}: untracked {off[-1][0]:.1f} s (CPU {off[-1][1]:.1f} s), "
                      f"tracked {on[-1][0]:.1f} s (CPU {on[-1][1]:.1f} s)")
            wall = sum(w for w, _ in on) / sum(w for w, _ in off)
            cpu = sum(c for _, c in on) / sum(c for _, c in off)
            print(f"quick sweep: tracked / untracked = {wall:.3f} wall, {cpu:.3f} CPU; load average "
                  f"{os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

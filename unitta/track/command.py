"""``unitta track RESULTS_DIR``: log a results folder's cells to experiment trackers after the fact (docs/tracking.md).

Examples::

    unitta track results/quick --mlflow http://127.0.0.1:5000                 # experiment: the folder's run name
    unitta track results/quick --mlflow http://127.0.0.1:5000 --experiment quick-cpu
    unitta track results/quick --wandb offline --tensorboard results/quick/tensorboard

Cells a tracker already holds are skipped (MLflow: found by their ``unitta.cell_id`` tag; W&B and TensorBoard:
the local ledger), so repeating the command adds nothing and completes a run whose tracker went down mid-sweep.
MLflow runs are logged on ``--jobs`` threads. Exit codes: 0 every cell logged, 1 a tracker failed (one line;
what was logged stays), 2 a mistake in the command (no such folder, no tracker given, a missing package).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from unitta.results import load_results
from unitta.results.tracking_record import write_tracking_record
from unitta.schema import ConfigError, Tracking, validate
from unitta.track.cell_run import CellRun, cell_run
from unitta.track.destinations import make_trackers
from unitta.track.sweep_run import sweep_run
from unitta.track.tracker import Tracker, TrackerError, short_reason

__all__ = ["main", "track_folder", "folder_runs"]

JOBS = 8  # concurrent MLflow requests: a tracking server answers several at once


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="unitta track",
        description="Log a results folder's cells to MLflow, Weights & Biases or TensorBoard (docs/tracking.md).",
        epilog=(__doc__ or "").split("Examples::")[1].split("Cells a tracker")[0].rstrip() + "\n\nexit codes: 0 "
        "every cell logged, 1 a tracker failed, 2 a mistake in the command",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("results", help="a results folder (a sweep's, tune's or select's output)")
    p.add_argument("--mlflow", metavar="TRACKING_URI", help="an MLflow tracking server (http://host:port) or store URI")
    p.add_argument("--experiment", help="the MLflow experiment (default: the folder's run name, manifest.json)")
    p.add_argument("--wandb", metavar="MODE", help="Weights & Biases: online, offline or disabled")
    p.add_argument("--wandb-project", default="unitta", help="the W&B project (default: unitta)")
    p.add_argument("--wandb-dir", help="where W&B writes its files (default: the results folder)")
    p.add_argument("--tensorboard", metavar="DIR", help="a folder for TensorBoard event files")
    p.add_argument("--jobs", type=int, default=JOBS, help=f"concurrent MLflow requests (default {JOBS})")
    return p


def _run_name(out: Path) -> str:
    try:
        return str(json.loads((out / "manifest.json").read_text())["name"])
    except (OSError, ValueError, KeyError, TypeError):
        return out.resolve().name


def folder_runs(out: Path) -> tuple[list[CellRun], int]:
    """(the runs of every cell with metrics in ``out``, the count of failed rows left out)."""
    df = load_results(out)
    runs = [cell_run(row) for row in df.iter_rows(named=True)]
    return [r for r in runs if r is not None], sum(r is None for r in runs)


_TIMEOUT = "MLFLOW_HTTP_REQUEST_TIMEOUT"
BULK_TIMEOUT_S = "60"  # many requests at once queue on a server: MLflow's time-out once the server has answered


@contextlib.contextmanager
def _bulk_timeout() -> Iterator[None]:
    """``BULK_TIMEOUT_S`` for the logging after ``open`` (``track_folder``), unless the user set the variable;
    restored after. ``open`` keeps the tracker's own (docs/tracking.md: 10 s + one retry), so a server that never
    answers is given up on in about 20 s, not in two of the bulk logging's time-outs."""
    user = os.environ.get(_TIMEOUT)
    try:
        yield
    finally:
        os.environ.pop(_TIMEOUT, None)
        if user is not None:
            os.environ[_TIMEOUT] = user


def track_folder(tracker: Tracker, runs: list[CellRun], jobs: int = 1, out: Path | None = None) -> tuple[int, int]:
    """Log the ``runs`` ``tracker`` does not hold yet, on ``jobs`` threads; (logged, already there). ``out``: the
    results folder, whose config and summary table go to each sweep's parent run (``unitta.track.sweep_run``).

    A failed write stops the rest (TrackerError); the runs logged before it stay logged. The tracker opens with its
    own time-outs; the logging of many requests at once has ``BULK_TIMEOUT_S`` unless the environment sets one.
    """
    user_timeout = _TIMEOUT in os.environ
    done = tracker.open()
    if not user_timeout and tracker.name == "mlflow":
        os.environ[_TIMEOUT] = BULK_TIMEOUT_S
    todo = [run for run in runs if run.cell_id not in done]
    if jobs > 1 and len(todo) > 1:
        with ThreadPoolExecutor(jobs) as pool:
            for _ in pool.map(tracker.log, todo):
                pass
    else:
        for run in todo:
            tracker.log(run)
    if out is not None:
        for sweep in sorted({run.sweep for run in runs}):
            tracker.log_sweep(sweep_run(out, sweep))
    tracker.finish()
    return len(todo), len(runs) - len(todo)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    out = Path(args.results).expanduser()
    data = {}
    if args.mlflow:
        data["mlflow"] = {"tracking_uri": args.mlflow, "experiment": args.experiment or _run_name(out)}
    if args.wandb:
        data["wandb"] = {"mode": args.wandb, "project": args.wandb_project, "dir": args.wandb_dir or str(out)}
    if args.tensorboard:
        data["tensorboard"] = {"dir": args.tensorboard}
    try:
        if not data:
            raise ConfigError("unitta track: give a tracker: --mlflow URI, --wandb MODE or --tensorboard DIR")
        if not out.is_dir():
            raise ConfigError(f"unitta track: {out}: no such results folder")
        tracking = validate(Tracking, data, "unitta track")
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    runs, failed = folder_runs(out)
    if not runs:
        print(f"unitta track: {out} holds no finished cell with metrics ({failed} failed)", file=sys.stderr)
        return 2 if not failed else 0
    code = 0
    for tracker in make_trackers(tracking, out, _run_name(out)):
        start = time.perf_counter()
        try:
            with _bulk_timeout():
                logged, there = track_folder(tracker, runs, args.jobs if tracker.name == "mlflow" else 1, out)
        except (TrackerError, OSError) as exc:
            print(f"unitta track: {tracker.name}: {short_reason(exc)}; rerun the command to log the rest",
                  file=sys.stderr)
            code = 1
            continue
        write_tracking_record(out, {tracker.name: tracker.where()})
        print(f"{tracker.name}: {logged} cell(s) logged, {there} already there"
              + (f", {failed} failed cell(s) not logged" if failed else "")
              + f", in {time.perf_counter() - start:.1f} s")
    return code

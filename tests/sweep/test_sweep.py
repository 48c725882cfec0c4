"""The sweep driver on a real local Ray cluster: identical results to --local, resume, failures,
GPU pinning with fake GPUs, a worker killed mid-cell, the shared zero-copy dataset."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import polars as pl
import pytest

from unitta.cell import Cell
from unitta.evaluate import run_cell
from unitta.results import load_results
from unitta.run.capture import TASK_NAME
from unitta.sweep import run_sweep

from . import _procs
from .conftest import REFERENCE_SETTINGS, metric_rows, small_config

pytestmark = pytest.mark.slow


def test_run_cell_row(reference):
    row = reference.filter((pl.col("method") == "bn") & (pl.col("setting") == "nui1")).row(0, named=True)
    assert row["status"] == "ok" and row["error_text"] is None
    assert 0 <= row["error"] <= 100 and row["n_samples"] > 0
    assert sum(d["n"] for d in row["per_domain"]) == row["n_samples"]
    assert row["started_at"] <= row["finished_at"] and row["duration_s"] > 0
    # worker_pid: the process that built the reference, checked there (tests/sweep/conftest.py)
    assert row["worker_pid"] > 0 and row["num_threads"] == 1 and row["sweep_name"] == "small"
    assert row["git_commit"] is None or len(row["git_commit"]) >= 40


def test_run_cell_failure_is_a_row():
    row = run_cell(Cell(model="no_such_model", n_per_domain=200, S=5, num_threads=1))
    assert row["status"] == "failed" and row.get("error") is None
    assert "no_such_model" in row["error_text"] and "\n" not in row["error_text"]
    assert row["dataset"] == "fmnist-c" and row["setting"] == "i111" and row["model"] == "no_such_model"


def test_ray_sweep_equals_local_and_resumes(ray_cluster, reference, tmp_path):
    cfg = small_config(settings=REFERENCE_SETTINGS)
    outcome = run_sweep(cfg, tmp_path, progress=False)
    assert (outcome.n_ok, outcome.n_failed, outcome.n_skipped) == (8, 0, 0)
    df = load_results(tmp_path)
    assert metric_rows(df) == metric_rows(reference)  # Ray workers compute exactly what --local computes
    assert set(df["worker_pid"]) - {os.getpid()}  # ran in Ray workers
    assert all(n is not None for n in df["node_id"])
    for cid in df["cell_id"]:
        assert f"cell {cid}" in (tmp_path / "logs" / f"{cid}.log").read_text()
    assert pl.read_parquet(tmp_path / "results.parquet").height == 8
    mtimes = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "cells").iterdir()}
    again = run_sweep(cfg, tmp_path, progress=False)  # resume: nothing left to do
    assert (again.n_ok, again.n_failed, again.n_skipped) == (0, 0, 8)
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "cells").iterdir()} == mtimes


def test_fresh_never_deletes(ray_cluster, tmp_path):
    out = tmp_path / "sweep"
    cfg = small_config(methods=("test",), settings=("nui1",))
    run_sweep(cfg, out, local=True, progress=False)
    before = sorted(p.name for p in (out / "cells").iterdir())
    outcome = run_sweep(cfg, out, local=True, fresh=True, progress=False)
    assert outcome.out_dir != out and outcome.out_dir.name.startswith("sweep-")
    assert outcome.n_ok == 1 and sorted(p.name for p in (out / "cells").iterdir()) == before


def test_nan_and_failing_cells_do_not_stop_the_sweep(ray_cluster, tmp_path):
    cfg = small_config(methods=("test", {"tent": {"lr": 1.0e30}}), settings=("nui1",))
    outcome = run_sweep(cfg, tmp_path, progress=False)
    assert (outcome.n_ok, outcome.n_failed) == (1, 1)
    df = load_results(tmp_path)
    failed = df.filter(pl.col("status") == "failed").row(0, named=True)
    assert failed["method"] == "tent" and failed["error"] is None
    assert "non-finite" in failed["error_text"] or "not finite" in failed["error_text"]
    assert "Traceback" in (tmp_path / "logs" / f"{failed['cell_id']}.log").read_text()
    # a failed cell is run again on resume; the finished one is not
    again = run_sweep(cfg, tmp_path, progress=False)
    assert (again.n_ok, again.n_failed, again.n_skipped) == (0, 1, 1)


def _overlap(a, b) -> bool:
    return a["started_at"] < b["finished_at"] and b["started_at"] < a["finished_at"]


def test_fake_gpus_are_pinned_per_cell(ray_cluster, tmp_path):
    cfg = small_config(methods=("bn",), settings=("i1i1", "iuiu", "iunu", "nu1u"),
                       resources={"num_cpus": 1, "num_gpus": 1})
    run_sweep(cfg, tmp_path, progress=False)
    rows = load_results(tmp_path).to_dicts()
    assert [r["status"] for r in rows] == ["ok"] * 4
    assert {r["cuda_visible_devices"] for r in rows} <= {"0", "1"}
    pairs = [(a, b) for i, a in enumerate(rows) for b in rows[i + 1:] if _overlap(a, b)]
    assert pairs, "2 CPUs and 2 GPUs: some cells must have run at the same time"
    for a, b in pairs:  # cells that ran at the same time had different GPUs
        assert a["cuda_visible_devices"] != b["cuda_visible_devices"]


def _cell_workers() -> list[int]:
    """Ray workers of this test session's cluster (our descendants) running a sweep cell right now."""
    me = os.getpid()
    return [
        pid for pid in _procs.pids()
        if (cmd := _procs.cmdline(pid)) and cmd[0].startswith(f"ray::{TASK_NAME}") and me in _procs.ancestors(pid)
    ]


def test_worker_killed_mid_cell_is_retried(ray_cluster, tmp_path):
    cfg = small_config(methods=("bn",), settings=("i1iu",), max_retries=2)
    result = {}
    thread = threading.Thread(target=lambda: result.update(outcome=run_sweep(cfg, tmp_path, progress=False)))
    thread.start()
    killed = None
    deadline = time.monotonic() + 120
    while killed is None and thread.is_alive() and time.monotonic() < deadline:
        workers = _cell_workers()
        if workers:
            killed = workers[0]
            os.kill(killed, signal.SIGKILL)
        time.sleep(0.01)
    thread.join(timeout=180)
    assert killed is not None, "never saw the cell's worker"
    outcome = result["outcome"]
    assert (outcome.n_ok, outcome.n_failed) == (1, 0)
    row = load_results(tmp_path).row(0, named=True)
    assert row["status"] == "ok" and row["worker_pid"] != killed  # finished by a new worker


def test_dataset_is_shared_zero_copy(ray_cluster, tmp_path):
    """Concurrent tasks read the one object-store copy: read-only views, no per-task copy of the images."""
    from unitta.data import load_dataset

    ray = ray_cluster
    dataset = load_dataset("fmnist-c", n_per_domain=1000)  # 15,000 images, 46 MB
    ref = ray.put(dataset)
    barrier = str(tmp_path)

    @ray.remote(num_cpus=1)
    def probe(ds, barrier_dir: str, parties: int):
        def unique_memory_bytes() -> int:  # Private_Clean + Private_Dirty (the worker's own pages)
            lines = open("/proc/self/smaps_rollup").read().splitlines()
            return sum(int(x.split()[1]) * 1024 for x in lines if x.startswith(("Private_Clean:", "Private_Dirty:")))

        open(os.path.join(barrier_dir, str(os.getpid())), "w").close()
        deadline = time.monotonic() + 120
        while len(os.listdir(barrier_dir)) < parties and time.monotonic() < deadline:
            time.sleep(0.01)  # wait until every probe runs: the reads below happen at the same time
        before = unique_memory_bytes()
        total = int(ds.images.sum(dtype=np.int64))  # touch every byte
        grown = unique_memory_bytes() - before
        return ds.images.flags.writeable, ds.images.flags.owndata, grown, total, len(os.listdir(barrier_dir))

    results = ray.get([probe.remote(ref, barrier, 2), probe.remote(ref, barrier, 2)])
    assert len(os.listdir(barrier)) == 2  # two workers held the dataset at once
    for writeable, owndata, grown, total, parties in results:
        assert parties == 2
        assert not writeable and not owndata  # a view of the shared object store buffer
        # unique memory grows by far less than the 46 MB of images (shared pages are not the worker's own)
        assert grown < dataset.images.nbytes / 4, grown
        assert total == int(dataset.images.sum(dtype=np.int64))

"""Tracker settings checked before anything runs, and the documented time-outs kept (docs/tracking.md; issue 52
item 6): an MLflow URI no tracking store takes, an empty one, a W&B mode W&B does not have are one line, exit 2;
``unitta track`` against a server that accepts connections and never answers gives up after MLflow's request
time-out and one retry, not after the bulk logging's longer one."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest
import yaml

from unitta.cell import Cell
from unitta.run.executor import GridPlanner, RunOptions, execute_plan
from unitta.schema import RunConfig
from unitta.sweep import main as sweep_main
from unitta.track.command import main as track_main

SWEEP = {"name": "t", "datasets": ["fmnist-c"], "methods": ["bn"], "settings": ["i111"]}


@pytest.mark.parametrize("tracking, words", [
    ({"mlflow": {"tracking_uri": "ftp://x/y"}}, "tracking.mlflow.tracking_uri: 'ftp://x/y'"),
    ({"mlflow": {"tracking_uri": ""}}, "tracking.mlflow.tracking_uri: ''"),
    ({"mlflow": {"tracking_uri": "http://"}}, "tracking.mlflow.tracking_uri: 'http://'"),
    ({"wandb": {"mode": "bogus"}}, "tracking.wandb.mode: 'bogus' is not one of online, offline, disabled"),
])
def test_a_tracker_setting_no_tracker_takes_is_exit_2_at_dry_run(tracking, words, tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({**SWEEP, "tracking": tracking}))
    assert sweep_main([str(config), "--dry-run", "--output", str(tmp_path / "out"), "--no-preflight"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert words in line
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("finished")
    cell = Cell(method="test", setting="i111", n_per_domain=10, S=1, batch_size=20, corruptions=("fog", "snow"))
    execute_plan(RunConfig(name="finished"), out, lambda done: GridPlanner([cell], done),
                 RunOptions(local=True, progress=False))
    return out


def test_track_refuses_a_uri_no_tracking_store_takes(finished, capsys):
    assert track_main([str(finished), "--mlflow", "ftp://x/y"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "'ftp://x/y'" in line and "http://" in line
    assert track_main([str(finished), "--wandb", "bogus"]) == 2


def test_track_gives_up_on_a_server_that_never_answers_after_the_request_time_out(finished, monkeypatch, capsys):
    from unitta.track import mlflow_tracker

    assert mlflow_tracker._ENV_DEFAULTS["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "10"  # docs/tracking.md: 10 s + one retry
    monkeypatch.setitem(mlflow_tracker._ENV_DEFAULTS, "MLFLOW_HTTP_REQUEST_TIMEOUT", "2")  # the same, shorter
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_TIMEOUT", raising=False)
    port, close = _silent_server()
    start = time.perf_counter()
    try:
        assert track_main([str(finished), "--mlflow", f"http://127.0.0.1:{port}"]) == 1
    finally:
        close()
    took = time.perf_counter() - start
    assert 2 * 2 <= took < 2 * 2 + 8, took  # two tries of 2 s, MLflow's back-off; not two of 60 s
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"unitta track: mlflow: http://127.0.0.1:{port}")


def _silent_server():
    """A socket of 127.0.0.1 that accepts connections and never answers; (its port, close)."""
    held: list[socket.socket] = []
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)

    def accept() -> None:
        while True:
            try:
                held.append(listener.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()

    def close() -> None:
        listener.close()
        for conn in held:
            conn.close()

    return listener.getsockname()[1], close


def test_wandb_online_gives_up_on_a_host_that_never_answers(finished, monkeypatch, tmp_path):
    from unitta.track import wandb_tracker
    from unitta.track.command import folder_runs
    from unitta.track.tracker import TrackerError

    assert wandb_tracker.INIT_TIMEOUT_S == 30  # docs/tracking.md
    monkeypatch.setattr(wandb_tracker, "INIT_TIMEOUT_S", 3.0)  # the same, shorter
    port, close = _silent_server()
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    tracker = wandb_tracker.WandbTracker("unitta", "online", tmp_path)
    tracker.open()
    (run,), _ = folder_runs(finished)
    start = time.perf_counter()
    try:
        with pytest.raises(TrackerError):
            tracker.log(run)
    finally:
        close()
    assert time.perf_counter() - start < 3 + 10

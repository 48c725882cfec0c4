"""Sweeps fed to real trackers (docs/tracking.md): a real MLflow server on 127.0.0.1 with a SQLite backend (started
once for this module), W&B in offline mode (files under tmp, no network) and TensorBoard event files, all read back.

Cells are the sweep tests' small real cells (tests/sweep/conftest.py: embedded Fashion-MNIST-C, 200 images per
domain, S=5): a second or two each.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.free_ports import free_ports
from tests.sweep.conftest import SMALL, small_config
from tests.track.readers import read_tensorboard, read_tensorboard_hparams, read_wandb_run
from tests.track.servers import Gate, mlflow_server
from unitta.evaluate import adapt
from unitta.results import load_results
from unitta.results.tracking_record import read_tracking_record
from unitta.run import cell_progress
from unitta.sweep import main as sweep_main
from unitta.sweep import run_sweep
from unitta.track.cell_run import run_label
from unitta.track.command import main as track_main
from unitta.track.feed import TrackerFeed
from unitta.track.mlflow_tracker import MlflowTracker
from unitta.track.wandb_tracker import wandb_run_id, wandb_sweep_id

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with mlflow_server(tmp_path_factory.mktemp("mlflow")) as uri:
        yield uri


@pytest.fixture(autouse=True)
def _wandb_offline(tmp_path, monkeypatch):
    """W&B never reaches the network here: its files under tmp, no console capture, no prompts."""
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "wandb-home"))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb-cache"))
    monkeypatch.setenv("WANDB_SILENT", "true")


def _cell_runs(uri: str, experiment: str) -> list:
    """The cell runs of ``experiment`` (parents left out), as MLflow's client lists them."""
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return []
    return [r for r in client.search_runs([found.experiment_id], max_results=1000)
            if r.data.tags.get("unitta.role") == "cell"]


def _by_cell(runs: list) -> dict:
    ids = [r.data.tags["unitta.cell_id"] for r in runs]
    assert len(ids) == len(set(ids)), f"duplicate runs: {sorted(ids)}"
    return dict(zip(ids, runs))


@pytest.fixture(scope="module")
def tracked(server, tmp_path_factory):
    """A local sweep of 4 cells logged to MLflow, W&B (offline) and TensorBoard at once; each cell's error so far
    sent at every host check of its loop (every 4 batches of 64 images here, 16 in a real run: a few live values
    per 750-image i111 cell, the last one for the 83-image nui1 cells)."""
    tmp = tmp_path_factory.mktemp("tracked")
    tracking = {"mlflow": {"tracking_uri": server, "experiment": "local"},
                "wandb": {"mode": "offline", "dir": str(tmp / "wb")}, "tensorboard": {"dir": str(tmp / "tb")}}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("WANDB_DIR", str(tmp / "wandb-home"))
        mp.setenv("WANDB_SILENT", "true")
        mp.setattr(cell_progress, "SEND_EVERY_S", 0.0)
        mp.setattr(adapt, "_CHECK_EVERY", 4)
        outcome = run_sweep(small_config("tracked", tracking=tracking), tmp / "out", local=True, progress=False)
    assert (outcome.n_ok, outcome.n_failed) == (4, 0)
    return tmp, load_results(tmp / "out")


def test_every_cell_is_one_mlflow_run_with_the_parquet_values(server, tracked):
    from mlflow import MlflowClient

    _, df = tracked
    runs = _by_cell(_cell_runs(server, "local"))
    assert set(runs) == set(df["cell_id"])
    client = MlflowClient(server)
    parents = {r.data.tags["mlflow.parentRunId"] for r in runs.values()}
    assert len(parents) == 1
    parent = client.get_run(parents.pop())
    assert parent.data.tags["unitta.role"] == "sweep" and parent.data.tags["unitta.sweep"] == "tracked"
    for row in df.iter_rows(named=True):
        run = runs[row["cell_id"]]
        assert run.info.status == "FINISHED"
        metrics, params, tags = run.data.metrics, run.data.params, run.data.tags
        for column in ("error", "balanced_error", "ece", "nll", "n_samples", "images_per_s"):
            assert metrics[column] == row[column], column
        assert (params["method"], params["setting"], params["seed"]) == (row["method"], row["setting"], "425")
        assert tags["unitta.git_commit"] == row["git_commit"] and tags["unitta.model_weights"] == row["model_weights"]
        assert tags["unitta.sweep"] == "tracked"
        curve = client.get_metric_history(run.info.run_id, "error_curve")
        assert [(m.step, m.value) for m in sorted(curve, key=lambda m: m.step)] == [
            (i, v) for i, v in enumerate(row["error_curve"]) if v is not None]
        for entry in row["per_domain"]:
            assert metrics[f"domain_error/{entry['name']}"] == entry["error"]
    where = read_tracking_record(tracked[0] / "out")["mlflow"]
    assert where["url"] == f"{server}/#/experiments/{where['experiment_id']}"


def test_wandb_offline_and_tensorboard_hold_the_same_cells(tracked):
    tmp, df = tracked
    for row in df.iter_rows(named=True):
        [path] = (tmp / "wb" / "wandb").glob(f"offline-run-*-{wandb_run_id(row['cell_id'])}/*.wandb")
        run = read_wandb_run(path)
        assert (run["id"], run["group"]) == (wandb_run_id(row["cell_id"]), "tracked")
        assert run["summary"]["error"] == row["error"]
        assert run["config"]["unitta.cell_id"] == row["cell_id"] and run["config"]["method"] == row["method"]
        curve = [(h["_step"], h["error_curve"]) for h in run["history"] if "error_curve" in h]
        assert curve == [(i, v) for i, v in enumerate(row["error_curve"]) if v is not None]

        scalars = read_tensorboard(tmp / "tb" / "tracked" / row["cell_id"])
        assert scalars["error"][0][1] == pytest.approx(row["error"], rel=1e-6)  # event files hold float32
        assert [s for s, _ in scalars["error_curve"]] == list(range(len(row["error_curve"])))
        name = row["per_domain"][0]["name"]
        assert scalars[f"domain_error/{name}"][0][1] == pytest.approx(row["per_domain"][0]["error"], rel=1e-6)
        hparams, declared = read_tensorboard_hparams(tmp / "tb" / "tracked" / row["cell_id"])
        assert hparams["seed"] == 425 and hparams["batch_size"] == row["batch_size"]  # numbers, not strings
        assert hparams["method"] == row["method"] and {"error", "balanced_error", "ece", "nll"} <= declared
    ids = set(df["cell_id"])
    assert set((tmp / "tb" / "unitta-logged-cells.txt").read_text().split()) == ids
    assert set((tmp / "wb" / "wandb" / "unitta-logged-cells-unitta.txt").read_text().split()) == ids


def test_a_ray_sweep_with_the_track_flag(server, ray_cluster, tmp_path):
    cfg = small_config("on-ray", methods=("bn",), settings=("i111", "nui1"))
    outcome = run_sweep(cfg, tmp_path / "out", progress=False, track=[f"mlflow={server}"])
    assert outcome.n_ok == 2
    df = load_results(tmp_path / "out")
    runs = _by_cell(_cell_runs(server, "on-ray"))  # the experiment is the sweep's name
    assert {k: r.data.metrics["error"] for k, r in runs.items()} == dict(zip(df["cell_id"], df["error"]))


def test_a_server_gone_mid_sweep_loses_no_row_and_track_completes_the_runs(server, tmp_path, capsys):
    # 4 requests open the tracker, 4 log the first cell; the gate closes during the second cell's run
    # (5 with the parent run, opened when the sweep starts; 4 with the cell's one live value, at its end)
    gate = Gate(server, stop_after=10)
    cfg = small_config("gone", tracking={"mlflow": {"tracking_uri": gate.uri, "experiment": "gone"},
                                         "system_metrics": False})
    try:
        with pytest.MonkeyPatch.context() as mp:  # one live value a cell, its last: a fixed count of requests
            mp.setattr(cell_progress, "SEND_EVERY_S", 1e9)
            outcome = run_sweep(cfg, tmp_path / "out", local=True, progress=False)
    finally:
        gate.close()
    assert (outcome.n_ok, outcome.n_failed) == (4, 0)
    df = load_results(tmp_path / "out")
    assert df.height == 4 and set(df["status"]) == {"ok"}
    err = capsys.readouterr().err
    assert sum("tracking: mlflow:" in line for line in err.splitlines()) == 1, err
    assert f"unitta track {tmp_path / 'out'} --mlflow {gate.uri} --experiment gone" in err
    before = _cell_runs(server, "gone")
    assert sum(r.info.status == "FINISHED" for r in before) == 1 and len(before) == 2  # one cut off mid-run

    assert track_main([str(tmp_path / "out"), "--mlflow", server, "--experiment", "gone"]) == 0
    assert "3 cell(s) logged, 1 already there" in capsys.readouterr().out
    runs = _by_cell(_cell_runs(server, "gone"))
    assert {r.info.status for r in runs.values()} == {"FINISHED"}
    assert {k: r.data.metrics["error"] for k, r in runs.items()} == dict(zip(df["cell_id"], df["error"]))

    assert track_main([str(tmp_path / "out"), "--mlflow", server, "--experiment", "gone"]) == 0
    assert "0 cell(s) logged, 4 already there" in capsys.readouterr().out
    assert len(_by_cell(_cell_runs(server, "gone"))) == 4


def test_a_slow_server_never_blocks_the_driver(server, tracked, tmp_path):
    _, df = tracked
    rows = df.to_dicts() * 3
    gate = Gate(server, delay_s=1.0)
    lines: list[str] = []
    try:
        # no system metrics: the feed leaves a tracker it gave up on running, and its monitor would warn in
        # whatever test this worker runs next, once the gate is closed
        feed = TrackerFeed([MlflowTracker(gate.uri, "slow", system_metrics=False)], tmp_path, "slow", warn=lines.append,
                           capacity=2, close_wait_s=1.0)
        start = time.perf_counter()
        for row in rows:
            feed.add(row)
        assert time.perf_counter() - start < 0.5
        feed.close()
        assert time.perf_counter() - start < 5
    finally:
        gate.close()
    assert any("rows behind" in line for line in lines)
    assert any(line.startswith("tracking: mlflow holds 0 new cell(s)") for line in lines), lines


def test_bad_trackers_are_one_line_each_and_the_sweep_writes_parquet(tmp_path, capsys):
    import yaml

    config = tmp_path / "bad.yaml"
    data = {"name": "bad", "datasets": ["fmnist-c"], "methods": ["bn"], "settings": ["i111", "nui1"], **SMALL}
    data["tracking"] = {"mlflow": {"tracking_uri": f"http://127.0.0.1:{free_ports(1)[0]}"}}  # nothing listens there
    config.write_text(yaml.safe_dump(data))
    out = tmp_path / "out"
    code = sweep_main([str(config), "--local", "--output", str(out), "--no-progress", "--no-preflight",
                       "--track", "comet=http://127.0.0.1:1"])
    assert code == 0
    assert load_results(out).height == 2
    err = capsys.readouterr().err.splitlines()
    assert len([line for line in err if "unknown tracker 'comet'" in line]) == 1
    assert len([line for line in err if line.startswith("tracking: mlflow: http://127.0.0.1")]) == 1, err

    assert track_main([str(out), "--mlflow", f"http://127.0.0.1:{free_ports(1)[0]}"]) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("unitta track: mlflow: http://127.0.0.1:")


def test_the_report_links_the_tracked_runs(server, tracked, tmp_path):
    from analysis.report import main as report_main

    out = tracked[0] / "out"
    assert report_main([str(out), "--out", str(tmp_path)]) == 0
    page = (tmp_path / "report.html").read_text()
    where = read_tracking_record(out)["mlflow"]
    parent = where["parent_runs"]["tracked"]
    assert f'<a href="{server}/#/experiments/{where["experiment_id"]}/runs/{parent}">tracked</a>' in page
    assert f"tensorboard --logdir {tracked[0] / 'tb'}" in page and "wandb sync" in page


def _parent_run(uri: str, experiment: str, sweep: str):
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    found = client.get_experiment_by_name(experiment)
    [parent] = [r for r in client.search_runs([found.experiment_id], max_results=1000)
                if r.data.tags.get("unitta.role") == "sweep" and r.data.tags.get("unitta.sweep") == sweep]
    return client, parent


def _summary(df) -> dict[str, float]:
    """The summary table computed here from the rows: mean error over seeds per method x setting, per method."""
    import polars as pl

    cells = df.group_by("method", "setting").agg(pl.col("error").mean())
    out = {f"error/{m}/{s}": e for m, s, e in cells.iter_rows()}
    for method in set(cells["method"]):
        out[f"error/{method}/mean"] = float(cells.filter(pl.col("method") == method)["error"].mean())
    return out


def test_the_parent_run_holds_the_config_and_the_summary_table(server, tracked):
    """MLflow: config as dotted parameters and as the YAML artifact, the summary as metrics; W&B's sweep run and
    TensorBoard's _run folder the same."""
    import yaml

    tmp, df = tracked
    client, parent = _parent_run(server, "local", "tracked")
    config = yaml.safe_load((tmp / "out" / "sweep.yaml").read_text())
    assert parent.data.params["name"] == "tracked"
    assert parent.data.params["methods"] == json.dumps(config["methods"])
    assert parent.data.params["resources.num_cpus"] == json.dumps(config["resources"]["num_cpus"])
    assert parent.info.status == "FINISHED"
    assert "sweep.yaml" in {a.path for a in client.list_artifacts(parent.info.run_id)}
    summary = _summary(df)
    assert summary and {k: parent.data.metrics[k] for k in summary} == pytest.approx(summary)

    # the sweep's own offline run is the first; the analysis scripts attaching artifacts resume it in later folders
    path = sorted((tmp / "wb" / "wandb").glob(f"offline-run-*-{wandb_sweep_id('tracked')}/*.wandb"))[0]
    run = read_wandb_run(path)
    assert run["group"] == "tracked" and run["config"]["methods"] == json.dumps(config["methods"])
    assert {k: run["summary"][k] for k in summary} == pytest.approx(summary)
    assert (path.parent / "files" / "sweep.yaml").is_file()

    scalars = read_tensorboard(tmp / "tb" / "tracked" / "_run")
    assert {k: scalars[k][0][1] for k in summary} == pytest.approx(summary, rel=1e-6)
    assert (tmp / "tb" / "tracked" / "_run" / "sweep.yaml").read_text() == (tmp / "out" / "sweep.yaml").read_text()


def test_a_running_cell_logs_its_error_so_far(server, tracked):
    """Live values at the loop's host checks (step: images done), increasing, the last one the row's error; the
    same curve in W&B's run history and the cell's TensorBoard folder, beside the final row's values."""
    from mlflow import MlflowClient

    tmp, df = tracked
    client = MlflowClient(server)
    runs = _by_cell(_cell_runs(server, "local"))
    for row in df.iter_rows(named=True):
        history = sorted(client.get_metric_history(runs[row["cell_id"]].info.run_id, "error_so_far"),
                         key=lambda m: m.step)
        steps = [m.step for m in history]
        assert steps == sorted(set(steps)) and steps[-1] == row["n_samples"], steps
        assert len(steps) == -(-row["n_samples"] // (4 * 64)), steps  # every 4 batches and the last
        assert history[-1].value == pytest.approx(row["error"], abs=1e-9)
        assert all(0 <= m.value <= 100 for m in history)
        assert runs[row["cell_id"]].info.run_name == run_label(row)

        [path] = (tmp / "wb" / "wandb").glob(f"offline-run-*-{wandb_run_id(row['cell_id'])}/*.wandb")
        live = [(h["images"], h["error_so_far"]) for h in read_wandb_run(path)["history"] if "error_so_far" in h]
        assert live == [(m.step, m.value) for m in history]

        scalars = read_tensorboard(tmp / "tb" / "tracked" / row["cell_id"])
        assert [s for s, _ in scalars["error_so_far"]] == steps and "error" in scalars


def test_heatmaps_on_a_tracked_folder_become_artifacts_of_its_parent_run_once(server, tracked, capsys):
    """analysis/heatmaps.py twice on the tracked folder: the files under analysis/ in MLflow (overwritten, not
    duplicated), the W&B sweep run's files and TensorBoard's <sweep>/_run/analysis."""
    from analysis.heatmaps import main as heatmaps_main

    tmp, _ = tracked
    for _ in range(2):
        assert heatmaps_main([str(tmp / "out")]) == 0
    assert "tracking:" not in capsys.readouterr().err
    written = sorted(p.name for p in (tmp / "out" / "analysis").iterdir() if p.is_file())
    assert any(name.startswith("heatmap_") and name.endswith(".png") for name in written)
    client, parent = _parent_run(server, "local", "tracked")
    artifacts = [a.path for a in client.list_artifacts(parent.info.run_id, "analysis")]
    assert sorted(artifacts) == [f"analysis/{name}" for name in written]
    assert (tmp / "tb" / "tracked" / "_run" / "analysis" / written[0]).is_file()
    saved = list((tmp / "wb" / "wandb").glob(f"offline-run-*-{wandb_sweep_id('tracked')}/files/analysis/*"))
    assert {p.name for p in saved} == set(written)


def test_an_unreachable_tracker_is_one_warning_for_the_analysis(tmp_path):
    from unitta.results.tracking_record import write_tracking_record
    from unitta.track.attach import attach_to_trackers

    (tmp_path / "sweeps").mkdir()
    (tmp_path / "sweeps" / "s.json").write_text("[]")
    write_tracking_record(tmp_path, {"mlflow": {"tracking_uri": f"http://127.0.0.1:{free_ports(1)[0]}", "experiment": "x"}})
    (tmp_path / "a.md").write_text("a")
    lines: list[str] = []
    assert attach_to_trackers([tmp_path], [tmp_path / "a.md"], "analysis", warn=lines.append) == 0
    assert len(lines) == 1 and lines[0].startswith("tracking: mlflow:") and "not attached" in lines[0]

"""Trust at scale: no stale results, no lost rows, a corrupt cell file never blocks a resume, no silent
hangs, everything knowable checked before the first cell, and the smaller edges (docs/results.md)."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest
import yaml

from tests.sweep.conftest import SMALL, small_config
from unitta.cell import Cell
from unitta.methods import method_class
from unitta.results import QUARANTINE_DIR, cells_dir, consolidate, load_results, write_cell_result
from unitta.schema import ConfigError
from unitta.sweep import main, run_sweep
from unitta.sweep.config import load_config, parse_config

ROOT = Path(__file__).resolve().parents[2]
BASE = {"name": "t", "datasets": ["fmnist-c"], "methods": ["test"], "settings": ["i111"], **SMALL}


def _write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


# ---------------------------------------------------------------------- 1. stale results
def test_identity_covers_resolved_hyper_parameters_and_method_version(monkeypatch):
    cell = Cell(method="tent")
    # the same overrides resolve differently on another dataset preset or profile: other ids
    assert Cell(method="tent", dataset="cifar10-c").method_config != Cell(method="tent", dataset="imagenet-c").method_config
    assert cell.identity()["method_config"]["lr"] == method_class("tent").Config().lr
    before = cell.cell_id()
    assert Cell(method="tent", method_kwargs={"lr": cell.method_config["lr"]}).method_config == cell.method_config
    monkeypatch.setattr(method_class("tent"), "version", method_class("tent").version + 1)
    assert Cell(method="tent").cell_id() != before  # a bumped method version is another cell


def test_a_changed_default_reruns_the_cell_and_rows_record_the_config(tmp_path, monkeypatch):
    cfg = small_config(methods=["test"], settings=["i111"])
    out = tmp_path / "out"
    run_sweep(cfg, out, local=True, progress=False)
    row = load_results(out).row(0, named=True)
    assert json.loads(row["method_config"]) == cfg.cells()[0].method_config
    assert row["method_version"] == method_class("test").version and row["profile"] == "default"
    monkeypatch.setattr(method_class("test"), "version", method_class("test").version + 1)
    again = run_sweep(small_config(methods=["test"], settings=["i111"]), out, local=True, progress=False)
    assert (again.n_skipped, again.n_ok) == (0, 1)  # the old row is not reused


# ---------------------------------------------------------------------- 2. lost rows
def test_rows_only_in_results_parquet_survive_another_config(tmp_path):
    out = tmp_path / "out"
    run_sweep(small_config(methods=["test", "bn"], settings=["i111", "nui1"]), out, local=True, progress=False)
    for path in cells_dir(out).glob("*.parquet"):  # a folder holding only results.parquet
        path.unlink()
    assert load_results(out).height == 4
    run_sweep(small_config(methods=["test"], settings=["i1i1"]), out, local=True, progress=False)
    df = pl.read_parquet(out / "results.parquet")
    assert df.height == 5 and set(df["setting"]) == {"i111", "nui1", "i1i1"}
    # and a rerun of the first config finds its 4 cells done
    again = run_sweep(small_config(methods=["test", "bn"], settings=["i111", "nui1"]), out, local=True, progress=False)
    assert again.n_skipped == 4


# ---------------------------------------------------------------------- 3. corrupt cell files
def test_a_corrupt_cell_file_is_moved_aside_and_the_cell_rerun(tmp_path, capsys):
    cfg = small_config(methods=["test"], settings=["i111", "nui1"])
    out = tmp_path / "out"
    run_sweep(cfg, out, local=True, progress=False)
    victim = cells_dir(out) / f"{cfg.cells()[0].cell_id()}.parquet"
    victim.write_bytes(victim.read_bytes()[:100])  # truncated
    foreign = cells_dir(out) / "not_a_cell.parquet"
    pl.DataFrame({"x": [1]}).write_parquet(foreign)
    capsys.readouterr()
    assert len(load_results(out)) == 2  # a reader skips both files (its row is still in results.parquet)
    assert victim.exists() and "skipping unreadable cell file" in capsys.readouterr().err  # left where it is
    outcome = run_sweep(cfg, out, local=True, progress=False)
    err = capsys.readouterr().err
    assert (outcome.n_ok, outcome.n_skipped) == (1, 1)
    assert "moved to" in err and len([ln for ln in err.splitlines() if "unreadable" in ln]) == 2
    assert (out / QUARANTINE_DIR / victim.name).exists() and victim.exists()
    assert load_results(out).height == 2


# ---------------------------------------------------------------------- 5. no silent hangs
def test_unreachable_address_fails_within_a_minute(tmp_path, capfd):
    """``main`` in this process (capfd: everything written to file descriptors 1 and 2, Ray's C++ logs too);
    whether the session's Ray already runs here or not, an unreachable address is one line."""
    path = _write(tmp_path / "c.yaml", BASE)
    start = time.monotonic()
    code = main([str(path), "--output", str(tmp_path / "o"), "--address", "127.0.0.1:1", "--no-preflight"])
    assert code == 2 and time.monotonic() - start < 60
    lines = capfd.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "cannot reach the Ray cluster at " in lines[0] and ":1 within" in lines[0]


def test_num_cpus_zero_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([str(_write(tmp_path / "c.yaml", BASE)), "--num-cpus", "0"])
    assert exit_.value.code == 2 and "must be >= 1" in capsys.readouterr().err


@pytest.mark.slow
def test_cells_larger_than_any_node_fail_at_start(ray_cluster, tmp_path):
    from unitta.run.ray_cluster import ClusterError, check_fits

    start = time.monotonic()
    with pytest.raises(ClusterError, match="asks for 8 CPU and 0 GPU but no node"):
        check_fits(ray_cluster, 8, 0)
    with pytest.raises(ClusterError, match="asks for 1 CPU and 3 GPU"):
        check_fits(ray_cluster, 1, 3)
    check_fits(ray_cluster, 2, 1)  # fits: returns
    with pytest.raises(ClusterError):
        check_fits(ray_cluster, 8, 0, wait_s=1.0, say=lambda text: None)  # bounded wait, then the same error
    assert time.monotonic() - start < 30
    cfg = small_config(resources={"num_cpus": 8, "num_gpus": 0})
    with pytest.raises(ClusterError):
        run_sweep(cfg, tmp_path / "o", progress=False)


# ---------------------------------------------------------------------- 6. checked before the first cell
@pytest.mark.parametrize(
    "change, expected",
    [
        ({"methods": [{"unitta": {"eta": 2.0}}]}, "eta"),
        ({"factors": {"domain_alpha": 1.5}}, "domain_alpha"),
        ({"factors": {"class_beta": 0.5}}, "class_beta"),
        ({"n_per_domain": 15}, "n_per_domain: 15 is not a multiple"),
        ({"datasets": ["cifar10-c"], "data_dir": "/nonexistent", "n_per_domain": None}, "CIFAR-10-C lacks"),
        ({"datasets": ["cifar10-c"], "models": {"cifar10-c": "Nope"}, "n_per_domain": None}, "unknown model 'Nope'"),
        ({"device": "cuda"}, "resources.num_gpus is 0"),
    ],
)
def test_problems_are_found_before_any_cell_runs(tmp_path, change, expected):
    data = {**BASE, **change}
    path = _write(tmp_path / "c.yaml", {k: v for k, v in data.items() if v is not None})
    out = tmp_path / "out"
    assert main([str(path), "--output", str(out), "--no-progress"]) == 2
    assert not out.exists()


def test_preflight_lists_every_problem_one_line_each(tmp_path, capsys):
    data = {**BASE, "datasets": ["cifar10-c"], "data_dir": str(tmp_path / "none"), "checkpoint_dir": str(tmp_path),
            "factors": {"domain_alpha": 0.01}}
    path = _write(tmp_path / "c.yaml", {k: v for k, v in data.items() if k != "n_per_domain"})
    assert main([str(path), "--output", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("error: 3 problem(s)")
    assert any("CIFAR-10-C lacks" in line for line in err) and any("no checkpoint" in line for line in err)
    assert any("domain_alpha" in line or "alpha" in line for line in err[1:])


def test_dry_run_lists_the_cells_and_writes_nothing(tmp_path, capsys):
    path = _write(tmp_path / "c.yaml", {**BASE, "methods": ["test", "bn"], "settings": ["i111", "nui1"]})
    out = tmp_path / "out"
    assert main([str(path), "--output", str(out), "--dry-run"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("t: 4 cells, 0 already done") and len(printed) == 5
    assert all(line.strip().startswith("todo") for line in printed[1:])
    assert not out.exists()


# ---------------------------------------------------------------------- 7. smaller edges
def test_yaml_exponent_floats_and_names(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("name: t\ndatasets: [fmnist-c]\nmethods: [{tent: {lr: 1e-3}}]\nsettings: [i111]\n")
    assert load_config(path).cells()[0].method_config["lr"] == 1e-3
    for bad in ("..", ".", "../x", "a/b", ""):
        with pytest.raises(ConfigError, match="name: must be one word"):
            parse_config({**BASE, "name": bad})
    from unitta.tune.config import parse_tune_config

    with pytest.raises(ConfigError, match="name: must be one word"):
        parse_tune_config({"name": "../../x", "cell": {}, "methods": ["bn"], "space": {"domain_beta": [1.0]}})


def test_a_second_sweep_into_the_same_folder_is_refused_naming_the_first(tmp_path):
    from unitta.run.outdir import OutputBusy, OutputLock

    out = tmp_path / "out"
    with OutputLock(out):
        tmp = cells_dir(out)
        tmp.mkdir(parents=True)
        live = tmp / ".live.tmp"
        live.write_text("a live writer's temp file")
        with pytest.raises(OutputBusy, match=f"pid {os.getpid()}"):
            run_sweep(small_config(), out, local=True, progress=False)
        assert live.exists()  # never deleted while its writer holds the lock
    run_sweep(small_config(methods=["test"], settings=["i111"]), out, local=True, progress=False)
    assert not live.exists()  # a dead writer's leftovers go


def test_result_files_get_the_umask_mode(tmp_path):
    old = os.umask(0o022)
    try:
        cell = Cell()
        path = write_cell_result(tmp_path, {**cell.coordinates(), "status": "ok"})
        assert stat.S_IMODE(path.stat().st_mode) == 0o644
        assert stat.S_IMODE(consolidate(tmp_path).stat().st_mode) == 0o644
    finally:
        os.umask(old)


@pytest.mark.slow
def test_sigterm_stops_cleanly_with_exit_143_and_resumes(tmp_path):
    path = _write(tmp_path / "c.yaml", {**BASE, "methods": ["test", "bn", "tent"], "settings": ["i111", "nui1", "i1i1"]})
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "unitta.sweep", str(path), "--output", str(out), "--local",
                             "--no-progress"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list(cells_dir(out).glob("*.parquet")):
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert "terminated: finished cells are saved; rerun the same command to resume" in err
    assert main([str(path), "--output", str(out), "--local", "--no-progress"]) == 0
    assert load_results(out).height == 9


def test_exit_codes_distinguish_failed_cells_from_a_crash(tmp_path, monkeypatch):
    path = _write(tmp_path / "c.yaml", BASE)
    import unitta.sweep as sweep

    def boom(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(sweep, "run_sweep", boom)
    assert main([str(path), "--output", str(tmp_path / "o"), "--local"]) == 3

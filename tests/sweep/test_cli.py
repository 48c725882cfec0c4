"""`python -m unitta.sweep` as a user runs it: a real SIGKILL of the driver then a rerun, and
`ray job submit` against a real `ray start --head` on 127.0.0.1."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml

from unitta.results import load_results
from unitta.sweep import main

from ..free_ports import free_ports
from . import _procs
from .conftest import REFERENCE_SETTINGS, SMALL, metric_rows

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_USAGE_STATS_ENABLED="0", OMP_NUM_THREADS="1", **extra)
    return env


def _write_config(path: Path, name: str, settings=REFERENCE_SETTINGS) -> Path:
    data = {"name": name, "datasets": ["fmnist-c"], "methods": ["test", "bn"], "settings": list(settings), **SMALL,
            "resources": {"num_cpus": 1}}
    path.write_text(yaml.safe_dump(data))
    return path


def test_kill_driver_then_rerun_gives_each_cell_once_with_identical_values(reference, ray_cluster, tmp_path, capsys):
    """The killed driver is a real process; the rerun is ``main`` with the same arguments in this process, on the
    session's Ray (the process boundary matters for the kill, not for the resume)."""
    config = _write_config(tmp_path / "kill.yaml", "kill")
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "unitta.sweep", str(config), "--output", str(out), "--address", "local",
           "--num-cpus", "2", "--no-progress"]
    log = open(tmp_path / "driver1.log", "wb")
    driver = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=log, stderr=subprocess.STDOUT)
    cells = out / "cells"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and driver.poll() is None:
        if cells.is_dir() and any(p.suffix == ".parquet" for p in cells.iterdir()):
            break
        time.sleep(0.05)
    assert driver.poll() is None, (tmp_path / "driver1.log").read_text()
    family = _procs.descendants(driver.pid)
    driver.send_signal(signal.SIGKILL)  # a real kill: no cleanup, no atexit
    driver.wait()
    log.close()
    done_before = sorted(p.name for p in cells.glob("*.parquet"))
    assert 1 <= len(done_before) < 8, done_before
    # Ray's GCS, raylet and workers share the driver's fate (they die with it). Ray 2.60's dashboard
    # and runtime-env agents outlive a SIGKILLed driver, so they are stopped here.
    names = {pid: (_procs.cmdline(pid) or ["?"])[0] for pid in family}
    lingering = _procs.stop(family, timeout=5)
    assert {names[p] for p in lingering} <= {"ray::DashboardAgent", "ray::RuntimeEnvAgent"}, [names[p] for p in lingering]

    capsys.readouterr()
    code = main(cmd[3:])
    rerun = capsys.readouterr()
    assert code == 0, rerun.err[-3000:]
    assert f"resume: {len(done_before)} of 8 cells already done" in rerun.err
    files = sorted(p.name for p in cells.iterdir())
    assert len(files) == 8 and all(f.endswith(".parquet") for f in files)  # each cell exactly once, no temp files
    df = load_results(out)
    assert df["cell_id"].n_unique() == 8 and df.height == 8
    assert metric_rows(df) == metric_rows(reference)  # identical to an uninterrupted run
    for name in done_before:  # finished cells were not recomputed
        assert (cells / name).exists()
    assert "method" in rerun.out and "i1i1" in rerun.out  # the summary table


def _ours(temp_dir: str) -> list[int]:
    """The processes of the Ray node(s) started with ``--temp-dir=temp_dir``: those whose command lines name it, and
    their descendants (the raylet's agents rename themselves, ``ray::DashboardAgent``; one left behind by its
    stopped raylet spins at 100 % CPU for a minute or more)."""
    named = [pid for pid in _procs.pids() if temp_dir in " ".join(_procs.cmdline(pid))]
    return sorted({*named, *(d for pid in named for d in _procs.descendants(pid))})


@pytest.fixture
def ray_head(tmp_path):
    """A real `ray start --head` on 127.0.0.1 with its own ports and temp dir; stopped in teardown."""
    ray_bin = Path(sys.executable).with_name("ray")
    temp_dir = tempfile.mkdtemp(prefix="ut-", dir="/tmp")  # short: Ray's socket paths have a length limit
    port, dashboard, client, agent, agent_grpc, metrics, runtime_env = free_ports(7)
    # Ray 2.60's token authentication (spec/environment.md), with a token of our own: `ray start`
    # refuses to start in token mode without one, and ~/.ray/auth_token may not exist yet
    token = Path(temp_dir) / "auth_token"
    token.write_text(secrets.token_hex(32))
    env = _env(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token))
    cmd = [
        str(ray_bin), "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}",
        "--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard}",
        f"--ray-client-server-port={client}", f"--dashboard-agent-listen-port={agent}",
        f"--dashboard-agent-grpc-port={agent_grpc}", f"--metrics-export-port={metrics}",
        f"--runtime-env-agent-port={runtime_env}",
        "--num-cpus=2", "--num-gpus=0", f"--temp-dir={temp_dir}", "--disable-usage-stats",
    ]
    started = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    ours = _ours(temp_dir)
    try:
        assert started.returncode == 0, started.stderr[-3000:]
        yield {"address": f"http://127.0.0.1:{dashboard}", "env": env, "ray": str(ray_bin)}
    finally:
        # never `ray stop`: it would stop every Ray cluster on this machine, not only ours
        procs = sorted(set(ours + _ours(temp_dir)))
        for pid in procs:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        _procs.stop(procs, timeout=3)
        shutil.rmtree(temp_dir, ignore_errors=True)


def test_ray_job_submit(ray_head, tmp_path):
    # token authentication is really on: the jobs CLI without the token is refused
    anonymous = subprocess.run([ray_head["ray"], "job", "list", "--address", ray_head["address"]],
                               env=_env(RAY_AUTH_MODE="disabled"), capture_output=True, text=True, timeout=120)
    assert anonymous.returncode != 0
    assert "authenticat" in (anonymous.stdout + anonymous.stderr).lower(), anonymous.stderr[-2000:]

    config = _write_config(tmp_path / "job.yaml", "job", settings=("nui1",))
    out = tmp_path / "job_out"
    cmd = [
        ray_head["ray"], "job", "submit", "--address", ray_head["address"], "--",
        sys.executable, "-m", "unitta.sweep", str(config), "--output", str(out), "--no-progress",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=ray_head["env"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert "succeeded" in proc.stdout + proc.stderr
    df = load_results(out)
    assert df.height == 2 and set(df["status"]) == {"ok"}
    assert set(df["hostname"]) == {socket.gethostname()} and all(df["node_id"])
    assert (out / "results.parquet").is_file()

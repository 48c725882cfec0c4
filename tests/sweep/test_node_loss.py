"""A sweep on a real two-node Ray cluster on 127.0.0.1 (`ray start --head` + `ray start --address`, each with
its own ports and temp dir): a driver restart through `ray job submit`, and the loss of a node mid-sweep.

A cluster is several machines and machines die: when the second node's raylet is SIGKILLed while it runs
cells, Ray reruns them on the head (the tasks' ``max_retries``), every cell ends up once with the values of an
uninterrupted run, and the driver says so in a line instead of printing the dead raylet's logs.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
import yaml

from unitta.results import load_results

from ..free_ports import free_ports
from . import _procs
from .conftest import metric_rows
from .test_cli import ROOT, _env, _ours, _write_config

pytestmark = pytest.mark.slow
CELL_TASK = "ray::unitta_cell"  # the process title of a Ray worker running a cell (unitta.sweep.TASK_NAME)


def _start(cmd: list[str], env: dict[str, str]) -> str:
    """Run one `ray start`; '' if it worked, else the end of what it printed."""
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    return "" if proc.returncode == 0 else f"{' '.join(cmd[:3])}: {(proc.stdout + proc.stderr)[-3000:]}"


@pytest.fixture
def two_nodes(request):
    """A head with 1 CPU and a second node with 2, so that cells of 1 CPU land on both and cells of 2 CPUs run one
    at a time on the second node (the first job's: its stop then lands before its 8 cells are done); every process
    stopped in teardown.

    ``state["reference"]``: conftest's uninterrupted run of the same cells.

    Never `ray stop`: it stops every Ray on this machine, other tests' included. Ours are the processes whose
    command line names our temp dir, their descendants (workers, job drivers), and the workers of the node the
    test kills (``state["orphans"]``: a dead raylet's workers are no longer its descendants).
    """
    ray_bin = str(Path(sys.executable).with_name("ray"))
    base = tempfile.mkdtemp(prefix="ut-nl-", dir="/tmp")  # short: Ray's socket paths have a length limit
    token = Path(base) / "auth_token"  # Ray 2.60's token authentication, with a token of our own
    token.write_text(secrets.token_hex(32))
    # the GCS declares a silent node dead after 5 missed health checks: 1 s apart instead of 3 s, to keep the
    # test short (a live raylet still has each check's 10 s timeout to answer)
    env = _env(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token), RAY_health_check_period_ms="1000")
    ports = iter(free_ports(14))  # all distinct: one at a time could hand a port out twice
    port, dashboard, node_manager = next(ports), next(ports), next(ports)

    def common() -> list[str]:  # each node its own agent ports: two nodes share this machine
        return ["--node-ip-address=127.0.0.1", "--num-gpus=0", "--disable-usage-stats",
                f"--dashboard-agent-listen-port={next(ports)}", f"--dashboard-agent-grpc-port={next(ports)}",
                f"--metrics-export-port={next(ports)}", f"--runtime-env-agent-port={next(ports)}"]

    head = [ray_bin, "start", "--head", f"--port={port}", "--include-dashboard=true", "--dashboard-host=127.0.0.1",
            f"--dashboard-port={dashboard}", f"--ray-client-server-port={next(ports)}", "--num-cpus=1",
            f"--temp-dir={base}/head", *common()]
    node2 = [ray_bin, "start", f"--address=127.0.0.1:{port}", f"--node-manager-port={node_manager}",
             f"--object-manager-port={next(ports)}", "--num-cpus=2", f"--temp-dir={base}/node2", *common()]
    errors: list[str] = []
    state: dict = {"orphans": []}
    # the cluster starts while this process computes the reference run (conftest's session fixture, which
    # pytest would otherwise set up first as the test asked for it): each takes tens of seconds
    starter = threading.Thread(target=lambda: errors.append(_start(head, env) or _start(node2, env)))
    try:
        starter.start()
        reference = request.getfixturevalue("reference")
        starter.join()
        assert errors == [""], errors
        state.update(ray=ray_bin, env=env, gcs=f"127.0.0.1:{port}", jobs=f"http://127.0.0.1:{dashboard}",
                     node_manager=node_manager, reference=reference)
        yield state
    finally:
        starter.join()
        ours = _ours(base)
        orphans = [p for p in state["orphans"] if (_procs.cmdline(p) or [""])[0].startswith("ray::")]
        procs = sorted({*ours, *orphans})
        for pid in procs:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        _procs.stop(procs, timeout=5)
        shutil.rmtree(base, ignore_errors=True)


def _raylet(node_manager_port: int) -> int | None:
    """The pid of the raylet listening on ``node_manager_port`` (its command line names the port)."""
    found = [p for p in _procs.pids() if f"--node_manager_port={node_manager_port}" in _procs.cmdline(p)]
    return found[0] if found else None


def _cells(out: Path) -> list[str]:
    return sorted(p.name for p in (out / "cells").glob("*.parquet")) if (out / "cells").is_dir() else []


def _check_results(out: Path, reference) -> None:
    files = sorted(p.name for p in (out / "cells").iterdir())
    assert len(files) == 8 and all(f.endswith(".parquet") for f in files), files  # each cell once, no temp files
    df = load_results(out)
    assert df.height == 8 and df["cell_id"].n_unique() == 8
    assert set(df["status"]) == {"ok"}, df.filter(df["status"] != "ok")["error_text"].to_list()
    assert metric_rows(df) == metric_rows(reference)  # identical to the uninterrupted --local run


def _submit(cluster: dict, job_id: str, config: Path, out: Path, *args: str, wait: bool) -> subprocess.Popen:
    cmd = [cluster["ray"], "job", "submit", "--address", cluster["jobs"], "--submission-id", job_id,
           *([] if wait else ["--no-wait"]), "--", sys.executable, "-m", "unitta.sweep", str(config),
           "--output", str(out), "--no-progress", *args]
    return subprocess.Popen(cmd, cwd=ROOT, env=cluster["env"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def _cell_workers(raylet: int) -> tuple[list[int], list[int]]:
    """(every process under this raylet, those running a cell)."""
    workers = _procs.descendants(raylet)
    return workers, [p for p in workers if (_procs.cmdline(p) or [""])[0].startswith(CELL_TASK)]


def test_job_restarted_then_a_node_lost_mid_sweep(two_nodes, tmp_path):
    """`ray job submit`, `ray job stop` after the first cell, `ray job submit` again (it resumes); while the
    second job runs, SIGKILL the second node's raylet with a cell running there. One sweep for both, to keep
    the test short."""
    raylet = _raylet(two_nodes["node_manager"])
    assert raylet is not None, "the second node is not running"
    config = _write_config(tmp_path / "cluster.yaml", "cluster")
    # the first job's cells take 2 CPUs: one at a time, on the second node, so that `ray job stop` lands before the 8
    # tiny cells are done (two at a time, all 8 sometimes were); resources are no part of a cell's identity
    serial = tmp_path / "serial.yaml"
    serial.write_text(yaml.safe_dump({**yaml.safe_load(config.read_text()), "resources": {"num_cpus": 2}}))
    reference = two_nodes["reference"]
    out = tmp_path / "out"

    # 1. a driver stopped mid-sweep
    # (only the second node holds such a cell: the driver waits for it to have joined, as on an autoscaling cluster)
    first = _submit(two_nodes, "first", serial, out, "--wait-for-resources", "60", wait=False)
    assert first.wait(timeout=120) == 0, first.stdout.read()[-3000:]
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline and not _cells(out):
        time.sleep(0.1)
    assert _cells(out), "the first job finished no cell"
    stop = subprocess.run([two_nodes["ray"], "job", "stop", "--address", two_nodes["jobs"], "first"], cwd=ROOT,
                          env=two_nodes["env"], capture_output=True, text=True, timeout=120)  # waits for the stop
    assert stop.returncode == 0, (stop.stdout + stop.stderr)[-3000:]
    done_before = _cells(out)
    assert 1 <= len(done_before) < 8, done_before

    # 2. the same command again resumes; the second node dies while it runs a cell of this job
    second = _submit(two_nodes, "second", config, out, wait=True)
    try:
        running: list[int] = []
        deadline = time.monotonic() + 150
        while time.monotonic() < deadline and second.poll() is None and not running:
            workers, running = _cell_workers(raylet)
            time.sleep(0.05)
        assert running, "no cell of the second job ran on the second node"
        two_nodes["orphans"] += workers
        os.kill(raylet, signal.SIGKILL)  # the node dies: no cleanup, its workers lose their raylet
        log, _ = second.communicate(timeout=240)
    finally:
        if second.poll() is None:
            second.kill()
            second.communicate()
    assert second.returncode == 0, log[-3000:]
    assert "succeeded" in log and f"resume: {len(done_before)} of 8 cells already done" in log, log[-3000:]
    _check_results(out, reference)
    assert set(done_before) <= set(_cells(out))  # finished cells were kept, not recomputed

    # no screens of Ray internals: one line of ours for the lost node, one saying where Ray's messages went
    lost = [line for line in log.splitlines() if " lost" in line]
    assert len(lost) == 1 and "Ray reruns the cells" in lost[0], log[-3000:]
    for internal in ("(raylet)", "[state-dump]", "Raylet is terminated", "Traceback"):
        assert internal not in log, log[-3000:]
    assert "Raylet is terminated" in (out / "logs" / "ray.log").read_text()  # kept, in full, for whoever debugs it
    assert "method" in log and "i1i1" in log  # the summary table

"""``cluster/slurm/unitta.sbatch`` on a real Slurm: munged, slurmctld and two slurmd nodes (``slurmd -N``, one
machine) started from a generated slurm.conf on unused ports, stopped by PID at the end (cluster/README.md,
"Slurm"). A sweep of ``sweeps/quick.yaml`` cut to six tiny cells by overrides is killed half way and run again
by Slurm (``scontrol requeue``, as after a preemption), and resumes; its rows' errors equal an in-process
``--local`` run of the same cells. Ray's
``symmetric-run`` can put one Ray node on a machine, so the jobs take one of the two Slurm nodes.

Also the checks of ``unitta.slurm.plan`` (in-process, no Slurm): one line, exit 2, before Ray starts.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from unitta.schema import ConfigError
from unitta.slurm import PORT_BASE, PORT_BLOCK, SlurmProblem, plan, port_block, stop_job_ray

from ..free_ports import free_ports

ROOT = Path(__file__).resolve().parents[2]
SBATCH = ROOT / "cluster" / "slurm" / "unitta.sbatch"
QUICK = ROOT / "sweeps" / "quick.yaml"
# 6 cells of a few hundred images (S=2: at most 300 per stream), 2 CPUs each: one at a time on a 2-CPU node, so
# that a kill after the first lands half way
CUT = ["methods=[test,bn]", "settings=[i111,n111,nu11]", "n_per_domain=20", "S=2", "resources.num_cpus=2"]
DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "scancel", "scontrol", "sinfo")
WAIT_S = 240


# ---------------------------------------------------------------------- the checks before Ray starts
def _job_env(**extra: str) -> dict[str, str]:
    return {"SLURM_JOB_ID": "4321", "SLURM_JOB_NUM_NODES": "1", "SLURM_CPUS_PER_TASK": "4",
            "SLURM_SUBMIT_DIR": str(ROOT), **extra}


def test_plan_gives_the_job_its_ports_folder_and_command(tmp_path):
    got = plan(["sweep", str(QUICK), "methods=[test]", "--track", "mlflow=x", f"output={tmp_path}/q", "--dry-run"],
               env=_job_env(UNITTA_RAY_PORT="23000"))
    assert got["UNITTA_OUT"] == f"{tmp_path}/q" and got["UNITTA_RAY_ADDRESS"].endswith(":23000")
    assert "--num-cpus=4 --num-gpus=0 --ray-client-server-port=23001" in got["UNITTA_RAY_START"]
    assert "--min-worker-port=23010 --max-worker-port=23999" in got["UNITTA_RAY_START"]
    assert got["UNITTA_ENTRY"].startswith(f"sweep {QUICK} 'methods=[test]' output={tmp_path}/q --track mlflow=x "
                                          f"--dry-run --output {tmp_path}/q --address ")
    relative = plan(["sweep", str(QUICK), "output=results/x"], env=_job_env(UNITTA_RAY_PORT="23000"))
    assert relative["UNITTA_OUT"] == str(ROOT / "results" / "x")  # relative to where sbatch was run
    assert len(got["RAY_AUTH_TOKEN"]) == 64 and got["RAY_AUTH_TOKEN"] != relative["RAY_AUTH_TOKEN"]


def test_port_blocks_follow_the_job_id_and_skip_a_taken_one():
    assert port_block(7) == PORT_BASE + 7 * PORT_BLOCK and port_block(8) == port_block(7) + PORT_BLOCK
    taken = port_block(7)
    assert port_block(7, free=lambda port: port != taken) == taken + PORT_BLOCK
    with pytest.raises(SlurmProblem, match="UNITTA_RAY_PORT"):
        port_block(7, free=lambda port: False)


@pytest.mark.parametrize(
    ("argv", "env", "named"),
    [
        (["sweep"], {}, "no config given"),
        (["sweep", "methods=[test]"], {}, "no config given"),
        (["train", str(QUICK)], {}, "sweep|tune|select"),
        (["sweep", str(QUICK), "methds=[test]"], {}, "unknown key 'methds'"),
        (["sweep", str(QUICK), "resources.num_gpus=1"], {}, "asks for 1 GPU (resources.num_gpus) but the allocation "
                                                            "has 0 GPU per node"),
        (["sweep", str(QUICK), "resources.num_gpus=2"], {"SLURM_GPUS_ON_NODE": "1"}, "has 1 GPU per node"),
        (["sweep", str(QUICK), "resources.num_cpus=8"], {}, "asks for 8 CPU"),
        (["sweep", str(QUICK), "output=/tmp/q"], {"SLURM_JOB_NUM_NODES": "2"}, "/tmp/q is under /tmp"),
        (["sweep", str(QUICK), "--local"], {}, "--local is the job's to set"),
        (["sweep", str(QUICK)], {"UNITTA_RAY_PORT": "65000"}, "UNITTA_RAY_PORT='65000': give a port from 1024"),
    ],
)
def test_bad_input_is_one_line_before_ray_starts(argv, env, named):
    with pytest.raises((SlurmProblem, ConfigError)) as info:
        plan(argv, env=_job_env(**env))
    assert named in str(info.value) and "\n" not in str(info.value)


def test_the_gpus_of_the_allocation_are_counted():
    ok = plan(["sweep", str(QUICK), "resources.num_gpus=1"], env=_job_env(SLURM_JOB_GPUS="0,1"))
    assert "--num-gpus=2" in ok["UNITTA_RAY_START"]


# ---------------------------------------------------------------------- a real Slurm on this machine
def _binary(name: str) -> str | None:
    """The daemon's path (Debian puts munged, slurmctld and slurmd in /usr/sbin, off a user's PATH)."""
    return shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"]))


class Slurm:
    """munged, slurmctld and two slurmd (nodes n1, n2) in the foreground as this process's children."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.procs: list[tuple[str, subprocess.Popen]] = []
        self.conf = folder / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self.job_outputs: list[Path] = []  # the folders of the jobs' own output files (printed on a failure)

    def write_conf(self) -> None:
        f = self.folder
        (f / "munge").mkdir(mode=0o755)
        (f / "state").mkdir()
        for node in ("n1", "n2"):
            (f / "spool" / node).mkdir(parents=True)
        key = f / "munge.key"
        key.write_bytes(secrets.token_bytes(1024))
        key.chmod(0o400)
        ctld, n1, n2 = free_ports(3)
        cpus = os.cpu_count() or 2
        host = socket.gethostname()
        nodes = "\n".join(f"NodeName={name} NodeHostname={host} NodeAddr=127.0.0.1 Port={port} CPUs={cpus} "
                          "RealMemory=1000 State=UNKNOWN" for name, port in (("n1", n1), ("n2", n2)))
        self.conf.write_text(f"""ClusterName=unittatest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={ctld}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# a requeued job waits cred_expire seconds (120 by default) before it may start again, then for the
# scheduler's next pass (sched_interval, 60 s by default): both short here, as the test requeues a job
AuthInfo=socket={f}/munge/munge.socket,cred_expire=10
CredType=cred/munge
StateSaveLocation={f}/state
SlurmdSpoolDir={f}/spool/%n
SlurmctldPidFile={f}/slurmctld.pid
SlurmdPidFile={f}/slurmd-%n.pid
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SchedulerType=sched/builtin
SchedulerParameters=sched_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
SwitchType=switch/none
KillWait=10
{nodes}
PartitionName=debug Nodes=n1,n2 Default=YES MaxTime=INFINITE State=UP
""")

    def start(self) -> None:
        f = self.folder
        self._spawn("munged", ["munged", "-F", "-S", f"{f}/munge/munge.socket", f"--key-file={f}/munge.key",
                               f"--pid-file={f}/munged.pid", f"--log-file={f}/munged.log",
                               f"--seed-file={f}/munged.seed"])
        _wait(lambda: (f / "munge" / "munge.socket").exists(), 20, "munged's socket", self)
        self._spawn("slurmctld", ["slurmctld", "-D", "-f", str(self.conf), "-L", f"{f}/slurmctld.log"])
        for node in ("n1", "n2"):
            self._spawn(f"slurmd {node}", ["slurmd", "-D", "-f", str(self.conf), "-N", node, "-L",
                                           f"{f}/slurmd-{node}.log"])
        _wait(lambda: self.run("sinfo", "-h", "-N", "-o", "%N %t").split() == ["n1", "idle", "n2", "idle"], 60,
              "two idle nodes in sinfo", self, every=0.25)

    def _spawn(self, name: str, cmd: list[str]) -> None:
        out = open(self.folder / f"{name.replace(' ', '-')}.stdout", "wb")
        cmd = [_binary(cmd[0]) or cmd[0], *cmd[1:]]
        self.procs.append((name, subprocess.Popen(cmd, env=self.env, stdout=out, stderr=subprocess.STDOUT)))
        out.close()

    def run(self, *cmd: str, cwd: Path | None = None, env: dict | None = None) -> str:
        done = subprocess.run(cmd, env={**self.env, **(env or {})}, cwd=cwd, capture_output=True, text=True,
                              timeout=30)
        return done.stdout + done.stderr

    def job(self, job_id: str) -> dict[str, str]:
        """``scontrol show job``'s fields (Slurm keeps a finished job's record for MinJobAge, 300 s)."""
        text = self.run("scontrol", "show", "job", "-o", job_id)
        return dict(part.split("=", 1) for part in text.split() if "=" in part)

    def logs(self) -> str:
        parts = []
        jobs = [path for folder in self.job_outputs for path in sorted(folder.glob("job-*.out"))]
        for path in sorted(self.folder.glob("*.log")) + sorted(self.folder.glob("*.stdout")) + jobs:
            parts.append(f"--- {path.name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-25:]))
        return "\n".join(parts)

    def stop(self) -> None:
        for _, proc in reversed(self.procs):
            if proc.poll() is None:
                proc.terminate()
        for _, proc in reversed(self.procs):
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)


def _wait(condition, seconds: float, what: str, slurm: Slurm | None = None, every: float = 0.1) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except (OSError, subprocess.SubprocessError, ValueError):
            pass
        time.sleep(every)
    raise AssertionError(f"timed out after {seconds:.0f} s waiting for {what}\n" + (slurm.logs() if slurm else ""))


@pytest.fixture(scope="module")
def slurm():
    missing = [name for name in DAEMONS if _binary(name) is None]
    if missing:
        pytest.skip(f"Slurm is not installed ({', '.join(missing)} missing): apt-get install slurm-wlm munge "
                    "(.ci/run installs them)")
    if os.geteuid() != 0:
        pytest.skip("slurmd runs jobs as their user only when started as root (CI runs as root)")
    folder = Path(tempfile.mkdtemp(prefix="ut-slurm-"))  # short: Ray's socket paths live under it
    folder.chmod(0o711)  # munged wants its socket's folders reachable by all
    cluster = Slurm(folder)
    try:
        cluster.write_conf()
        cluster.start()
        yield cluster
    finally:
        try:
            cluster.stop()
            for ray_dir in folder.glob("unitta-ray-*"):
                stop_job_ray(str(ray_dir), grace_s=5)  # a job's Ray that linuxproc tracking let outlive its job
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def _submit(slurm: Slurm, tmp_path: Path, *args: str, options: tuple[str, ...] = ()) -> str:
    slurm.job_outputs.append(tmp_path)
    env = {"PYTHONPATH": str(ROOT), "UNITTA_PYTHON": sys.executable, "UNITTA_RAY_TMPDIR": str(slurm.folder),
           "RAY_USAGE_STATS_ENABLED": "0", "OMP_NUM_THREADS": "1"}
    text = slurm.run("sbatch", "--parsable", "--cpus-per-task=2", f"--output={tmp_path}/job-%j.out", *options,
                     str(SBATCH), *args, cwd=tmp_path, env=env)
    job_id = text.strip().split(";")[0]
    assert job_id.isdigit(), text + slurm.logs()
    return job_id


def _finished(slurm: Slurm, job_id: str, seconds: float = WAIT_S) -> dict[str, str]:
    fields: dict[str, str] = {}

    def done() -> bool:
        fields.update(slurm.job(job_id))
        return fields.get("JobState") in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL")

    _wait(done, seconds, f"job {job_id} to end", slurm, every=0.5)  # a process per look: not too often
    return fields


def _out(tmp_path: Path, job_id: str) -> str:
    path = tmp_path / f"job-{job_id}.out"
    return path.read_text() if path.exists() else ""


@pytest.mark.slow
def test_a_sweep_on_slurm_killed_half_way_resumes_and_equals_a_local_run(slurm, tmp_path):
    import polars as pl

    from unitta.results import load_results
    from unitta.sweep import main as sweep_main

    out = tmp_path / "out"
    job = _submit(slurm, tmp_path, "sweep", str(QUICK), *CUT, f"output={out}", options=("--requeue",))
    cells = out / "cells"
    _wait(lambda: any(cells.glob("*.parquet")), WAIT_S, "the first cell of the job", slurm)
    # killed half way and run again by Slurm itself, as after a preemption: the same job id, ports and Ray folder
    slurm.run("scontrol", "requeue", job)
    _wait(lambda: slurm.job(job).get("Restarts") == "1", 60, "the requeue", slurm, every=0.25)
    before = {p.name: p.stat().st_mtime_ns for p in cells.glob("*.parquet")}
    assert 1 <= len(before) < 6, before
    local = tmp_path / "local"  # meanwhile, the same cells in this process
    assert sweep_main([str(QUICK), *CUT, "--local", "--output", str(local), "--no-progress"]) == 0
    state = _finished(slurm, job)
    log_path = out / "logs" / f"slurm-{job}.log"  # the job's log beside its results, both runs
    log = log_path.read_text() if log_path.exists() else _out(tmp_path, job)
    assert state["JobState"] == "COMPLETED" and state["ExitCode"] == "0:0", log + slurm.logs()
    assert f"job {job} (restart 1)" in log and f"resume: {len(before)} of 6 cells already done" in log, log
    assert "Token authentication" not in log and "Starting Ray cluster head" in log
    assert {p.name: p.stat().st_mtime_ns for p in cells.glob("*.parquet") if p.name in before} == before

    rows = load_results(out).sort("cell_id")
    reference = load_results(local).sort("cell_id")
    assert rows.height == 6 and set(rows["status"]) == {"ok"}
    assert rows["cell_id"].to_list() == reference["cell_id"].to_list()
    assert rows["error"].to_list() == reference["error"].to_list()  # identical, not close
    assert rows.filter(pl.col("cell_id").is_in([n.removesuffix(".parquet") for n in before])).height == len(before)
    assert stop_job_ray(str(slurm.folder / f"unitta-ray-{job}")) == 0  # the job stopped its Ray, nothing else


@pytest.mark.slow
def test_a_bad_submission_ends_in_one_line_before_ray_starts(slurm, tmp_path):
    job = _submit(slurm, tmp_path, "sweep", str(QUICK), "resources.num_gpus=1")
    state = _finished(slurm, job, 60)
    text = _out(tmp_path, job).strip()
    assert state["ExitCode"] == "2:0" and len(text.splitlines()) == 1, text
    assert "asks for 1 GPU" in text and "Ray" not in text

"""One sweep, tune or selection on a Slurm allocation: the checks, ports and Ray start of
``cluster/slurm/unitta.sbatch`` (cluster/README.md, "Slurm").

The batch script calls ``python -m unitta.slurm plan COMMAND CONFIG [key=value ...] [flags]`` on the allocation's
first node before Ray starts. It loads the config with its overrides (the schema's one-line errors), checks the
allocation against it (a cell asking for more GPUs or CPUs than a node has; an output folder on a node-local path
when the job has several nodes) and prints the shell assignments the script evaluates: the absolute output folder
(the folder the user names, on a file system every node sees: results, the Tune/Optuna state, which is read back
from the rows there, and logs), the head's address and the job's ports, the per-job Ray folder and token, the
command line to run. Any problem is one line on stderr and exit 2, before Ray starts.

Ports: a block of ``PORT_BLOCK`` ports chosen by ``SLURM_JOB_ID`` (``port_block``) holds the GCS port, the client
server's and the dashboard agent's fixed ports and the range of the worker ports, so two jobs (two users) that share
a node use different ports; on the head the block is probed and the next free one taken.

``python -m unitta.slurm symmetric-run ...`` is Ray's ``ray symmetric-run`` (Ray 2.49+: start Ray on every node,
run the command on the head, stop Ray) with two things scoped to this job: Ray 2.60's version refuses to start
when any Ray runs on the node (another job's, any user's) and ends with ``ray stop``, which stops every Ray of
the user on the node (another job's too). Here the job's ports were probed instead, and the stop ends only the
processes of this job's Ray folder; a requeued job (same job id) stops what its previous run left first.
"""

from __future__ import annotations

import os
import secrets
import shlex
import signal
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from unitta.run.cli import run_parser
from unitta.schema import ConfigError

__all__ = ["COMMANDS", "PORT_BLOCK", "PORT_BASE", "SlurmProblem", "port_block", "plan", "stop_job_ray", "main"]

COMMANDS = ("sweep", "tune", "select")
PORT_BASE, PORT_BLOCK, N_BLOCKS = 10000, 1000, 50  # blocks 10000-59999; a block: 10 fixed ports, 990 worker ports
# paths that are on each node's own disk or memory, whatever the file system says
_NODE_LOCAL = ("/tmp", "/var/tmp", "/dev/shm", "/run", "/scratch/local", "/local")
_LOCAL_FS = {"tmpfs", "ramfs", "devtmpfs", "overlay"}


class SlurmProblem(RuntimeError):
    """The job cannot run as submitted; the message is one line (exit 2 before Ray starts)."""


def port_block(job_id: int, free=None) -> int:
    """The first port of this job's block: ``SLURM_JOB_ID`` picks one of ``N_BLOCKS``; ``free(port)`` (the head's
    probe) moves on to the next block while the block's GCS port is taken."""
    for step in range(N_BLOCKS):
        base = PORT_BASE + ((job_id + step) % N_BLOCKS) * PORT_BLOCK
        if free is None or free(base):
            return base
    raise SlurmProblem(f"no free Ray port block on this node ({PORT_BASE}-{PORT_BASE + N_BLOCKS * PORT_BLOCK - 1} "
                       "all taken); set UNITTA_RAY_PORT to a free port")


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


def ray_start_options(base: int, cpus: int, gpus: int, temp_dir: str) -> list[str]:
    """``ray start`` options for every node of the job: its resources, its ports (from ``base``), its folder."""
    return [f"--num-cpus={cpus}", f"--num-gpus={gpus}", f"--ray-client-server-port={base + 1}",
            f"--dashboard-agent-listen-port={base + 2}", f"--min-worker-port={base + 10}",
            f"--max-worker-port={base + PORT_BLOCK - 1}", "--include-dashboard=false", "--disable-usage-stats",
            f"--temp-dir={temp_dir}"]


def node_ip() -> str:
    """This node's address on the network the other nodes reach it by (the interface of its default route)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))  # UDP: chooses the route, sends nothing
            return s.getsockname()[0]
        except OSError:
            return "127.0.0.1"


def _node_local(path: Path) -> str | None:
    """Why ``path`` is on one node's own storage, or None."""
    text = str(path)
    for prefix in (*_NODE_LOCAL, os.environ.get("TMPDIR"), os.environ.get("SLURM_TMPDIR")):
        if prefix and (text == prefix or text.startswith(prefix.rstrip("/") + "/")):
            return f"under {prefix}"
    best, fstype = "", ""
    try:
        for line in Path("/proc/mounts").read_text().splitlines():
            fields = line.split()
            if len(fields) > 2 and (text == fields[1] or text.startswith(fields[1].rstrip("/") + "/")) \
                    and len(fields[1]) > len(best):
                best, fstype = fields[1], fields[2]
    except OSError:
        return None
    return f"on {fstype} ({best})" if fstype in _LOCAL_FS else None


def _allocation(env) -> dict[str, int]:
    """The job's nodes and, per node, CPUs and GPUs (Slurm's environment in the batch step)."""
    def number(*names: str, default: int = 0) -> int:
        for name in names:
            value = env.get(name, "")
            try:
                return int(value.split("(")[0].split(",")[0])  # '4(x2)' in SLURM_CPUS_PER_NODE-style values
            except ValueError:
                continue
        return default

    gpus = number("SLURM_GPUS_ON_NODE")
    if not gpus and env.get("SLURM_JOB_GPUS"):
        gpus = len([g for g in env["SLURM_JOB_GPUS"].split(",") if g.strip()])
    return {"nodes": number("SLURM_JOB_NUM_NODES", "SLURM_NNODES", default=1),
            "cpus": number("SLURM_CPUS_PER_TASK", "SLURM_CPUS_ON_NODE", default=1), "gpus": gpus}


def _load(command: str, path: str, overrides: Sequence[str]):
    if command == "sweep":
        from unitta.sweep.config import load_config

        return load_config(path, overrides)
    if command == "tune":
        from unitta.tune.config import load_tune_config

        return load_tune_config(path, overrides)
    from unitta.select.config import load_select_config

    return load_select_config(path, overrides)


def plan(argv: Sequence[str], env=None) -> dict[str, str]:
    """The shell variables of one job (see the module docstring); ``SlurmProblem`` / ``ConfigError`` (one line)."""
    env = os.environ if env is None else env
    argv = list(argv)
    if not argv or argv[0] not in COMMANDS:
        got = f"got {argv[0]!r}" if argv else "got nothing"
        raise SlurmProblem(f"usage: sbatch [OPTIONS] cluster/slurm/unitta.sbatch sweep|tune|select CONFIG "
                           f"[key=value ...] [flags] ({got})")
    command, rest = argv[0], argv[1:]
    if not rest or rest[0].startswith("-") or "=" in rest[0]:
        raise SlurmProblem(f"unitta.sbatch {command}: no config given; e.g. sbatch cluster/slurm/unitta.sbatch "
                           f"{command} sweeps/quick.yaml")
    if "SLURM_JOB_ID" not in env:
        raise SlurmProblem("not inside a Slurm job (no SLURM_JOB_ID); submit it: sbatch cluster/slurm/unitta.sbatch "
                           f"{command} CONFIG")
    args = run_parser(f"unitta {command}", "", [], "config").parse_args(rest)
    for flag, given in (("--local", args.local), ("--address", args.address), ("--num-cpus", args.num_cpus)):
        if given:
            raise SlurmProblem(f"unitta.sbatch: {flag} is the job's to set (the cells run on the allocation's Ray); "
                               "drop it")
    cfg = _load(command, args.config, args.overrides)
    alloc = _allocation(env)
    res = cfg.resources
    if res.num_gpus > alloc["gpus"]:
        raise SlurmProblem(
            f"each cell asks for {res.num_gpus:g} GPU (resources.num_gpus) but the allocation has {alloc['gpus']} "
            f"GPU per node; ask for more (sbatch --gpus-per-node=N or --gres=gpu:N) or lower resources.num_gpus")
    if res.num_cpus > alloc["cpus"]:
        raise SlurmProblem(
            f"each cell asks for {res.num_cpus:g} CPU (resources.num_cpus) but the job has {alloc['cpus']} CPU per "
            f"node; ask for more (sbatch --cpus-per-task=N) or lower resources.num_cpus")
    out = Path(args.output or cfg.output_dir()).expanduser()
    out = Path(os.path.abspath(out if out.is_absolute() else Path(env.get("SLURM_SUBMIT_DIR", os.getcwd())) / out))
    if alloc["nodes"] > 1 and (why := _node_local(out)):
        raise SlurmProblem(f"output folder {out} is {why}, on one node's own storage, and this job has "
                           f"{alloc['nodes']} nodes; name a folder on a shared file system (output=... or --output)")
    job_id = int(env["SLURM_JOB_ID"])
    base = _given_port(env["UNITTA_RAY_PORT"]) if env.get("UNITTA_RAY_PORT") else port_block(job_id, _port_free)
    host = node_ip()
    temp_dir = str(Path(env.get("UNITTA_RAY_TMPDIR") or "/tmp") / f"unitta-ray-{job_id}")
    entry = [command, args.config, *args.overrides, *_flags(rest), "--output", str(out), "--address",
             f"{host}:{base}", "--no-progress"]
    return {
        "UNITTA_OUT": str(out),
        "UNITTA_RAY_ADDRESS": f"{host}:{base}",
        "UNITTA_RAY_TMP": temp_dir,
        "UNITTA_NODES": str(alloc["nodes"]),
        "UNITTA_RAY_START": " ".join(ray_start_options(base, alloc["cpus"], alloc["gpus"], temp_dir)),
        "UNITTA_ENTRY": " ".join(shlex.quote(a) for a in entry),
        "RAY_AUTH_TOKEN": env.get("RAY_AUTH_TOKEN") or secrets.token_hex(32),
    }


def _given_port(text: str) -> int:
    """``UNITTA_RAY_PORT``: the first of the job's ``PORT_BLOCK`` ports."""
    if not text.isdigit() or not 1024 <= int(text) <= 65535 - PORT_BLOCK:
        raise SlurmProblem(f"UNITTA_RAY_PORT={text!r}: give a port from 1024 to {65535 - PORT_BLOCK} (the job uses it "
                           f"and the {PORT_BLOCK - 1} ports above it)")
    return int(text)


def _flags(rest: Sequence[str]) -> list[str]:
    """The command's own flags in ``rest`` (after the config), as given, without ``--output`` (the plan passes the
    absolute folder) and without the overrides (passed on separately)."""
    flags: list[str] = []
    args = iter(rest[1:])
    for arg in args:
        if not arg.startswith("-"):
            continue  # an override
        name = arg.split("=", 1)[0]
        value = [] if "=" in arg or name not in _VALUED else [next(args, "")]
        if name != "--output":
            flags += [arg, *value]
    return flags


_VALUED = ("--output", "--track", "--wait-for-resources", "--address", "--num-cpus")  # flags followed by a value


# ---------------------------------------------------------------------- Ray's symmetric-run, scoped to the job
def _psutil():
    """psutil as Ray ships it (``import ray`` puts its own copy on the path)."""
    import importlib

    import ray  # noqa: F401

    return importlib.import_module("psutil")


def _job_processes(temp_dir: str) -> list:
    """This node's processes of the Ray in ``temp_dir`` (their command lines name its session), not ours."""
    psutil = _psutil()

    mine = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        args = proc.info.get("cmdline") or []
        if proc.info["pid"] in mine:
            continue
        # Ray's own processes name a file of its session folder; the commands that start them (srun, this
        # module) only name the folder
        if any(value.startswith(f"{temp_dir}/session_") for arg in args for value in (arg, arg.split("=", 1)[-1])):
            found.append(proc)
    return found


def stop_job_ray(temp_dir: str, grace_s: float = 10.0) -> int:
    """Stop this node's processes of the job's Ray (SIGTERM, SIGKILL after ``grace_s``); how many there were."""
    psutil = _psutil()

    procs = _job_processes(temp_dir)
    for proc in procs:
        try:
            proc.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=5)
    return len(procs)


class _JobSubprocess:
    """What Ray's symmetric-run calls as ``subprocess``: ``ray`` from this Python's environment, ``ray stop``
    limited to the job's processes, and the job's leftovers stopped before each ``ray start``."""

    CalledProcessError = subprocess.CalledProcessError

    def __init__(self, temp_dir: str) -> None:
        self.temp_dir = temp_dir
        here = Path(sys.executable).parent / "ray"
        self.ray = str(here) if here.exists() else "ray"
        self.env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # `ray start` must not join one

    def run(self, cmd, *args, **kwargs):
        cmd = list(cmd)
        if cmd[:2] == ["ray", "stop"]:
            stop_job_ray(self.temp_dir)
            return subprocess.CompletedProcess(cmd, 0)
        if cmd[:2] == ["ray", "start"]:
            stop_job_ray(self.temp_dir)  # a requeued job's previous run on this node
            return subprocess.run([self.ray, *cmd[1:]], *args, env=self.env, **kwargs)
        return subprocess.run(cmd, *args, **kwargs)


def symmetric_run(argv: Sequence[str]) -> int:
    """Ray's ``ray symmetric-run`` with ``argv`` (see the module docstring), scoped to the job's Ray folder."""
    os.environ.setdefault("RAY_SYMMETRIC_RUN_CLUSTER_WAIT_TIMEOUT", "300")  # read at import: nodes start slowly
    from ray.scripts import symmetric_run as ray_symmetric_run

    temp_dir = next((a.split("=", 1)[1] for a in argv if a.startswith("--temp-dir=")), None)
    if temp_dir is None:
        raise SlurmProblem("symmetric-run: --temp-dir=DIR is required (the job's own Ray folder)")
    address = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--address"), None)
    if address:
        os.environ["RAY_ADDRESS"] = address  # its wait for the nodes joins this job's cluster, not a new local one
    ray_symmetric_run.check_ray_already_started = lambda: False  # the head probed the job's ports instead
    ray_symmetric_run.subprocess = _JobSubprocess(temp_dir)
    # Slurm's SIGTERM (scancel, preemption, time limit) reaches every process of the step: the command on the head
    # saves what it has and exits; this process waits for it, then stops the job's Ray (its `finally`)
    signal.signal(signal.SIGTERM, lambda *_: None)
    sys.argv = ["ray", "symmetric-run", *argv]
    try:
        ray_symmetric_run.symmetric_run.main(args=list(argv), prog_name="ray symmetric-run")
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    verb, rest = (argv[0], argv[1:]) if argv else ("", [])
    try:
        if verb == "plan":
            for name, value in plan(rest).items():
                print(f"{name}={shlex.quote(value)}")
            return 0
        if verb == "symmetric-run":
            return symmetric_run(rest)
        if verb == "stop" and len(rest) == 1:
            stop_job_ray(rest[0])
            return 0
        raise SlurmProblem("usage: python -m unitta.slurm plan|symmetric-run|stop ... (cluster/slurm/unitta.sbatch)")
    except (SlurmProblem, ConfigError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # argparse's own usage errors
        return exc.code if isinstance(exc.code, int) else 2


if __name__ == "__main__":
    sys.exit(main())


"""Joining or starting Ray, and checking that the cluster can run a cell at all: shared by sweep and tune.

Both CLIs take the same flags (``add_ray_arguments``): ``--address`` (a running cluster; ``local``
starts a new local Ray whatever RAY_ADDRESS says), ``--num-cpus`` (CPUs of a new local Ray) and
``--wait-for-resources SECONDS`` (an autoscaling cluster: wait that long for a node that fits one cell).
Without ``--address`` the driver joins the cluster named by RAY_ADDRESS (as under ``ray job submit``) or
one started with ``ray start`` on this machine, and otherwise starts a local Ray.

Nothing here waits silently: an unreachable address fails within ``CONNECT_TIMEOUT_S`` seconds and a
cell that no node can hold (``num_cpus: 8`` on a 2-CPU machine, ``num_gpus: 1`` without a GPU) fails
at start with one line (docs/results.md, "Running on a cluster"). A node that dies mid-run is one line
too (``NodeWatch``): Ray reruns its tasks elsewhere (``max_retries``), and the screens of Ray internals
its death makes Ray print on the driver's stdout (``RayMessages``) go to a log file instead.
"""

from __future__ import annotations

import argparse
import math
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from unitta.run import exits
from unitta.run.ray_auth import choose_auth_mode

__all__ = [
    "ClusterError",
    "CONNECT_TIMEOUT_S",
    "add_ray_arguments",
    "connect",
    "check_fits",
    "capacity",
    "NodeWatch",
    "RayMessages",
    "joined_line",
    "busy_elsewhere",
]

CONNECT_TIMEOUT_S = 20.0


class ClusterError(RuntimeError):
    """Ray cannot be reached, or no node of the cluster can run one cell; the message is one line."""


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def add_ray_arguments(parser: argparse.ArgumentParser) -> None:
    """The Ray flags of ``python -m unitta.sweep`` and ``python -m unitta.tune``."""
    parser.add_argument(
        "--address",
        help="Ray cluster address; 'local' starts a new local Ray (default: RAY_ADDRESS, else a cluster "
        "started with `ray start` on this machine, else a new local Ray)",
    )
    parser.add_argument("--num-cpus", type=_positive_int, default=None, help="CPUs of a new local Ray (default: all)")
    parser.add_argument(
        "--wait-for-resources", type=_non_negative_float, default=0.0, metavar="SECONDS",
        help="an autoscaling cluster: wait up to SECONDS for a node that can run one cell (default: fail at once)",
    )


def _joining(address: str | None) -> str | None:
    """The bootstrap address ray.init would join (host:port), or None when it would start a local Ray."""
    if address == "local":
        return None
    try:
        from ray._private.services import canonicalize_bootstrap_address

        # Ray's annotation says str; its docstring and code take None (RAY_ADDRESS, else a local Ray)
        return canonicalize_bootstrap_address(address)  # type: ignore[arg-type]
    except ImportError:  # a Ray without this helper: join only what is named
        named = address or os.environ.get("RAY_ADDRESS")
        return None if named in (None, "", "local") else named
    except Exception as exc:  # e.g. 'auto' with no cluster running here
        raise ClusterError(
            f"Ray address {address or os.environ.get('RAY_ADDRESS')!r}: {exc}".replace("\n", " ")
        ) from exc


def _reachable(bootstrap: str, timeout: float) -> bool:
    if bootstrap.startswith("ray://"):
        bootstrap = bootstrap.removeprefix("ray://")
    host, _, port = bootstrap.rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


# HTTP/2's client preface and an empty SETTINGS frame: every gRPC server (Ray's GCS, its client server)
# answers with a SETTINGS frame (frame type 4 in the 4th byte of its 9-byte header).
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
SPEAKS_GRPC_TIMEOUT_S = 5.0


def _speaks_grpc(bootstrap: str, timeout: float) -> bool:
    """Whether ``bootstrap`` (host:port) answers like a gRPC server: a port that accepts TCP but is not Ray
    (a web server, a database) would make ``ray.init`` retry for half a minute with pages of C++ warnings.

    With TLS (``RAY_USE_TLS``) the plain-text probe cannot tell, so the address is taken as it is.
    """
    if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
        return True
    host, _, port = bootstrap.removeprefix("ray://").rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout) as conn:
            conn.settimeout(timeout)
            conn.sendall(_H2_PREFACE)
            header = b""
            while len(header) < 9:
                chunk = conn.recv(9 - len(header))
                if not chunk:
                    return False
                header += chunk
    except (OSError, ValueError):
        return False
    return header[3] == 0x04


def _job_py_modules() -> list[str]:
    """The ``py_modules`` of the job's own runtime_env under ``ray job submit`` (already uploaded URIs), or []."""
    import json

    raw = os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR")  # set by Ray's job manager for the driver it starts
    if not raw:
        return []
    try:
        return list((json.loads(raw).get("runtime_env") or {}).get("py_modules") or [])
    except (ValueError, AttributeError):
        return []


def connect(address: str | None = None, num_cpus: int | None = None, runtime_env: dict[str, Any] | None = None):
    """Join the cluster ``address`` names (see the module docstring) or start a local Ray.

    runtime_env: Ray's job-level runtime environment, e.g. ``{"py_modules": [...]}`` for the plugins of a
    config (``unitta.plugins.runtime_env``); under ``ray job submit`` it is merged with the job's own (both
    ``py_modules`` lists kept). Ray already initialised in this process (the Python API) is used as it is:
    its ``ray.init`` must then ship the plugins. Returns ``(ray, started_here)``; the caller shuts Ray down
    only if ``started_here``.
    """
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray
    from ray.exceptions import RayError

    if ray.is_initialized():
        _check_same_cluster(ray, address)
        return ray, False
    kwargs: dict[str, Any] = {"log_to_driver": False, "logging_level": "WARNING"}
    override = False
    if runtime_env:
        runtime_env = dict(runtime_env)
        job_modules = _job_py_modules()
        if job_modules and runtime_env.get("py_modules"):
            # Ray refuses a key both the job and ray.init set unless told to let ray.init's win: keep both lists
            runtime_env["py_modules"] = [*job_modules, *runtime_env["py_modules"]]
            override = True
        kwargs["runtime_env"] = runtime_env
    bootstrap = _joining(address)
    if bootstrap is None:
        if address == "local":
            os.environ.pop("RAY_ADDRESS", None)
        kwargs.update(address="local", include_dashboard=False, num_cpus=num_cpus)
    else:
        _check_joinable(bootstrap)
        kwargs["address"] = address if address is not None else bootstrap
    choose_auth_mode(new_cluster=bootstrap is None)
    previous = os.environ.get("RAY_OVERRIDE_JOB_RUNTIME_ENV")
    if override:
        os.environ["RAY_OVERRIDE_JOB_RUNTIME_ENV"] = "1"
    try:
        ray.init(**kwargs)
        exits.take_back_sigterm()
    except (ConnectionError, RuntimeError, TimeoutError, ValueError, RayError) as exc:  # runtime_env conflict/upload
        raise ClusterError(f"cannot start or join Ray: {exc}".replace("\n", " ")) from None
    finally:
        if override:
            if previous is None:
                os.environ.pop("RAY_OVERRIDE_JOB_RUNTIME_ENV", None)
            else:
                os.environ["RAY_OVERRIDE_JOB_RUNTIME_ENV"] = previous
    return ray, True


def _check_joinable(bootstrap: str) -> None:
    """One line (ClusterError) when ``bootstrap`` cannot be reached or does not answer like a Ray cluster."""
    if not _reachable(bootstrap, CONNECT_TIMEOUT_S):
        raise ClusterError(
            f"cannot reach the Ray cluster at {bootstrap} within {CONNECT_TIMEOUT_S:.0f} s; start it "
            "(`ray start --head`), fix --address / RAY_ADDRESS, or use --address local for a new local Ray"
        )
    if not _speaks_grpc(bootstrap, SPEAKS_GRPC_TIMEOUT_S):
        raise ClusterError(
            f"{bootstrap} accepts connections but does not answer like a Ray cluster (no gRPC reply within "
            f"{SPEAKS_GRPC_TIMEOUT_S:.0f} s); give the head's GCS address (`ray status` on the head shows it, "
            "port 6379 by default), or use --address local for a new local Ray"
        )


def _check_same_cluster(ray, address: str | None) -> None:
    """Ray already initialised in this process is used as it is, unless ``address`` names another cluster:
    that address is checked as a fresh connect would (one line if unreachable), then refused in one line
    rather than silently ignored."""
    if address in (None, "", "auto"):
        return
    try:
        running = ray.get_runtime_context().gcs_address
    except Exception:  # noqa: BLE001 - an older Ray without it: keep the running one, as before
        return
    named = address.removeprefix("ray://")
    if address == "local" or named == running:
        return
    _check_joinable(named)
    raise ClusterError(
        f"Ray is already running in this process (GCS {running}); --address {address} names another cluster: "
        "call ray.shutdown() first, or drop --address"
    )


def _fits(node: dict[str, Any], num_cpus: float, num_gpus: float) -> bool:
    res = node.get("Resources", {})
    return res.get("CPU", 0) >= num_cpus - 1e-9 and res.get("GPU", 0) >= num_gpus - 1e-9


def check_fits(ray, num_cpus: float, num_gpus: float, wait_s: float = 0.0, say=None) -> None:
    """Raise ``ClusterError`` unless one alive node can run a cell asking for ``num_cpus`` / ``num_gpus``.

    ``wait_s`` > 0 (an autoscaling cluster): warn and poll for up to ``wait_s`` seconds first.
    """
    say = say or (lambda text: print(text, file=sys.stderr))
    deadline = time.monotonic() + wait_s
    warned = False
    while True:
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        if any(_fits(n, num_cpus, num_gpus) for n in nodes):
            return
        if time.monotonic() >= deadline:
            break
        if not warned:
            say(f"warning: no node can run a cell ({num_cpus:g} CPU, {num_gpus:g} GPU) yet; waiting up to "
                f"{wait_s:.0f} s for the autoscaler (--wait-for-resources)")
            warned = True
        time.sleep(min(5.0, max(0.1, deadline - time.monotonic())))
    biggest = max(
        ((n["Resources"].get("CPU", 0), n["Resources"].get("GPU", 0)) for n in nodes), default=(0, 0)
    )
    raise ClusterError(
        f"each cell asks for {num_cpus:g} CPU and {num_gpus:g} GPU but no node of the cluster has that "
        f"(largest node: {biggest[0]:g} CPU, {biggest[1]:g} GPU); lower 'resources' in the config, add such a node, "
        "or pass --wait-for-resources SECONDS on an autoscaling cluster"
    )


def capacity(ray, num_cpus: float, num_gpus: float) -> int:
    """How many cells fit on the cluster at once (for the progress bar's 'running' figure)."""
    total = 0
    for node in ray.nodes():
        if not node.get("Alive"):
            continue
        res = node.get("Resources", {})
        fits = [res.get("CPU", 0) / num_cpus]
        if num_gpus > 0:
            fits.append(res.get("GPU", 0) / num_gpus)
        total += max(0, int(min(fits) + 1e-9))
    return total


WORKER_NICENESS = "RAY_worker_niceness"  # read by each Ray worker at start: nice() by this much (Ray's default 15)


def niceness_note(niceness: int) -> str | None:
    """The start-up line's note when cells run at reduced priority (``resources.niceness`` > 0), else None."""
    if niceness <= 0:
        return None
    return (f"Ray workers run at reduced priority (nice +{niceness}, resources.niceness): other work on a node "
            "comes first; 0 runs them at full priority")


def joined_line(ray) -> str | None:
    """One line naming the running cluster this driver joined (None when it started its own local Ray):
    joining someone else's cluster (``--address auto``, RAY_ADDRESS) is said, never silent."""
    try:
        node = ray._private.worker.global_worker.node
        if node is None or node.is_head():  # this process started the head: a private local Ray
            return None
        address = ray.get_runtime_context().gcs_address
    except Exception:  # another Ray layout: say nothing rather than guess
        return None
    total, free = ray.cluster_resources(), ray.available_resources()
    return (f"joined the running Ray cluster at {address}: {total.get('CPU', 0):g} CPU / {total.get('GPU', 0):g} GPU, "
            f"{free.get('CPU', 0):g} CPU / {free.get('GPU', 0):g} GPU free now (--address local starts a private one)")


def busy_elsewhere(ray, num_cpus: float, num_gpus: float, ours_at_most: int) -> str | None:
    """A line when no cell fits in the cluster's free resources and other jobs hold some: the cells wait for them.

    ours_at_most: how many of this sweep's cells can be running (each holds ``num_cpus`` / ``num_gpus``).
    """
    total, free = ray.cluster_resources(), ray.available_resources()
    if free.get("CPU", 0) >= num_cpus - 1e-9 and free.get("GPU", 0) >= num_gpus - 1e-9:
        return None
    others_cpu = total.get("CPU", 0) - free.get("CPU", 0) - ours_at_most * num_cpus
    others_gpu = total.get("GPU", 0) - free.get("GPU", 0) - ours_at_most * num_gpus
    if others_cpu <= 1e-9 and others_gpu <= 1e-9:
        return None  # our own cells hold it all: they are running
    return (f"cells are waiting: other jobs hold {max(others_cpu, 0):g} CPU / {max(others_gpu, 0):g} GPU of the "
            f"cluster and {free.get('CPU', 0):g} CPU / {free.get('GPU', 0):g} GPU are free (each cell needs "
            f"{num_cpus:g} CPU / {num_gpus:g} GPU); see `ray status`, or use --address local for a private Ray")


class NodeWatch:
    """Notices the nodes of the cluster that die, from ``ray.nodes()``; one line each for the driver to print."""

    def __init__(self, ray) -> None:
        self.ray = ray
        self.alive = {n["NodeID"] for n in ray.nodes() if n.get("Alive")}

    def lost(self) -> list[str]:
        """A line for each node alive at the last call and dead now."""
        lines = []
        for node in self.ray.nodes():
            node_id = node["NodeID"]
            if node.get("Alive"):
                self.alive.add(node_id)
            elif node_id in self.alive:
                self.alive.discard(node_id)
                reason = " ".join(str(node.get("DeathReasonMessage") or "").split())[:120]
                lines.append(f"node {node.get('NodeManagerAddress', '?')} ({node_id[:8]}) lost"
                             + (f" ({reason})" if reason else "")
                             + "; Ray reruns the cells it was running on the other nodes")
        return lines


class RayMessages:
    """Ray's cluster error messages, written to a file instead of the driver's stdout while installed.

    A Ray driver prints every error the cluster publishes (a dead raylet's last 20 log lines, twice; one
    paragraph per retried task; lost-node notices) on its stdout, whatever ``log_to_driver`` says
    (``ray._private.worker.listen_error_messages`` in Ray 2.60). Installed, they go in full to ``path``,
    and the driver says once where; it reports node losses itself (``NodeWatch``).
    """

    def __init__(self, path: str | Path, say: Callable[[str], None]) -> None:
        self.path, self.say = Path(path), say
        self.count = 0
        self._lock = threading.Lock()
        self._original: Callable | None = None

    def install(self) -> RayMessages:
        try:
            import ray._private.worker as ray_worker  # the listener thread looks this name up on each message
        except ImportError:  # another Ray layout: its messages stay on stdout
            return self
        self._module, self._original = ray_worker, ray_worker.print_to_stdstream
        ray_worker.print_to_stdstream = self._divert
        return self

    def restore(self) -> None:
        if self._original is not None:
            self._module.print_to_stdstream = self._original
            self._original = None

    def _divert(self, data: dict, ignore_prefix: bool = False) -> None:
        if data.get("pid") != "raylet":  # not a cluster error message (worker output): leave it to Ray
            return self._original(data, ignore_prefix)  # type: ignore[misc]
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as f:
                for line in data.get("lines", []):
                    f.write(f"[{time.strftime('%Y-%m-%d %H:%M:%S')}] {line.rstrip()}\n")
            self.count += 1
            first = self.count == 1
        if first:
            self.say(f"Ray reported a cluster event; Ray's messages go to {self.path}")

"""A real MLflow tracking server for the tracker tests, and a gate in front of it that can go away or go slow.

``mlflow_server`` runs ``mlflow server`` (the dev extras install it) on a free port of 127.0.0.1 with a SQLite
backend in a temp folder, waits for its /health, and kills its process group at the end. ``Gate`` forwards HTTP
requests to it; after ``stop_after`` requests it closes (the tracking server as the client sees it is gone:
connections are refused), and ``delay_s`` holds every request that long (a slow server).
"""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from tests.free_ports import free_ports

START_TIMEOUT_S = 240  # the server's first start creates its tables; a loaded 2-core machine takes a minute


def _healthy(uri: str) -> bool:
    try:
        with urllib.request.urlopen(f"{uri}/health", timeout=2) as reply:
            return reply.status == 200
    except OSError:
        return False


def group_cpu_seconds(pgid: int) -> float:
    """CPU seconds (user + system) used so far by the live processes of process group ``pgid`` (Linux /proc)."""
    ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:  # after the name: state, ppid, pgrp, ..., utime (12th), stime (13th)
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def mlflow_server(folder: Path, workers: int = 1, on_start=None) -> Iterator[str]:
    """A running ``mlflow server`` on SQLite under ``folder`` (``workers`` server processes); yields its URI.
    on_start: called with the server's process group id once it answers."""
    port = free_ports(1)[0]
    uri = f"http://127.0.0.1:{port}"
    mlflow = Path(sys.executable).with_name("mlflow")
    log = open(folder / "server.log", "w")
    proc = subprocess.Popen(
        [str(mlflow), "server", "--backend-store-uri", f"sqlite:///{folder / 'mlflow.db'}",
         "--artifacts-destination", str(folder / "artifacts"), "--host", "127.0.0.1", "--port", str(port),
         "--workers", str(workers)],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=folder,
        # no job runner: mlflow 3 starts one with 7 task consumers (about 16 s of CPU) for jobs no test submits
        env={**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not _healthy(uri):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"mlflow server did not start: {(folder / 'server.log').read_text()[-2000:]}")
            time.sleep(0.5)
        if on_start is not None:
            on_start(proc.pid)
        yield uri
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(3)  # the server has nothing to save (SQLite commits each request)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        log.close()


class Gate:
    """An HTTP forwarder to ``target`` on a port of its own (``uri``); see the module docstring."""

    def __init__(self, target: str, stop_after: int | None = None, delay_s: float = 0.0) -> None:
        self.target = target.removeprefix("http://")
        self.stop_after, self.delay_s = stop_after, delay_s
        self.count = 0
        self.lock = threading.Lock()
        gate = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def _forward(self) -> None:
                with gate.lock:
                    gate.count += 1
                    closed = gate.stop_after is not None and gate.count > gate.stop_after
                if closed:  # gone: this connection drops without an answer, new ones are refused
                    self.close_connection = True
                    threading.Thread(target=gate.close, daemon=True).start()
                    return
                time.sleep(gate.delay_s)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                upstream = http.client.HTTPConnection(gate.target, timeout=60)
                upstream.request(self.command, self.path, body=body,
                                 headers={k: v for k, v in self.headers.items() if k.lower() != "host"})
                reply = upstream.getresponse()
                data = reply.read()
                self.send_response(reply.status)
                for key, value in reply.getheaders():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                upstream.close()

            do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _forward

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.uri = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.closed = False

    def close(self) -> None:
        with self.lock:
            if self.closed:
                return
            self.closed = True
        self.server.shutdown()
        self.server.server_close()

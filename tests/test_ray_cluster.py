"""Joining Ray (unitta/ray_cluster.py): an address that accepts TCP but is not Ray is one line within seconds."""

from __future__ import annotations

import os
import socket
import threading
import time
from concurrent import futures

import pytest

from unitta.run.ray_auth import AUTH_MODE, choose_auth_mode
from unitta.run.ray_cluster import ClusterError, _speaks_grpc, connect


@pytest.fixture
def web_server():
    """A TCP server that answers like a web server (what a wrong port often is)."""
    server = socket.socket()
    server.bind(("", 0))  # every interface: Ray rewrites 127.0.0.1 to this node's address
    server.listen()

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.recv(1024)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1]
    server.close()


def test_a_port_that_is_not_ray_is_one_line_within_seconds(web_server):
    started = time.monotonic()
    with pytest.raises(ClusterError) as err:
        connect(f"127.0.0.1:{web_server}")
    assert time.monotonic() - started < 10
    message = str(err.value)
    assert "\n" not in message
    assert f":{web_server} accepts connections but does not answer like a Ray cluster" in message


def test_a_grpc_server_passes_the_probe():
    import grpc

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        assert _speaks_grpc(f"127.0.0.1:{port}", 5.0)
    finally:
        server.stop(None)


def test_an_address_is_not_ignored_when_ray_already_runs_in_this_process(web_server, ray_cluster):
    """Ray initialised in this process (a notebook, an earlier call; here the session's ``ray_cluster``) is
    reused only for no address or the same cluster; another address is checked like a fresh connect, then
    refused in one line."""
    assert connect(None) == (ray_cluster, False)
    with pytest.raises(ClusterError, match="cannot reach the Ray cluster at 127.0.0.1:1 "):
        connect("127.0.0.1:1")
    with pytest.raises(ClusterError, match="does not answer like a Ray cluster"):
        connect(f"127.0.0.1:{web_server}")


def test_the_auth_mode_ray_would_choose_is_said_so_ray_prints_no_warning(monkeypatch):
    """Ray 2.60 warns on every new local Ray when RAY_AUTH_MODE is unset; unitta sets what Ray would choose."""
    monkeypatch.delenv(AUTH_MODE, raising=False)
    choose_auth_mode(new_cluster=True)
    assert os.environ[AUTH_MODE] == "token"  # Ray's default for a new local Ray, said explicitly
    monkeypatch.setenv(AUTH_MODE, "disabled")
    choose_auth_mode(new_cluster=True)
    assert os.environ[AUTH_MODE] == "disabled"  # the user's choice stands
    monkeypatch.delenv(AUTH_MODE)
    monkeypatch.setenv("RAY_AUTH_TOKEN", "a" * 32)  # (Ray caches the token it found: no "without a token" case here)
    choose_auth_mode(new_cluster=False)
    assert os.environ[AUTH_MODE] == "token"  # joining with a token at hand

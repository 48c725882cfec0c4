"""Free TCP ports for the tests that start real daemons (Ray nodes, Slurm) on this machine."""

from __future__ import annotations

import socket


def free_ports(n: int) -> list[int]:
    """``n`` distinct ports free on 127.0.0.1 now.

    All ``n`` sockets are bound before any is closed, so no port is handed out twice (asking one port at a time
    can return a port twice once the first socket is closed: CI once gave a Ray node's node manager and its
    dashboard agent the same port).
    """
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()

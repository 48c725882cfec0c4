"""Test helpers for the fetch commands: a local HTTP server (Range, dropped connections) and an unprivileged run.

Tests never touch the internet: the fetch code's URLs are pointed at this server on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Served:
    """What the server holds: path -> bytes (or a callable of the server's base URL), and a request log."""

    files: dict[str, bytes | Callable[[str], bytes]] = field(default_factory=dict)
    drop_after: dict[str, int] = field(default_factory=dict)  # path -> bytes sent before dropping, first time only
    ranges: bool = True  # honour Range requests
    log: list[tuple[str, str | None]] = field(default_factory=list)  # (path, Range header)
    base: str = ""


def _handler(served: Served) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:  # keep pytest output clean
            pass

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            served.log.append((self.path, self.headers.get("Range")))
            body = served.files.get(self.path)
            if body is None:
                self.send_error(404)
                return
            if callable(body):
                body = body(served.base)
            start = 0
            header = self.headers.get("Range")
            if header and served.ranges:
                start = int(header.removeprefix("bytes=").split("-")[0])
                if start >= len(body):
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{len(body)}")
                    self.end_headers()
                    return
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
            else:
                self.send_response(200)
            self.send_header("Content-Length", str(len(body) - start))
            self.send_header("Content-Type", "application/octet-stream")
            self.end_headers()
            cut = served.drop_after.pop(self.path, None)
            if cut is not None:  # send part of the body, then hang up mid-transfer
                self.wfile.write(body[start : start + cut])
                self.wfile.flush()
                self.close_connection = True
                return
            self.wfile.write(body[start:])

    return Handler


@contextlib.contextmanager
def serve(served: Served) -> Iterator[Served]:
    """Serve ``served`` on 127.0.0.1 (a free port) in a thread; ``served.base`` is its URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(served))
    served.base = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield served
    finally:
        server.shutdown()
        server.server_close()


def run_unprivileged(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess | None:
    """Run ``python ARGS`` so that file permissions bind: as root, without the capabilities that bypass them.

    Returns None where that is impossible (root without ``setpriv``).
    """
    command = [sys.executable, *args]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            return None
        caps = "-dac_override,-dac_read_search,-fowner"
        command = [setpriv, f"--inh-caps={caps}", f"--bounding-set={caps}", *command]
    return subprocess.run(command, capture_output=True, text=True, env={**os.environ, **env}, timeout=120)

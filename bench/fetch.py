"""Download figures: ``unitta.data.download`` throughput from a local HTTP server, resume and checksum cost.

    python bench/fetch.py [--mb 256]

Serves a ``--mb`` MiB file from a stdlib HTTP server on 127.0.0.1 (a loopback ceiling, not a network
figure: a real fetch is bound by Zenodo / Google Drive), then times (1) a full download with its md5
check, (2) the md5 check alone, (3) a resume of the second half from a ``.part`` holding the first.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import os
import tempfile
import threading
import time
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from unitta.data.download import Digest, download, file_digest


class _RangeHandler(SimpleHTTPRequestHandler):
    """The stdlib file server plus ``Range: bytes=N-`` (what ``download`` asks for when resuming)."""

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        header = self.headers.get("Range")
        if not header:
            return super().do_GET()
        path = Path(self.translate_path(self.path))
        start, size = int(header.removeprefix("bytes=").split("-")[0]), path.stat().st_size
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
        self.send_header("Content-Length", str(size - start))
        self.end_headers()
        with open(path, "rb") as handle:
            handle.seek(start)
            while chunk := handle.read(1 << 20):
                self.wfile.write(chunk)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=256)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "srv").mkdir()
        data = os.urandom(args.mb << 20)
        (root / "srv" / "file.bin").write_bytes(data)
        digest = Digest("md5", hashlib.md5(data).hexdigest())
        server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_RangeHandler, directory=str(root / "srv")))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}/file.bin"
        part = root / "file.bin.part"

        started = time.perf_counter()
        download(url, part, len(data), digest, progress=False)
        full = time.perf_counter() - started
        started = time.perf_counter()
        file_digest(part, "md5")
        md5 = time.perf_counter() - started
        with open(part, "r+b") as handle:
            handle.truncate(len(data) // 2)
        started = time.perf_counter()
        download(url, part, len(data), digest, progress=False)
        resume = time.perf_counter() - started
        server.shutdown()
    print(f"{args.mb} MiB over loopback (stdlib server, 1 MiB reads):")
    print(f"  download + md5 check : {full:6.2f} s  {args.mb / full:7.0f} MiB/s")
    print(f"  md5 check alone      : {md5:6.2f} s  {args.mb / md5:7.0f} MiB/s")
    print(f"  resume second half   : {resume:6.2f} s  (+ md5 of the whole file)")
    print(f"  CIFAR-10-C.tar (2.9 GB) md5 check, extrapolated: {2.9e3 / (args.mb * 1.048576) * md5:.1f} s")


if __name__ == "__main__":
    main()

"""Resumable, verified HTTP downloads for ``python -m unitta.data fetch`` and ``python -m unitta.models fetch``.

robustbench's own downloaders (``robustbench.zenodo_download.download_file``, gdown for the model zoo)
use ``requests`` without timeouts and restart from zero after a dropped connection, which on a 2.9 GB
Zenodo archive means hours lost or a hung job. This module keeps robustbench's URLs and checksums but
does the transfer itself with urllib: explicit timeouts, an HTTP ``Range`` resume on a ``<name>.part``
file (also across runs), a tqdm progress bar, then a checksum check. A ``.part`` file never has the
final name, so a partial download never looks complete; callers rename it once it is verified.

Files get the process umask's mode (plain ``open``), like any file the user creates.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import socket
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

TIMEOUT_S = 30.0  # per connect and per read: an unreachable host fails within a minute
READ_CHUNK = 1 << 20
USER_AGENT = "unitta-fetch (python urllib)"


class DownloadError(RuntimeError):
    """A download that could not finish; the message is one line naming the URL or file and what to do."""


@dataclass(frozen=True)
class Digest:
    """An expected checksum: ``algorithm`` a hashlib name, ``hexdigest`` the full digest or a prefix of it.

    torchvision names its weights by a sha256 prefix (``resnet50-0676ba61.pth``), hence prefixes.
    """

    algorithm: str
    hexdigest: str

    def matches(self, actual: str) -> bool:
        return bool(self.hexdigest) and actual.startswith(self.hexdigest.lower())


def file_digest(path: Path, algorithm: str) -> str:
    """Hex digest of a file, read in 1 MiB chunks."""
    digest = hashlib.new(algorithm)
    with open(path, "rb") as handle:
        while chunk := handle.read(READ_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _reason(err: BaseException) -> str:
    if isinstance(err, urllib.error.HTTPError):
        return f"HTTP {err.code} {err.reason}"
    if isinstance(err, urllib.error.URLError):
        return str(err.reason)
    if isinstance(err, (TimeoutError, socket.timeout)):
        return "timed out"
    return f"{type(err).__name__}: {err}" if str(err) else type(err).__name__


def _open(url: str, headers: dict[str, str], timeout: float):
    request = urllib.request.Request(url, headers={"User-Agent": USER_AGENT, **headers})
    return urllib.request.urlopen(request, timeout=timeout)


def fetch_json(url: str, timeout: float = TIMEOUT_S) -> dict:
    """GET a JSON document; any failure is a DownloadError naming the URL."""
    try:
        with _open(url, {"Accept": "application/json"}, timeout) as response:
            return json.loads(response.read())
    except (OSError, http.client.HTTPException, ValueError) as err:
        raise DownloadError(f"cannot read {url}: {_reason(err)}") from err


def _transfer(url: str, part: Path, size: int | None, timeout: float, bar) -> int | None:
    """One HTTP request appending to ``part`` from its current size (Range), or rewriting it if unsupported.

    Returns the file's full size as the server states it (Content-Range / Content-Length), or ``size``.
    """
    have = part.stat().st_size if part.exists() else 0
    headers = {"Range": f"bytes={have}-"} if have else {}
    try:
        response = _open(url, headers, timeout)
    except urllib.error.HTTPError as err:
        if err.code == 416 and have and (size is None or have == size):
            return have  # nothing left to send: the part is complete
        raise
    with response:
        if have and response.status == 206:
            content_range = response.headers.get("Content-Range", "").removeprefix("bytes ")
            start, total = content_range.partition("-")[0], content_range.rpartition("/")[2]
            if start != str(have):
                raise DownloadError(f"{url}: asked for bytes {have}- but got range {content_range!r}")
            mode = "ab"
        else:  # 200: the server ignores Range; start again
            mode, have, total = "wb", 0, response.headers.get("Content-Length")
        if size is None and total and total.isdigit():
            size = int(total)
        if mode == "wb":
            bar.reset(total=size)
        elif bar.total is None:
            bar.total = size
        with open(part, mode) as handle:
            while chunk := response.read(READ_CHUNK):
                handle.write(chunk)
                bar.update(len(chunk))
    return size


def download(
    url: str,
    part: Path,
    size: int | None = None,
    digest: Digest | None = None,
    progress: bool = True,
    retries: int = 3,
    timeout: float = TIMEOUT_S,
) -> Path:
    """Download ``url`` into ``part`` (resuming what it holds), check size and digest; returns ``part``.

    A connection that drops after some bytes arrived is resumed at once, up to ``retries`` times; a
    failure leaves ``part`` for the next run to resume and raises a DownloadError. A checksum mismatch
    deletes ``part`` (its bytes are wrong somewhere) and raises.
    """
    from tqdm.auto import tqdm

    part.parent.mkdir(parents=True, exist_ok=True)
    have = part.stat().st_size if part.exists() else 0
    if size is not None and have > size:
        part.unlink()  # longer than the file: not a prefix of it
        have = 0
    bar = tqdm(
        total=size, initial=have, unit="B", unit_scale=True, unit_divisor=1024, desc=part.name.removesuffix(".part"),
        file=sys.stderr, disable=not progress, mininterval=0.5 if sys.stderr.isatty() else 30,
        delay=0.5,  # no bar for a download that fails at once (offline: the error is the one line)
    )
    attempt = 0
    try:
        while size is None or have < size:
            try:
                size = _transfer(url, part, size, timeout, bar)
                if size is not None and part.stat().st_size < size:  # the server closed early without an error
                    raise http.client.IncompleteRead(b"", size - part.stat().st_size)
                break
            except (OSError, http.client.HTTPException) as err:
                now = part.stat().st_size if part.exists() else 0
                progressed, have = now > have, now
                fatal = isinstance(err, urllib.error.HTTPError) and err.code < 500
                if fatal or not progressed or attempt >= retries:
                    if not have:
                        part.unlink(missing_ok=True)  # nothing worth keeping
                    kept = f"; {have:,} bytes kept in {part}: rerun the same command to resume" if have else ""
                    raise DownloadError(f"cannot download {url}: {_reason(err)}{kept}") from err
                attempt += 1
                time.sleep(min(2.0**attempt, 10.0))
    finally:
        bar.close()
    if digest is not None:
        actual = file_digest(part, digest.algorithm)
        if not digest.matches(actual):
            part.unlink()
            raise DownloadError(
                f"{url}: {digest.algorithm} checksum mismatch (expected {digest.hexdigest}, got {actual}); "
                "the download was deleted: rerun to fetch it again"
            )
    return part

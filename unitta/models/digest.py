"""The digest of a checkpoint file: part of a cell's identity (docs/results.md, "Resume").

``checkpoint_digest(path)`` is the SHA-256 of the file's bytes, computed once per file and then cached by
(path, size, modification time, inode): replacing the file (``python -m unitta.models train fmnist``
overwrites the embedded one) changes the key, so the digest is computed again. No torch here.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

__all__ = ["checkpoint_digest", "bytes_digest"]

_CHUNK = 1 << 20
_cache: dict[tuple[str, int, int, int], str] = {}


def bytes_digest(data: bytes) -> str:
    """The SHA-256 (hex) of ``data``: what ``checkpoint_digest`` gives for a file holding these bytes."""
    return hashlib.sha256(data).hexdigest()


def _stat_key(path: Path) -> tuple[str, int, int, int]:
    st = os.stat(path)
    return (str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ino)


def checkpoint_digest(path: str | Path) -> str | None:
    """The SHA-256 (hex) of the file at ``path``, or None when there is no such file."""
    path = Path(path)
    try:
        key = _stat_key(path)
    except OSError:
        return None
    if key not in _cache:
        sha = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(_CHUNK), b""):
                sha.update(chunk)
        _cache[key] = sha.hexdigest()
    return _cache[key]

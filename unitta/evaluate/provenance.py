"""Where and with what a result was computed: the checkout's commit, Ray's version and node, the time
(the provenance columns of a result row, docs/results.md)."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path

__all__ = ["git_commit", "ray_version", "ray_node_id", "now"]


@lru_cache(maxsize=1)
def git_commit() -> str | None:
    """The checkout's commit (with '+dirty' when tracked files changed), or None outside a git checkout."""
    root = Path(__file__).resolve().parents[2]
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root, capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{sha}+dirty" if dirty else sha


def ray_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("ray")
    except Exception:  # ray is optional for in-process runs
        return None


def ray_node_id() -> str | None:
    if "ray" not in sys.modules:
        return None
    import ray

    return ray.get_runtime_context().get_node_id() if ray.is_initialized() else None


def now() -> datetime:
    return datetime.now(UTC)

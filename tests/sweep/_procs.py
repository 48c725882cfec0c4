"""Linux /proc helpers for the tests: find, watch and stop processes the tests themselves started."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    parts = raw.split(b"\0")
    if parts and parts[-1] == b"":
        parts = parts[:-1]
    return [p.decode(errors="replace") for p in parts]


def parent(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[1])  # field 4 (ppid), after the parenthesised name


def pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def ancestors(pid: int) -> list[int]:
    out, current = [], parent(pid)
    while current and current not in out:
        out.append(current)
        current = parent(current)
    return out


def descendants(root: int) -> list[int]:
    return [pid for pid in pids() if root in ancestors(pid)]


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def stop(pids_: list[int], timeout: float = 15.0) -> list[int]:
    """Wait up to ``timeout`` for these processes (started by the test) to end, then SIGKILL the rest.

    Returns the ones that had to be killed here.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(alive(p) for p in pids_):
        time.sleep(0.1)
    survivors = [p for p in pids_ if alive(p)]
    for pid in survivors:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return survivors


def unique_memory_bytes() -> int:
    """This process's private (unshared) resident memory: Private_Clean + Private_Dirty of smaps_rollup."""
    total = 0
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
        if line.startswith(("Private_Clean:", "Private_Dirty:")):
            total += int(line.split()[1]) * 1024
    return total

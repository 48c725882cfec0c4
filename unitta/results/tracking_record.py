"""``<out>/tracking.json``: where a results folder's cells were logged, written by ``unitta.track``, read by the report
(docs/tracking.md)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["RECORD_NAME", "read_tracking_record", "write_tracking_record"]

RECORD_NAME = "tracking.json"


def read_tracking_record(out: str | Path) -> dict[str, Any]:
    """{tracker name: where its runs are} (``Tracker.where``); {} for a folder never tracked or an unreadable file."""
    path = Path(out) / RECORD_NAME
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_tracking_record(out: str | Path, entries: dict[str, dict[str, Any]]) -> None:
    """Merge ``entries`` into the record (another tracker's entry stays), atomically."""
    path = Path(out) / RECORD_NAME
    data = {**read_tracking_record(out), **entries}
    tmp = path.with_name(f".{RECORD_NAME}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
    os.replace(tmp, path)

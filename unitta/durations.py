"""A duration in words for the messages a person reads (a progress line's ETA, a preparation's estimate)."""

from __future__ import annotations

__all__ = ["duration_text"]


def duration_text(seconds: float) -> str:
    """'45 s' (under 2 minutes), '12 min' (under 2 hours), '3.4 h'."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"

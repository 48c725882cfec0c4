"""Process-wide switches (the fast paths, ``norm/fast_paths.py``): a setting changed for one block of code only."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TypeVar

__all__ = ["scoped"]

T = TypeVar("T")


@contextlib.contextmanager
def scoped(get: Callable[[], T], set_: Callable[[T], None], value: T) -> Iterator[None]:
    """``set_(value)`` for the body only, the setting ``get()`` returned before restored afterwards (also on error)."""
    before = get()
    set_(value)
    try:
        yield
    finally:
        set_(before)

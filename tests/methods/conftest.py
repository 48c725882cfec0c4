"""Method tests run single-threaded: the machine's 2 cores are shared, and results then do not depend on it."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_thread):
    """Every method test module on one thread (tests/conftest.py, ``one_thread``)."""

"""Fixtures of the tune tests: the test session's one local Ray cluster (``ray_cluster``, tests/conftest.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def ray_session(ray_cluster):
    """The session's local Ray (2 CPUs; its 2 fake GPUs are unused by the tune and select configs here)."""
    return ray_cluster

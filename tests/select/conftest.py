"""Fixtures of the select tests: one local Ray cluster per test session, shared by every select test."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")


@pytest.fixture(scope="session")
def ray_session():
    """A local Ray with 2 CPUs, started once (or the one another test directory already started)."""
    import ray

    if ray.is_initialized():
        yield ray
        return
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
    yield ray
    ray.shutdown()

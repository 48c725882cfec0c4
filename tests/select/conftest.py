"""Fixtures of the select tests: the tune tests' local Ray session (one per test session, shared by both)."""

from tests.tune.conftest import ray_session  # noqa: F401 (a fixture, found by name)

"""Fixtures of the select tests: the tune tests' name for the session's one local Ray (tests/conftest.py)."""

from tests.tune.conftest import ray_session  # noqa: F401 (a fixture, found by name)

"""Method tests run single-threaded: the machine's 2 cores are shared, and results then do not depend on it."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module", autouse=True)
def _one_thread(one_thread):
    """Every method test module on one thread (tests/conftest.py, ``one_thread``)."""


@pytest.fixture
def fmnist_cell():
    """Run one small real cell of a method on the embedded Fashion-MNIST-C (setting i111, 10 images per
    corruption, one thread) through ``run_cell``, check that it ran and that its error is a percentage;
    returns the row. ``S``: the per-state cap; keyword arguments go to the method."""
    import math

    from unitta.cell import Cell
    from unitta.evaluate import run_cell

    def run(method: str, S: int | None = None, **method_kwargs) -> dict:
        cap = {} if S is None else {"S": S}
        cell = Cell(
            dataset="fmnist-c", method=method, setting="i111", n_per_domain=10, num_threads=1,
            method_kwargs=method_kwargs, **cap,
        )
        row = run_cell(cell)
        assert row["status"] == "ok", row["error_text"]
        assert math.isfinite(row["error"]) and 0.0 <= row["error"] <= 100.0 and row["n_samples"] > 0  # percent
        return row

    return run

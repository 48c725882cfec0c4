"""Fixtures of the sweep tests: small real cells (the session's Ray cluster is ``ray_cluster`` in tests/conftest.py).

Cells use the embedded Fashion-MNIST-C on a 200-images-per-domain subset (20 per class) and the
official sampler with S=5 (at most 750 images per stream; the settings used here give 80-380),
so one cell takes a second or two.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.built_once import built_once
from unitta.sweep.config import SweepConfig, parse_config

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")

SMALL = {"n_per_domain": 200, "S": 5, "batch_size": 64, "seeds": [425]}


def small_config(name: str = "small", methods=("test", "bn"), settings=("i111", "nui1"), **changes) -> SweepConfig:
    """A sweep config of small real cells (see the module docstring)."""
    data = {"name": name, "datasets": ["fmnist-c"], "methods": list(methods), "settings": list(settings), **SMALL}
    data.setdefault("resources", {"num_cpus": 1, "num_gpus": 0})
    data.update(changes)
    return parse_config(data)


REFERENCE_SETTINGS = ("i1i1", "nui1", "nuiu", "iunu")  # 83-167 images each with S=5


def metric_rows(df) -> dict[str, tuple]:
    """cell_id -> the values that must not depend on where or when a cell ran (results.METRIC_COLUMNS)."""
    from unitta.results import METRIC_COLUMNS

    return {r["cell_id"]: tuple(r[c] for c in METRIC_COLUMNS) for r in df.iter_rows(named=True)}


@pytest.fixture(scope="session")
def reference(tmp_path_factory):
    """small_config(settings=REFERENCE_SETTINGS) run --local (in this process, no Ray), uninterrupted."""
    from unitta.results import load_results
    from unitta.sweep import run_sweep

    def build(out: Path) -> None:
        outcome = run_sweep(small_config(settings=REFERENCE_SETTINGS), out, local=True, progress=False)
        assert (outcome.n_ok, outcome.n_failed) == (8, 0)
        assert set(load_results(out)["worker_pid"]) == {os.getpid()}  # --local: every cell in this process

    df = load_results(built_once(tmp_path_factory, "reference", build))  # once per test run (tests/built_once.py)
    assert df.height == 8 and set(df["status"]) == {"ok"}
    return df

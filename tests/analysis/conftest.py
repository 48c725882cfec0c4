"""A real, seeded result directory for the analysis tests: written once per test run by the sweep.

The embedded Fashion-MNIST-C, 40 images per domain (4 per class), S = 4: streams of a few hundred images,
3 methods x 3 settings that the paper's tables also have x 2 seeds = 18 cells, about a second each.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.built_once import built_once
from unitta.sweep import run_sweep
from unitta.sweep.config import parse_config

SEEDED_METHODS = ("test", "bn", "tent")
SEEDED_SETTINGS = ("i111", "n111", "nu11")
SEEDS = (425, 426)


def _seeded_sweep(out: Path) -> None:
    cfg = parse_config({"name": "tiny_seeds", "datasets": ["fmnist-c"], "methods": list(SEEDED_METHODS),
                        "settings": list(SEEDED_SETTINGS), "n_per_domain": 40, "S": 4, "seeds": list(SEEDS),
                        "resources": {"num_cpus": 1, "num_gpus": 0}})
    outcome = run_sweep(cfg, out, local=True, progress=False, log=lambda _: None)
    assert outcome.n_failed == 0


@pytest.fixture(scope="session")
def seeded_dir(tmp_path_factory) -> Path:
    """The seeded sweep's folder, written once per test run (tests/built_once.py); tests only read it."""
    return built_once(tmp_path_factory, "seeded_sweep", _seeded_sweep)

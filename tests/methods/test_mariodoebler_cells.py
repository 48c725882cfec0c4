"""One Fashion-MNIST-C cell per method of the mariodoebler TTA benchmark (bn_alpha, eta, eata, rdumb, sar), through
``run_cell`` on the embedded ResNet-20: the row is ok and the error is that of a working classifier.

300 images (20 per corruption, continual i111). The source model's error on them is about 43 %; a method that
broke the model would sit near chance (90 %). EATA loads the Fashion-MNIST training split as its source set
(256 images for the Fisher, to keep the test short).
"""

from __future__ import annotations

import json

import pytest

from unitta.cell import Cell
from unitta.evaluate import run_cell

CELLS = {
    "bn_alpha": {},
    "eta": {},
    "eata": {"num_source_samples": 256},
    "rdumb": {"reset_every": 2},  # resets inside this short stream
    "sar": {},
}


@pytest.mark.parametrize("name", sorted(CELLS))
def test_cell_runs_on_the_embedded_data(name):
    cell = Cell(
        dataset="fmnist-c", method=name, setting="i111", n_per_domain=20, num_threads=1, method_kwargs=CELLS[name]
    )
    row = run_cell(cell)
    assert row["status"] == "ok", row["error_text"]
    assert 10.0 < row["error"] < 60.0, row["error"]  # percent
    extra = json.loads(row["method_extra"])
    if name == "rdumb":
        assert extra["rdumb_resets"] >= 2
    if name in ("eta", "eata", "rdumb"):
        assert 0 < extra["eta_kept"] <= extra["eta_reliable"]

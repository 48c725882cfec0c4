"""Replacing a model's checkpoint recomputes its cells; rows from before the weights were part of a cell's
identity are not reused silently (docs/results.md, Resume)."""

from __future__ import annotations

import shutil

import pytest
import torch

from tests.sweep.conftest import small_config
from unitta.evaluate import run_cell
from unitta.models import zoo
from unitta.results import load_results, write_cell_result
from unitta.sweep import run_sweep


@pytest.fixture
def own_checkpoint(tmp_path, monkeypatch):
    """A copy of the embedded checkpoint that load_model and the cells use instead of the package's file."""
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    path = folder / "resnet20_fmnist.pt"
    shutil.copy(zoo.EMBEDDED_CHECKPOINT, path)
    monkeypatch.setattr(zoo, "EMBEDDED_DIR", folder)  # the embedded models are read from <dir>/<name>_fmnist.pt
    return path


def _retrain(path) -> None:
    """Other weights in the same file: the classifier's rows permuted (a model that predicts other classes)."""
    state = torch.load(path, weights_only=True)
    state["fc.weight"] = state["fc.weight"].roll(1, dims=0)
    state["fc.bias"] = state["fc.bias"].roll(1, dims=0)
    torch.save(state, path)


def test_replacing_the_checkpoint_recomputes_the_cells(tmp_path, own_checkpoint):
    cfg = small_config(methods=["test"], settings=["i111"])
    out = tmp_path / "out"
    first = run_sweep(cfg, out, local=True, progress=False)
    assert (first.n_ok, first.n_skipped) == (1, 0)
    same = run_sweep(small_config(methods=["test"], settings=["i111"]), out, local=True, progress=False)
    assert (same.n_ok, same.n_skipped) == (0, 1)  # unchanged weights: reused
    _retrain(own_checkpoint)
    again = run_sweep(small_config(methods=["test"], settings=["i111"]), out, local=True, progress=False)
    assert (again.n_ok, again.n_skipped) == (1, 0)
    df = load_results(out).sort("finished_at")
    assert df.height == 2 and df["model_weights"].n_unique() == 2
    assert df["error"][0] != df["error"][1]  # the new weights' result, not the stale one


def test_a_cell_planned_with_other_weights_fails_saying_why(own_checkpoint):
    cell = small_config(methods=["test"], settings=["i111"]).cells()[0]
    cell.cell_id()  # planned (the digest is fixed now), as the driver does before submitting
    _retrain(own_checkpoint)
    row = run_cell(cell)
    assert row["status"] == "failed"
    assert "not those the cell was planned with" in row["error_text"]


def test_rows_from_before_the_weights_were_in_the_identity(tmp_path, own_checkpoint, capsys):
    out = tmp_path / "out"
    cell = small_config(methods=["test"], settings=["i111"]).cells()[0]
    old_row = {**cell.coordinates(), "cell_id": cell.cell_id_before_weights(), "status": "ok", "error": 50.0}
    write_cell_result(out, old_row)
    # the shipped weights: the rows of before were computed with them, so they keep their ids and are reused
    same = run_sweep(small_config(methods=["test"], settings=["i111"]), out, local=True, progress=False)
    assert (same.n_ok, same.n_skipped) == (0, 1)
    _retrain(own_checkpoint)
    capsys.readouterr()
    other = run_sweep(small_config(methods=["test"], settings=["i111"]), out, local=True, progress=False)
    assert (other.n_ok, other.n_skipped) == (1, 0)
    err = capsys.readouterr().err
    assert "1 cell(s) have rows written before the model weights were part of a cell's identity" in err
    assert load_results(out).height == 2  # the old row is kept under its old id

"""A cell's identity covers the weights its model loads (docs/results.md, Resume)."""

from __future__ import annotations

import os
import pickle

import pytest

from unitta.cell import Cell


def _cifar_cell(ckpt) -> Cell:
    return Cell(dataset="cifar10-c", method="bn", checkpoint_dir=str(ckpt))


def test_replacing_the_checkpoint_gives_another_cell_id(tmp_path):
    path = tmp_path / "cifar10" / "corruptions" / "Standard.pt"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"weights A")
    a = _cifar_cell(tmp_path)
    a_id = a.cell_id()
    new = tmp_path / "new.pt"
    new.write_bytes(b"weights B")
    os.replace(new, path)
    b = _cifar_cell(tmp_path)
    assert a_id != b.cell_id() and a.weights != b.weights
    # where the weights live is placement: the same bytes elsewhere are the same cell
    other = tmp_path / "elsewhere" / "cifar10" / "corruptions" / "Standard.pt"
    other.parent.mkdir(parents=True)
    other.write_bytes(b"weights B")
    assert _cifar_cell(tmp_path / "elsewhere").cell_id() == b.cell_id()


def test_the_weights_travel_with_the_cell(tmp_path):
    path = tmp_path / "cifar10" / "corruptions" / "Standard.pt"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"weights A")
    cell = _cifar_cell(tmp_path)
    planned = cell.cell_id()
    path.write_bytes(b"weights C")  # changed after the driver planned the cell
    shipped = pickle.loads(pickle.dumps(cell))  # as Ray ships it to a worker
    assert shipped.cell_id() == planned and shipped.weights == cell.weights


def test_the_shipped_weights_keep_the_earlier_id_and_other_weights_do_not(tmp_path, monkeypatch):
    from unitta.models import zoo

    cell = Cell()
    assert cell.cell_id() == cell.cell_id_before_weights()  # rows from before the change keep their ids
    assert "weights" not in cell.identity() and cell.coordinates()["model_weights"] == cell.weights
    own = tmp_path / "resnet20_fmnist.pt"
    own.write_bytes(zoo.EMBEDDED_CHECKPOINT.read_bytes() + b"retrained")
    monkeypatch.setattr(zoo, "EMBEDDED_DIR", tmp_path)  # the embedded models are read from <dir>/<name>_fmnist.pt
    retrained = Cell()
    assert retrained.identity()["weights"] == retrained.weights != cell.weights
    assert retrained.cell_id() != retrained.cell_id_before_weights() == cell.cell_id()


def test_an_unknown_device_is_refused_when_the_cell_is_made():
    with pytest.raises(ValueError, match="device: expected 'auto', 'cpu', 'cuda', 'cuda:N'"):
        Cell(device="tpu")
    assert Cell(device="cuda:1").device == "cuda:1"


def test_a_plan_resolves_once_per_method_and_keeps_every_id():
    """``share_resolution`` (what ``SweepConfig.cells`` does): the same ids as cells that resolve on their own."""
    import dataclasses

    from unitta.cell.resolution import share_resolution

    cells = share_resolution([Cell(method=m, setting=s, seed=seed, method_kwargs=kw)
                              for m, kw in (("test", {}), ("tent", {}), ("tent", {"lr": 1e-4}))
                              for s in ("i111", "nui1") for seed in (1, 2)])
    alone = [dataclasses.replace(c) for c in cells]  # a new instance resolves for itself
    assert [c.cell_id() for c in cells] == [c.cell_id() for c in alone]
    assert [c.identity() for c in cells] == [c.identity() for c in alone]
    tent = [c for c in cells if c.method == "tent" and not c.method_kwargs]
    assert all(c.method_config is tent[0].method_config for c in tent)  # resolved once for the four cells
    assert cells[4].method_config != cells[8].method_config  # other overrides: resolved apart

"""A checkpoint that cannot serve the model is said before the first cell (``--dry-run`` too), in words that fit:
weights of another architecture or another head size name the mismatch; a file that is not a checkpoint at all
(random bytes, text) says so, not that it "pickles more than tensors"."""

from __future__ import annotations

import pytest
import torch
import torchvision

from unitta.cell import Cell
from unitta.data.export import export_fmnist_c
from unitta.models.zoo import CheckpointError, read_checkpoint
from unitta.run.checks import problems

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return export_fmnist_c(tmp_path_factory.mktemp("own") / "images", ["fog", "snow"], n_per_domain=10)[0]


@pytest.mark.parametrize("content", [bytes(range(256)) * 20, b"hello, this is not a checkpoint\n"])
def test_a_file_that_is_no_checkpoint_says_so(tmp_path, content):
    path = tmp_path / "weights.pth"
    path.write_bytes(content)
    with pytest.raises(CheckpointError, match="not a torch checkpoint") as err:
        read_checkpoint(path)
    assert "pickles" not in str(err.value)


def _cell(folder, checkpoint):
    return Cell(dataset="folder", data_dir=str(folder), model="torchvision:resnet18", checkpoint=str(checkpoint),
                method="test", sampler="sorted", setting="1111")


def test_preflight_names_another_head_size_and_another_architecture(folder, tmp_path):
    head = tmp_path / "r18_1000.pth"
    torch.save(torchvision.models.resnet18(weights=None).state_dict(), head)
    other = tmp_path / "r34_10.pth"
    torch.save(torchvision.models.resnet34(weights=None, num_classes=10).state_dict(), other)
    garbage = tmp_path / "garbage.pth"
    garbage.write_bytes(bytes(range(256)) * 20)
    fits = tmp_path / "r18_10.pth"
    torch.save(torchvision.models.resnet18(weights=None, num_classes=10).state_dict(), fits)
    assert not [p for p in problems([_cell(folder, fits)]) if "r18_10" in p]
    (found,) = [p for p in problems([_cell(folder, head)]) if "r18_1000" in p]
    assert "its classifier has 1000 classes, the dataset has 10" in found
    (found,) = [p for p in problems([_cell(folder, other)]) if "r34_10" in p]
    assert "does not fit torchvision:resnet18" in found and "unexpected keys" in found
    (found,) = [p for p in problems([_cell(folder, garbage)]) if "garbage" in p]
    assert "not a torch checkpoint" in found

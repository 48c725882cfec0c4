"""Checkpoints are never unpickled beyond tensors unless the user opts in (trust_checkpoints)."""

import pathlib

import pytest
import torch

from unitta.models import build_model, load_model
from unitta.models.zoo import CheckpointError, read_state_dict


class _Payload:
    """Unpickling this creates ``marker``: a stand-in for any code a crafted checkpoint could run."""

    def __init__(self, marker: pathlib.Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (pathlib.Path.touch, (self.marker,))


@pytest.fixture(scope="module")
def crafted(tmp_path_factory):
    """A robustbench-layout CIFAR-100 checkpoint that fits the model but carries the payload."""
    root = tmp_path_factory.mktemp("ckpt")
    model, _ = build_model("cifar100-c")
    path = root / "cifar100" / "corruptions" / "Hendrycks2020AugMix_ResNeXt.pt"
    path.parent.mkdir(parents=True)
    marker = root / "marker"
    torch.save({"state_dict": model.state_dict(), "extra": _Payload(marker)}, path)
    return root, path, marker, model


def test_a_crafted_checkpoint_is_refused_and_its_code_never_runs(crafted):
    root, path, marker, _ = crafted
    with pytest.raises(CheckpointError) as err:
        load_model("cifar100-c", checkpoint_dir=root)
    message = str(err.value)
    assert str(path) in message and "trust_checkpoints=True" in message and "\n" not in message
    assert not marker.exists()


def test_with_trust_it_loads(crafted):
    root, path, marker, model = crafted
    with pytest.warns(UserWarning, match="unpickling it as trusted"):
        loaded, info = load_model("cifar100-c", checkpoint_dir=root, trust_checkpoints=True)
    assert marker.exists()  # the opt-in really unpickles
    assert info.extra["checkpoint"] == str(path)
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name
    marker.unlink()


def test_a_plain_state_dict_needs_no_trust(tmp_path):
    path = tmp_path / "plain.pt"
    torch.save({"model_state_dict": {"module.fc.weight": torch.ones(2, 2)}}, path)
    assert list(read_state_dict(path)) == ["fc.weight"]


def test_a_truncated_file_is_one_line(tmp_path):
    path = tmp_path / "short.pt"
    torch.save({"w": torch.ones(1000)}, path)
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(CheckpointError, match=f"{path}: not a readable torch checkpoint"):
        read_state_dict(path)

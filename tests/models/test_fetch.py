"""``python -m unitta.models fetch``: checkpoints from a local mirror, verified by loading, never half-written."""

import io
import pathlib

import pytest
import torch

from tests.free_ports import free_ports
from tests.local_http import Served, serve
from unitta.models import build_model, load_model
from unitta.models.__main__ import main
from unitta.models.fetch import fetch_checkpoint

RELATIVE = "cifar100/corruptions/Hendrycks2020AugMix_ResNeXt.pt"


def _saved(obj) -> bytes:
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


@pytest.fixture(scope="module")
def resnext():
    """The CIFAR-100 model with random weights (seed 0) and its checkpoint bytes."""
    torch.manual_seed(0)
    model, _ = build_model("cifar100-c")
    return model, _saved({"state_dict": model.state_dict()})


@pytest.fixture
def mirror(monkeypatch):
    def point(served: Served) -> None:
        monkeypatch.setenv("UNITTA_CHECKPOINT_MIRROR", served.base)

    return point


def test_fetch_resumes_a_dropped_transfer_and_load_model_reads_the_result(tmp_path, resnext, mirror, capsys):
    model, data = resnext
    served = Served(files={f"/{RELATIVE}": data}, drop_after={f"/{RELATIVE}": len(data) // 3})
    with serve(served):
        mirror(served)
        assert main(["fetch", "cifar100-c", "--dir", str(tmp_path), "--quiet"]) == 0
    assert [r for _, r in served.log] == [None, f"bytes={len(data) // 3}-"]
    assert str(tmp_path / RELATIVE) in capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / RELATIVE).parent.iterdir()) == ["Hendrycks2020AugMix_ResNeXt.pt"]
    loaded, _ = load_model("cifar100-c", checkpoint_dir=tmp_path)
    for name, tensor in model.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name


class _Payload:
    def __init__(self, marker: pathlib.Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (pathlib.Path.touch, (self.marker,))


def test_a_crafted_checkpoint_is_refused_and_not_installed(tmp_path, resnext, mirror, capsys):
    model, _ = resnext
    marker = tmp_path / "marker"
    data = _saved({"state_dict": model.state_dict(), "extra": _Payload(marker)})
    with serve(Served(files={f"/{RELATIVE}": data})) as served:
        mirror(served)
        assert main(["fetch", "cifar100-c", "--dir", str(tmp_path / "ckpt"), "--quiet"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not a plain state_dict" in err and "Traceback" not in err
    assert not marker.exists()
    assert list((tmp_path / "ckpt" / RELATIVE).parent.iterdir()) == []


def test_a_file_that_does_not_fit_the_model_is_not_installed(tmp_path, mirror):
    data = _saved({"state_dict": {"conv.weight": torch.zeros(1)}})
    with serve(Served(files={f"/{RELATIVE}": data})) as served:
        mirror(served)
        with pytest.raises(ValueError, match="does not fit"):
            fetch_checkpoint("cifar100-c", directory=tmp_path, progress=False)
    assert not (tmp_path / RELATIVE).exists()


def test_torchvision_weights_are_checked_against_the_hash_in_their_name(tmp_path, mirror, capsys):
    with serve(Served(files={"/resnet50-0676ba61.pth": b"not the weights" * 100})) as served:
        mirror(served)
        assert main(["fetch", "imagenet-c", "--dir", str(tmp_path), "--quiet"]) == 1
    err = capsys.readouterr().err.strip()
    assert "sha256 checksum mismatch (expected 0676ba61" in err and len(err.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_unreachable_mirror_is_one_line_with_the_manual_alternative(tmp_path, monkeypatch, capsys):
    [port] = free_ports(1)  # nobody listens there
    monkeypatch.setenv("UNITTA_CHECKPOINT_MIRROR", f"http://127.0.0.1:{port}")
    assert main(["fetch", "cifar100-c", "--dir", str(tmp_path), "--quiet"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"127.0.0.1:{port}" in err
    assert f"copy DIR/{RELATIVE} to {tmp_path / RELATIVE}" in err


def test_the_embedded_model_needs_nothing(tmp_path, capsys):
    assert main(["fetch", "fmnist-c", "--dir", str(tmp_path)]) == 0
    assert "resnet20_fmnist.pt" in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []


def test_vit_weights_are_checked_against_the_hash_in_their_name(tmp_path, mirror, capsys):
    with serve(Served(files={"/vit_b_16-c867db91.pth": b"not the weights" * 100})) as served:
        mirror(served)
        assert main(["fetch", "imagenet-c", "--name", "vit_b_16", "--dir", str(tmp_path), "--quiet"]) == 1
    err = capsys.readouterr().err.strip()
    assert "sha256 checksum mismatch (expected c867db91" in err and len(err.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_resnet26_gn_has_no_public_source_and_says_where_the_file_goes(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("UNITTA_CHECKPOINT_MIRROR", raising=False)
    assert main(["fetch", "cifar10-c", "--name", "resnet26_gn", "--dir", str(tmp_path), "--quiet"]) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(tmp_path / "resnet26_gn.pth") in err
    assert list(tmp_path.iterdir()) == []

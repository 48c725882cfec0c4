"""Weights that cannot be loaded into the model a config names (issue 52 item 2; docs/own_data.md, "Your model"):
another architecture's weights, a truncated ``.safetensors``, a ViT at an input size its patches do not divide, a
ViT checkpoint trained at 32 pixels run at 48: each is one line of the preflight naming the model, the file and the fix, at
``--dry-run``, exit code 2, nothing written (never a traceback)."""

from __future__ import annotations

import pytest
import torch

from unitta.__main__ import main as unitta_main
from unitta.data.export import export_fmnist_c

pytestmark = pytest.mark.usefixtures("one_thread")

BUILDERS = ("import torch\n"
            "def narrow(num_classes):\n"
            "    return torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),\n"
            "        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(4, num_classes))\n"
            "def wide(num_classes):\n"
            "    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),\n"
            "        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, num_classes))\n")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return export_fmnist_c(tmp_path_factory.mktemp("own") / "images", ["fog", "snow"], n_per_domain=10)[0]


def _dry_run(tmp_path, folder, model: str, checkpoint, capsys, monkeypatch, **keys) -> list[str]:
    extra = "".join(f"{k}: {v}\n" for k, v in keys.items())
    (tmp_path / "own.yaml").write_text(
        f"name: own\ndatasets: [folder]\ndata_dir: {folder}\nsampler: sorted\nmethods: [test]\n"
        f"models: {{folder: '{model}'}}\ncheckpoint: {checkpoint}\noutput: {tmp_path / 'out'}\n{extra}")
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert unitta_main(["sweep", "own.yaml", "--dry-run"]) == 2
    assert not (tmp_path / "out").exists()
    head, *err = capsys.readouterr().err.strip().splitlines()
    assert head == "error: 1 problem(s) found before running:", head  # the preflight's list: one problem, one line
    assert len(err) == 1 and "Traceback" not in err[0] and "bug" not in err[0], err
    return err


def _builders(tmp_path):
    (tmp_path / "shapes_models.py").write_text(BUILDERS)
    return tmp_path / "shapes_models.py"


def test_another_architectures_weights_are_one_line(folder, tmp_path, capsys, monkeypatch):
    import importlib.util

    path = _builders(tmp_path)
    spec = importlib.util.spec_from_file_location("shapes_models_here", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.save(module.wide(10).state_dict(), tmp_path / "wide.pth")
    (err,) = _dry_run(tmp_path, folder, "shapes_models.py:narrow", tmp_path / "wide.pth", capsys, monkeypatch)
    assert "shapes_models.py:narrow" in err and "wide.pth" in err and "0.weight" in err
    assert "weights trained for this model" in err


def test_a_truncated_safetensors_file_is_one_line(folder, tmp_path, capsys, monkeypatch):
    from safetensors.torch import save

    data = save({"0.weight": torch.zeros(4, 3, 3, 3)})
    (tmp_path / "cut.safetensors").write_bytes(data[: len(data) // 2])
    _builders(tmp_path)
    (err,) = _dry_run(tmp_path, folder, "shapes_models.py:narrow", tmp_path / "cut.safetensors", capsys, monkeypatch)
    assert "cut.safetensors" in err and "shapes_models.py:narrow" in err and "copy" in err


def test_a_vit_at_a_side_its_patches_do_not_divide_is_one_line(folder, tmp_path, capsys, monkeypatch):
    (tmp_path / "any.pth").write_bytes(b"")
    (err,) = _dry_run(tmp_path, folder, "torchvision:vit_b_16", tmp_path / "any.pth", capsys, monkeypatch, input_size=33)
    assert "torchvision:vit_b_16" in err and "input_size" in err and "16" in err


def test_a_vit_checkpoint_for_32_pixels_at_48_is_one_line(folder, tmp_path, capsys, monkeypatch):
    from unitta.models.custom import build_custom

    model, _ = build_custom("timm:vit_tiny_patch16_224", 10, 32)
    torch.save(model.model.state_dict(), tmp_path / "vit32.pth")
    (err,) = _dry_run(tmp_path, folder, "timm:vit_tiny_patch16_224", tmp_path / "vit32.pth", capsys, monkeypatch,
                      input_size=48)
    assert "vit32.pth" in err and "timm:vit_tiny_patch16_224" in err and "input_size" in err


def test_a_plain_pickle_of_a_model_is_named_as_pickled_code(tmp_path):
    """Issue 52 weak item: a model saved with ``pickle.dump`` (code, not a torch file) was 'not a torch checkpoint';
    it is named for what it pickles and how to re-save it (docs/models.md, docs/own_data.md)."""
    import pickle

    from unitta.models.zoo import CheckpointError, read_checkpoint

    path = tmp_path / "model.pkl"
    with open(path, "wb") as f:
        pickle.dump(torch.nn.Linear(2, 2), f)
    with pytest.raises(CheckpointError) as err:
        read_checkpoint(path)
    assert "torch.nn.modules.linear.Linear" in str(err.value) and "not a torch checkpoint" not in str(err.value)
    assert "state_dict()" in str(err.value)
    from unitta.models.zoo import pickled_code_problem

    assert "torch.nn.modules.linear.Linear" in pickled_code_problem(path)  # the preflight's line, before any cell
    legacy = tmp_path / "legacy.pth"
    torch.save(torch.nn.Linear(2, 2).state_dict(), legacy, _use_new_zipfile_serialization=False)
    assert pickled_code_problem(legacy) is None and read_checkpoint(legacy)[0]

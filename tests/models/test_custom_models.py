"""Models beyond the zoo (docs/own_data.md, "Your model"): ``torchvision:resnet18`` with a tensors-only checkpoint
runs a TEST cell on an image folder, a checkpoint that pickles code is refused unless trusted, a head of another
size is one line naming both sizes, the BDN layer is chosen as for the zoo's models, a LayerNorm timm model is
refused by BatchNorm-only methods, and a user's builder file works. No network: weights=None, saved here."""

from __future__ import annotations

import collections

import pytest
import torch
import torchvision

from unitta.cell import Cell
from unitta.data.export import export_fmnist_c
from unitta.evaluate import evaluate, run_cell
from unitta.models.any_model import choose_bdn_layer
from unitta.models.zoo import CheckpointError

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return export_fmnist_c(tmp_path_factory.mktemp("own") / "images", ["fog", "snow", "contrast"], n_per_domain=10)[0]


@pytest.fixture(scope="module")
def resnet18_file(tmp_path_factory):
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("ckpt") / "resnet18_folder.pth"
    torch.save(torchvision.models.resnet18(weights=None, num_classes=10).state_dict(), path)
    return path


def test_torchvision_model_runs_a_test_cell(folder, resnet18_file):
    cell = Cell(dataset="folder", data_dir=str(folder), model="torchvision:resnet18", checkpoint=str(resnet18_file),
                method="test", sampler="sorted", setting="1111", batch_size=30)
    row = evaluate(cell)
    assert row["n_samples"] == 30 and row["model"] == "torchvision:resnet18"
    assert row["model_weights"] == cell.weights and cell.identity()["weights"] == cell.weights
    other = Cell(dataset="folder", data_dir=str(folder), model="torchvision:resnet18", checkpoint=str(resnet18_file),
                 method="bn", sampler="sorted", setting="1111", batch_size=30)
    assert run_cell(other)["status"] == "ok"


def test_pickled_code_refused_unless_trusted(folder, resnet18_file, tmp_path):
    pickled = tmp_path / "pickled.pth"
    torch.save({"state_dict": torch.load(resnet18_file), "meta": collections.OrderedDict(a=1),
                "code": torch.nn.Identity()}, pickled)
    cell = dict(dataset="folder", data_dir=str(folder), model="torchvision:resnet18", checkpoint=str(pickled),
                method="test", sampler="sorted", setting="1111", batch_size=30)
    with pytest.raises(CheckpointError, match="not a plain state_dict"):
        evaluate(Cell(**cell))
    with pytest.warns(UserWarning, match="unpickling it as trusted"):
        assert evaluate(Cell(**cell, trust_checkpoints=True))["n_samples"] == 30


def test_head_of_another_size(folder, tmp_path):
    path = tmp_path / "r18_1000.pth"
    torch.save(torchvision.models.resnet18(weights=None).state_dict(), path)
    cell = Cell(dataset="folder", data_dir=str(folder), model="torchvision:resnet18", checkpoint=str(path))
    with pytest.raises(ValueError, match="its classifier has 1000 classes, the dataset has 10"):
        evaluate(cell)


def test_bdn_layer_as_for_the_zoo(embedded_model):
    from unitta.models.catalog import IMAGENET_MEAN, IMAGENET_STD, Normalized
    from unitta.nn.batchnorm import named_batchnorms

    _, info = embedded_model
    assert choose_bdn_layer(info.bn_layers) == info.bdn_layer == "layer2.0.bn1"
    r50 = Normalized(torchvision.models.resnet50(weights=None), IMAGENET_MEAN, IMAGENET_STD)
    assert choose_bdn_layer([n for n, _ in named_batchnorms(r50)]) == "model.layer3.0.bn1"  # the zoo's Standard_R50


def test_layernorm_model_refused_by_batchnorm_methods(folder):
    from unitta.sweep.config import ConfigError, parse_config

    base = {"name": "x", "datasets": ["folder"], "data_dir": str(folder), "settings": ["i111"],
            "models": {"folder": "timm:vit_tiny_patch16_224"}}
    with pytest.raises(ConfigError, match="layer"):
        parse_config({**base, "methods": ["bn"]})
    assert parse_config({**base, "methods": ["test"]}).cells()[0].model == "timm:vit_tiny_patch16_224"


def test_builder_file(folder, tmp_path):
    (tmp_path / "my_models.py").write_text(
        "import torch\n"
        "def build(num_classes):\n"
        "    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),\n"
        "                              torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, num_classes))\n"
        "    net.input_size = 32\n"
        "    return net\n"
    )
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("my_models_t", tmp_path / "my_models.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    torch.save(module.build(10).state_dict(), tmp_path / "mine.pth")
    sys.modules.pop("my_models", None)
    from unitta.sweep.config import parse_config

    cfg = parse_config({"name": "x", "datasets": ["folder"], "data_dir": str(folder),
                        "sampler": "sorted", "methods": ["tent"], "checkpoint": str(tmp_path / "mine.pth"),
                        "models": {"folder": "my_models.py:build"}}, base_dir=tmp_path)
    (cell,) = cfg.cells()
    assert cell.model == f"{tmp_path / 'my_models.py'}:build"
    row = run_cell(cell)
    assert row["status"] == "ok", row["error_text"]
    assert row["n_samples"] == 30


def test_builder_ships_and_imports_by_name_where_its_path_is_absent(tmp_path, monkeypatch):
    from unitta.models.custom import build_custom
    from unitta.plugins import model_builders, runtime_env

    (tmp_path / "shipped_models.py").write_text(
        "import torch\ndef build(num_classes):\n    return torch.nn.Sequential(torch.nn.Flatten(), "
        "torch.nn.Linear(3 * 8 * 8, num_classes))\n")
    spec = f"{tmp_path / 'shipped_models.py'}:build"
    assert runtime_env(model_builders({"folder": spec})) == {"py_modules": [str(tmp_path / "shipped_models.py")]}
    # a worker: Ray's py_modules put the file on the import path; the driver's absolute path does not exist there
    monkeypatch.syspath_prepend(str(tmp_path))
    model, size = build_custom("/nowhere/shipped_models.py:build", 4)
    assert size == 224 and model[1].out_features == 4


def test_input_size_runs_a_torchvision_model_at_the_images_own_side(folder, resnet18_file):
    """input_size: 32 decodes the 32-pixel folder at 32 (not upsampled to 224): the same error as the model on
    the PNGs as they are; the id changes with it; a zoo model refuses it; a ViT is built for the side asked."""
    import numpy as np
    from PIL import Image

    from unitta.models.custom import build_custom

    common = dict(dataset="folder", data_dir=str(folder), model="torchvision:resnet18", checkpoint=str(resnet18_file),
                  method="test", sampler="sorted", setting="1111", batch_size=30)
    row = evaluate(Cell(**common, input_size=32))
    model = torchvision.models.resnet18(weights=None, num_classes=10)
    model.load_state_dict(torch.load(resnet18_file))
    paths = sorted(folder.glob("*/*/*.png"))
    classes = sorted({p.parent.name for p in paths})
    x = torch.from_numpy(np.stack([np.asarray(Image.open(p).convert("RGB")) for p in paths])).permute(0, 3, 1, 2)
    mean, std = torch.tensor([0.485, 0.456, 0.406])[:, None, None], torch.tensor([0.229, 0.224, 0.225])[:, None, None]
    with torch.no_grad():
        predicted = model.eval()((x.float() / 255 - mean) / std).argmax(1)
    wrong = int((predicted != torch.tensor([classes.index(p.parent.name) for p in paths])).sum())
    assert row["input_size"] == 32 and row["n_samples"] - row["n_correct"] == wrong
    assert Cell(**common, input_size=32).cell_id() != Cell(**common).cell_id()
    with pytest.raises(ValueError, match="input_size=32: for a torchvision"):
        Cell(dataset="fmnist-c", input_size=32)
    vit, side = build_custom("torchvision:vit_b_16", 10, input_size=32)
    assert side == 32 and vit.model.image_size == 32

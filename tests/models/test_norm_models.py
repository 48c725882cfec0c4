"""The LayerNorm / GroupNorm models of the zoo: ViT-B/16, Swin-B (imagenet-c) and the ResNet-26-GN (cifar10-c).

Random weights (no checkpoint, no network), reduced inputs on CPU: each builds with the normalisation kind the
zoo's table states, adapts one batch with TENT (only the norm affine parameters move), and loads a checkpoint
file through the safe path (``torch.load(weights_only=True)``).
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from unitta.methods import get_method
from unitta.models import build_model, checkpoint_path, list_models, load_model
from unitta.models.zoo import CheckpointError, model_norm_kind

# dataset, name, norm kind, norm layer type, reduced input side, classifier
NORM_MODELS = [
    ("imagenet-c", "vit_b_16", "layer", nn.LayerNorm, 32, "model.heads.head"),
    ("imagenet-c", "swin_b", "layer", nn.LayerNorm, 32, "model.head"),
    ("cifar10-c", "resnet26_gn", "group", nn.GroupNorm, 32, "model.fc"),
]


pytestmark = pytest.mark.usefixtures("one_thread")


def test_list_models_names_them_under_their_datasets():
    models = list_models()
    assert {"vit_b_16", "swin_b"} <= set(models["imagenet-c"]) and models["imagenet-c"][0] == "Standard_R50"
    assert "resnet26_gn" in models["cifar10-c"] and models["cifar10-c"][0] == "Standard"
    assert models["fmnist-c"] == ["resnet20", "vit_tiny"]


@pytest.mark.slow  # ViT-B/16 and Swin-B take seconds to initialise on a CPU
@pytest.mark.parametrize("dataset,name,kind,norm_type,side,classifier", NORM_MODELS)
def test_builds_with_its_norm_kind_and_tent_adapts_one_batch(dataset, name, kind, norm_type, side, classifier):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model, info = build_model(dataset, name, input_size=side)
        modules = dict(model.named_modules())
        nn.init.normal_(modules[classifier].weight, std=0.1)  # torchvision's ViT head starts at zero: no gradient
        x = torch.rand(4, 3, side, side)
    assert model_norm_kind(dataset, name) == kind == info.norm_kind
    assert info.bn_layers == () and info.bdn_layer is None
    assert info.norm_layers == tuple(n for n, m in model.named_modules() if isinstance(m, norm_type))
    assert len(info.norm_layers) > 0
    assert info.classifier == classifier and isinstance(modules[classifier], nn.Linear)
    with pytest.raises(ValueError, match=f"no BatchNorm layer.*{kind!r}"):
        info.check_bn_layer("anything")

    method = get_method("tent", model, info, dataset=dataset, optimizer="sgd", lr=0.1)
    before = {k: v.clone() for k, v in method.model.named_parameters()}
    logits = method(x)
    assert logits.shape == (4, info.num_classes) and torch.isfinite(logits).all()
    after = dict(method.model.named_parameters())
    moved = {k for k in before if not torch.equal(before[k], after[k])}
    norm_params = {f"{layer}.{p}" for layer in info.norm_layers for p in ("weight", "bias")}
    assert moved and moved <= norm_params, sorted(moved - norm_params)[:3]


@pytest.mark.slow  # ViT-B/16 and Swin-B take seconds to initialise on a CPU
@pytest.mark.parametrize("dataset,name,kind,norm_type,side,classifier", NORM_MODELS)
def test_a_checkpoint_file_loads_through_the_safe_path(tmp_path, dataset, name, kind, norm_type, side, classifier):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        source, info = build_model(dataset, name)
    bare = source.model.state_dict()  # the network's own keys, as torchvision's / the reference's file has them
    path = checkpoint_path(dataset, name, tmp_path)
    assert path.parent == tmp_path  # the file of its own name, not robustbench's layout
    # resnet26_gn.pth holds its state_dict under 'net' (the mariodoebler benchmark loads checkpoint['net'])
    torch.save({"net": bare, "epoch": 3} if name == "resnet26_gn" else bare, path)
    loaded, loaded_info = load_model(dataset, name, checkpoint_dir=tmp_path)
    assert loaded_info == info and not loaded.training
    state = loaded.state_dict()
    assert all(torch.equal(state[k], v) for k, v in source.state_dict().items())

    torch.save({"net": bare, "opt": torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=0.1)}, path)
    with pytest.raises(CheckpointError, match="not a plain state_dict"):
        load_model(dataset, name, checkpoint_dir=tmp_path)


@pytest.mark.parametrize("dataset,name,expected", [
    ("imagenet-c", "vit_b_16", "vit_b_16-c867db91.pth"),
    ("imagenet-c", "swin_b", "swin_b-68c6b09e.pth"),
    ("cifar10-c", "resnet26_gn", "resnet26_gn.pth"),
])
def test_missing_checkpoint_names_the_file(tmp_path, dataset, name, expected):
    with pytest.raises(FileNotFoundError, match=str(tmp_path / expected)):
        load_model(dataset, name, checkpoint_dir=tmp_path)


def test_the_cli_lists_every_model_with_its_norm_kind(capsys):
    from unitta.models.__main__ import main

    assert main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert any(line.split()[:3] == ["imagenet-c", "swin_b", "layer"] for line in lines)
    assert any(line.split() == ["fmnist-c", "resnet20", "batch", "(default)"] for line in lines)
    assert len(lines) == sum(len(names) for names in list_models().values())


def test_the_embedded_vit_is_a_real_classifier():
    import numpy as np

    from unitta.data.fashion_mnist import read_fashion_mnist
    from unitta.models.train import pad_to_32, to_input

    model, info = load_model("fmnist-c", "vit_tiny")
    assert (info.norm_kind, info.classifier, info.input_size) == ("layer", "head", 32) and not model.training
    images, labels = read_fashion_mnist("test")
    n = 1000
    with torch.no_grad():
        pred = model(to_input(pad_to_32(images[:n]))).argmax(1).numpy()
    error = float(np.mean(pred != labels[:n]))
    # 10.32 % clean error on the 10,000 test images (docs/models.md); with 1,000 images the standard error is
    # about 1.0 pp, so 3.5 standard errors of slack above the 12 % the embedded ViT must reach
    assert error <= 0.12 + 3.5 * np.sqrt(0.12 * 0.88 / n), error
    assert checkpoint_path("fmnist-c", "vit_tiny").stat().st_size < 1_000_000  # float32 state_dict, 0.86 MB

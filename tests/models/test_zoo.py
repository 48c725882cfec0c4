"""load_model: the embedded checkpoint and the paper's robustbench models, offline (docs/models.md)."""

import subprocess
import sys

import numpy as np
import pytest
import torch
from torch import nn

from unitta.data.fashion_mnist import read_fashion_mnist
from unitta.models import ModelInfo, build_model, checkpoint_path, load_model
from unitta.models.train import pad_to_32, to_input

PAPER_MODELS = [
    # dataset, default name, classifier, BDN layer, K, input side
    ("cifar10-c", "Standard", "fc", "block2.layer.0.bn1", 10, 32),
    ("cifar100-c", "Hendrycks2020AugMix_ResNeXt", "classifier", "stage_2.0.bn", 100, 32),
    ("imagenet-c", "Standard_R50", "model.fc", "model.layer3.0.bn1", 1000, 224),
]


def _check_info(model: nn.Module, info: ModelInfo) -> None:
    modules = dict(model.named_modules())
    assert info.bn_layers, "no BatchNorm layers found"
    assert all(isinstance(modules[name], nn.BatchNorm2d) for name in info.bn_layers)
    # every BatchNorm of the model, in module order
    assert list(info.bn_layers) == [n for n, m in model.named_modules() if isinstance(m, nn.BatchNorm2d)]
    assert info.bdn_layer in info.bn_layers
    assert isinstance(modules[info.classifier], nn.Linear)
    assert modules[info.classifier].out_features == info.num_classes


def test_embedded_model_loads_in_eval_mode_and_is_accurate():
    torch.set_num_threads(1)
    model, info = load_model("fmnist-c")
    assert not model.training
    assert (info.name, info.dataset, info.classifier, info.bdn_layer) == ("resnet20", "fmnist", "fc", "layer2.0.bn1")
    assert (info.num_classes, info.input_size) == (10, 32)
    _check_info(model, info)
    images, labels = read_fashion_mnist("test")
    n = 1000
    with torch.no_grad():
        pred = model(to_input(pad_to_32(images[:n]))).argmax(1).numpy()
    error = float(np.mean(pred != labels[:n]))
    # clean error on the full test set is <= 10 %; with 1,000 images the standard error is about
    # 0.95 pp, so 3.5 standard errors of slack
    assert error <= 0.10 + 3.5 * np.sqrt(0.1 * 0.9 / n), error
    assert checkpoint_path("fmnist-c").stat().st_size < 2_000_000  # float32 state_dict, ~1.1 MB


@pytest.mark.parametrize("dataset,name,classifier,bdn,k,side", PAPER_MODELS)
def test_paper_architecture_offline_and_checkpoint_roundtrip(tmp_path, dataset, name, classifier, bdn, k, side):
    torch.set_num_threads(1)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        source, info = build_model(dataset)  # no checkpoint, no network
        for bn in source.modules():  # non-trivial running statistics, so eval outputs depend on them
            if isinstance(bn, nn.BatchNorm2d):
                bn.running_mean.uniform_(-0.1, 0.1)
                bn.running_var.uniform_(0.5, 1.5)
        x = torch.rand(2, 3, 32 if side == 32 else 64, 32 if side == 32 else 64)
    assert (info.name, info.classifier, info.bdn_layer, info.num_classes, info.input_size) == (name, classifier, bdn, k, side)
    _check_info(source, info)

    # robustbench's layout, wrapped and prefixed the way DataParallel checkpoints are
    path = tmp_path / dataset.removesuffix("-c") / "corruptions" / f"{name}.pt"
    path.parent.mkdir(parents=True)
    torch.save({"state_dict": {f"module.{k_}": v for k_, v in source.state_dict().items()}}, path)
    loaded, loaded_info = load_model(dataset, checkpoint_dir=tmp_path)
    assert checkpoint_path(dataset, checkpoint_dir=tmp_path) == path
    assert loaded_info == info and not loaded.training
    with torch.no_grad():
        assert torch.equal(loaded(x), source.eval()(x))


def test_imagenet_reads_torchvision_weights_file(tmp_path):
    torch.set_num_threads(1)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        source, _ = build_model("imagenet-c")
        x = torch.rand(1, 3, 64, 64)
    torch.save(source.model.state_dict(), tmp_path / "resnet50-0676ba61.pth")  # bare torchvision keys
    loaded, _ = load_model("imagenet-c", "Standard_R50", checkpoint_dir=tmp_path)
    with torch.no_grad():
        assert torch.equal(loaded(x), source.eval()(x))


@pytest.mark.parametrize(
    "dataset,expected",
    [
        ("cifar10-c", "cifar10/corruptions/Standard.pt"),
        ("cifar100-c", "cifar100/corruptions/Hendrycks2020AugMix_ResNeXt.pt"),
        ("imagenet-c", "resnet50-0676ba61.pth"),
    ],
)
def test_missing_checkpoint_names_the_path_and_the_remedy(tmp_path, dataset, expected):
    with pytest.raises(FileNotFoundError) as err:
        load_model(dataset, checkpoint_dir=tmp_path / "ckpt")
    message = str(err.value)
    assert str(tmp_path / "ckpt" / expected) in message
    assert "machine with internet" in message


def test_checkpoint_that_does_not_fit_is_an_error(tmp_path):
    path = tmp_path / "cifar100" / "corruptions" / "Hendrycks2020AugMix_ResNeXt.pt"
    path.parent.mkdir(parents=True)
    torch.save({"model_state_dict": {"conv.weight": torch.zeros(1)}}, path)
    with pytest.raises(ValueError, match="does not fit"):
        load_model("cifar100-c", checkpoint_dir=tmp_path)


@pytest.mark.parametrize(
    "args,match", [(("mnist-c",), "dataset='mnist-c'"), (("cifar10-c", "Standard_R50"), "name='Standard_R50'")]
)
def test_unknown_dataset_or_model(args, match):
    with pytest.raises(ValueError, match=match):
        load_model(*args)


def test_robustbench_is_imported_only_for_paper_models():
    code = (
        "import sys, unitta.models as m; m.load_model('fmnist-c'); "
        "assert 'robustbench' not in sys.modules, 'robustbench imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)

"""The catalogue of loadable models (docs/models.md): per dataset and name, how ``unitta.models.zoo`` builds the
architecture without weights, where its weights come from and its metadata (classifier, BN layer, number of
classes, input size, normalisation kind)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from unitta.data.robustbench_compat import import_robustbench

# ImageNet mean/std of torchvision's and robustbench's Standard_R50 (robustbench/model_zoo/imagenet.py).
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
# torchvision's file for resnet50(pretrained=True) == ResNet50_Weights.IMAGENET1K_V1, which robustbench's
# Standard_R50 uses (docs/models.md).
TORCHVISION_R50_FILE = "resnet50-0676ba61.pth"
# The GroupNorm ResNet-26's input normalisation (the mariodoebler TTA benchmark's models/resnet26.py MEAN/STD,
# from MEMO's CIFAR-10 pipeline).
RESNET26_MEAN = (0.5, 0.5, 0.5)
RESNET26_STD = (0.5, 0.5, 0.5)


@dataclass(frozen=True)
class ModelEntry:
    """One loadable model: how to build it and its metadata (docs/models.md)."""

    family: str  # ModelInfo.dataset
    rb_dataset: str  # robustbench's dataset folder name
    build: Callable[..., nn.Module]  # sized entries take image_size=
    classifier: str
    bdn_layer: str | None  # None: the model has no BatchNorm
    num_classes: int
    input_size: int
    norm_kind: str = "batch"  # unitta.nn.norms.NORM_KINDS
    weights_file: str | None = None  # a file in checkpoint_dir read when robustbench's layout has none
    torchvision_weights: str | None = None  # torchvision's weights enum of that file (fetch)
    inner: str = ""  # the submodule that bare (unwrapped) checkpoint keys belong to
    sized: bool = False  # the architecture depends on the input size (ViT's position embeddings)
    # where the weights come from: 'robustbench' (its layout under checkpoint_dir), 'embedded' (shipped in the
    # package), 'torchvision' (torchvision's file, or a robustbench-layout state_dict when present) or 'file'
    # (weights_file under checkpoint_dir, e.g. the mariodoebler benchmark's resnet26_gn.pth)
    source: str = "robustbench"


def _wrn28_10() -> nn.Module:
    import_robustbench()
    from robustbench.model_zoo.architectures.wide_resnet import WideResNet

    return WideResNet(depth=28, widen_factor=10)


def _augmix_resnext() -> nn.Module:
    import_robustbench()
    from robustbench.model_zoo.cifar100 import Hendrycks2020AugMixResNeXtNet

    return Hendrycks2020AugMixResNeXtNet()


def _standard_r50() -> nn.Module:
    import_robustbench()
    import torchvision
    from robustbench.model_zoo.architectures.utils_architectures import normalize_model

    return normalize_model(torchvision.models.resnet50(weights=None), IMAGENET_MEAN, IMAGENET_STD)


def _resnet20() -> nn.Module:
    from unitta.models.resnet import resnet20

    return resnet20()


def _vit_tiny() -> nn.Module:
    from unitta.models.vit import vit_tiny

    return vit_tiny()


class Normalized(nn.Module):
    """``model((x - mean) / std)`` with the wrapped network under ``model`` (robustbench's normalize_model
    layout: keys ``model.*``), so that every zoo model takes images in [0, 1]."""

    def __init__(self, model: nn.Module, mean: tuple[float, ...], std: tuple[float, ...]):
        super().__init__()
        from unitta.models.resnet import Normalize

        self.normalize = Normalize(mean, std)
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(self.normalize(x))


def _vit_b_16(image_size: int = 224) -> nn.Module:
    import torchvision

    return Normalized(torchvision.models.vit_b_16(weights=None, image_size=image_size), IMAGENET_MEAN, IMAGENET_STD)


def _swin_b() -> nn.Module:
    import torchvision

    return Normalized(torchvision.models.swin_b(weights=None), IMAGENET_MEAN, IMAGENET_STD)


def _resnet26_gn() -> nn.Module:
    from unitta.models.resnet26 import resnet26_gn

    return Normalized(resnet26_gn(), RESNET26_MEAN, RESNET26_STD)


# dataset name -> {model name -> entry}; the first model of each dataset is its default.
ZOO: dict[str, dict[str, ModelEntry]] = {
    "fmnist-c": {
        # BDN layer: first BN of the first block of the middle stage
        "resnet20": ModelEntry("fmnist", "fmnist", _resnet20, "fc", "layer2.0.bn1", 10, 32, source="embedded"),
        "vit_tiny": ModelEntry(
            "fmnist", "fmnist", _vit_tiny, "head", None, 10, 32, norm_kind="layer", source="embedded"
        ),
    },
    "cifar10-c": {
        "Standard": ModelEntry("cifar10", "cifar10", _wrn28_10, "fc", "block2.layer.0.bn1", 10, 32),
        # the mariodoebler TTA benchmark's correlated CIFAR-10-C model (MODEL.ARCH resnet26_gn, ./ckpt/resnet26_gn.pth)
        "resnet26_gn": ModelEntry(
            "cifar10",
            "cifar10",
            _resnet26_gn,
            "model.fc",
            None,
            10,
            32,
            norm_kind="group",
            weights_file="resnet26_gn.pth",
            inner="model",
            source="file",
        ),
    },
    "cifar100-c": {
        "Hendrycks2020AugMix_ResNeXt": ModelEntry(
            "cifar100", "cifar100", _augmix_resnext, "classifier", "stage_2.0.bn", 100, 32
        ),
    },
    "imagenet-c": {
        "Standard_R50": ModelEntry(
            "imagenet",
            "imagenet",
            _standard_r50,
            "model.fc",
            "model.layer3.0.bn1",
            1000,
            224,
            weights_file=TORCHVISION_R50_FILE,
            torchvision_weights="ResNet50_Weights.IMAGENET1K_V1",
            inner="model",
            source="torchvision",
        ),
        # the mariodoebler TTA benchmark's ImageNet transformers (torchvision IMAGENET1K_V1 weights)
        "vit_b_16": ModelEntry(
            "imagenet",
            "imagenet",
            _vit_b_16,
            "model.heads.head",
            None,
            1000,
            224,
            norm_kind="layer",
            weights_file="vit_b_16-c867db91.pth",
            torchvision_weights="ViT_B_16_Weights.IMAGENET1K_V1",
            inner="model",
            sized=True,
            source="torchvision",
        ),
        "swin_b": ModelEntry(
            "imagenet",
            "imagenet",
            _swin_b,
            "model.head",
            None,
            1000,
            224,
            norm_kind="layer",
            weights_file="swin_b-68c6b09e.pth",
            torchvision_weights="Swin_B_Weights.IMAGENET1K_V1",
            inner="model",
            source="torchvision",
        ),
    },
}

"""``load_model``: the embedded ResNet-20 and the paper's robustbench models, offline (docs/models.md).

The paper's models come from RobustBench's "corruptions" threat model. This module builds each
architecture *without* weights (no network) and loads a local checkpoint in robustbench's layout,
``{checkpoint_dir}/{dataset}/corruptions/{name}.pt``. robustbench is imported lazily, only when a
paper model is loaded, with the import fixes of docs/models.md.
"""

from __future__ import annotations

import io
import pickle
import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch import nn

from unitta.data.robustbench_compat import import_robustbench
from unitta.models.digest import bytes_digest, file_digest
from unitta.models.info import ModelInfo
from unitta.nn.batchnorm import named_batchnorms

# ImageNet mean/std of torchvision's and robustbench's Standard_R50 (robustbench/model_zoo/imagenet.py).
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
# torchvision's file for resnet50(pretrained=True) == ResNet50_Weights.IMAGENET1K_V1, which robustbench's
# Standard_R50 uses (docs/models.md).
TORCHVISION_R50_FILE = "resnet50-0676ba61.pth"
EMBEDDED_CHECKPOINT = Path(__file__).parent / "checkpoints" / "resnet20_fmnist.pt"
# The weights every result row was computed with before a checkpoint's digest joined a cell's identity
# (docs/results.md, "Resume"): the embedded ResNet-20 as shipped then, and torchvision's ResNet-50 file
# (its name carries the first 8 hex digits of its SHA-256, which torchvision checks on download). Cells
# with exactly these weights keep their earlier ids; any other file puts its digest in the identity.
# Frozen: retraining the embedded model must not add to or change this table.
REFERENCE_WEIGHTS = {
    ("fmnist-c", "resnet20"): "5813b7f52360e653543e59cac6ea72206da9c649a99fee7659c3aee9aa35a401",
    ("imagenet-c", "Standard_R50"): "0676ba61",
}
# The reference's CKPT_DIR (docs/models.md), used when checkpoint_dir is None.
DEFAULT_CHECKPOINT_DIR = "ckpt"


class CheckpointError(ValueError):
    """A checkpoint that is not loaded: not a plain state_dict (unpickling it could run code), or unreadable."""


@dataclass(frozen=True)
class _Entry:
    """One loadable model: how to build it and its metadata (docs/models.md)."""

    family: str  # ModelInfo.dataset
    rb_dataset: str  # robustbench's dataset folder name
    build: Callable[[], nn.Module]
    classifier: str
    bdn_layer: str
    num_classes: int
    input_size: int
    # where the weights come from: 'robustbench' (its layout under checkpoint_dir), 'embedded' (shipped in the
    # package) or 'torchvision' (torchvision's file, or a robustbench-layout state_dict when present)
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


# dataset name -> {model name -> entry}; the first model of each dataset is its default.
_ZOO: dict[str, dict[str, _Entry]] = {
    "fmnist-c": {
        # BDN layer: first BN of the first block of the middle stage
        "resnet20": _Entry("fmnist", "fmnist", _resnet20, "fc", "layer2.0.bn1", 10, 32, source="embedded"),
    },
    "cifar10-c": {
        "Standard": _Entry("cifar10", "cifar10", _wrn28_10, "fc", "block2.layer.0.bn1", 10, 32),
    },
    "cifar100-c": {
        "Hendrycks2020AugMix_ResNeXt": _Entry(
            "cifar100", "cifar100", _augmix_resnext, "classifier", "stage_2.0.bn", 100, 32
        ),
    },
    "imagenet-c": {
        "Standard_R50": _Entry(
            "imagenet", "imagenet", _standard_r50, "model.fc", "model.layer3.0.bn1", 1000, 224, source="torchvision"
        ),
    },
}


def list_models() -> dict[str, list[str]]:
    """{dataset: [model names]}; the first name is the dataset's default."""
    return {dataset: list(models) for dataset, models in _ZOO.items()}


def _entry(dataset: str, name: str | None) -> tuple[str, _Entry]:
    if dataset not in _ZOO:
        raise ValueError(f"dataset={dataset!r}: expected one of {', '.join(_ZOO)}")
    models = _ZOO[dataset]
    if name is None:
        name = next(iter(models))
    if name not in models:
        raise ValueError(f"name={name!r} for dataset {dataset!r}: expected one of {', '.join(models)}")
    return name, models[name]


def build_model(dataset: str, name: str | None = None) -> tuple[nn.Module, ModelInfo]:
    """The architecture with random weights (no checkpoint, no network) and its ModelInfo."""
    name, entry = _entry(dataset, name)
    model = entry.build()
    info = ModelInfo(
        name=name,
        dataset=entry.family,
        classifier=entry.classifier,
        bn_layers=tuple(layer for layer, _ in named_batchnorms(model)),
        bdn_layer=entry.bdn_layer,
        num_classes=entry.num_classes,
        input_size=entry.input_size,
    )
    info.check_bn_layer(info.bdn_layer)
    return model, info


def checkpoint_path(dataset: str, name: str | None = None, checkpoint_dir: str | Path | None = None) -> Path:
    """Where ``load_model`` reads the weights: robustbench's ``{dir}/{dataset}/corruptions/{name}.pt``.

    For ImageNet's Standard_R50 this is the robustbench-layout file if it exists, else torchvision's
    ``{dir}/resnet50-0676ba61.pth``. The embedded ResNet-20 ignores ``checkpoint_dir``.
    """
    name, entry = _entry(dataset, name)
    if entry.source == "embedded":
        return EMBEDDED_CHECKPOINT
    checkpoint_dir = Path(checkpoint_dir if checkpoint_dir is not None else DEFAULT_CHECKPOINT_DIR)
    path = checkpoint_dir / entry.rb_dataset / "corruptions" / f"{name}.pt"
    if entry.source == "torchvision" and not path.exists():
        return checkpoint_dir / TORCHVISION_R50_FILE
    return path


def _missing(dataset: str, name: str, checkpoint_dir: Path) -> FileNotFoundError:
    _, entry = _entry(dataset, name)
    rb_path = checkpoint_dir / entry.rb_dataset / "corruptions" / f"{name}.pt"
    if entry.source == "embedded":
        return FileNotFoundError(
            f"embedded checkpoint {EMBEDDED_CHECKPOINT} is missing; retrain it with "
            "`python -m unitta.models train fmnist` (a few minutes on a CPU)"
        )
    if entry.source == "torchvision":
        tv_path = checkpoint_dir / TORCHVISION_R50_FILE
        return FileNotFoundError(
            f"no checkpoint for {name!r}: expected torchvision's ResNet-50 weights at {tv_path} "
            f"(or a robustbench-layout state_dict at {rb_path}). With internet run "
            f"`python -m unitta.models fetch imagenet-c --dir {checkpoint_dir}`; offline, run it on a machine with "
            f"internet and copy {TORCHVISION_R50_FILE} (or torchvision's ~/.cache/torch/hub/checkpoints/ copy) "
            f"to {tv_path}"
        )
    return FileNotFoundError(
        f"no checkpoint for {name!r}: expected {rb_path}. With internet run "
        f"`python -m unitta.models fetch {dataset} --name {name} --dir {checkpoint_dir}`; offline, run it on a "
        f"machine with internet and copy {entry.rb_dataset}/corruptions/{name}.pt to {rb_path}"
    )


def read_state_dict(path: Path, trust_checkpoints: bool = False) -> dict[str, torch.Tensor]:
    """A checkpoint's state_dict (see ``read_checkpoint``)."""
    return read_checkpoint(path, trust_checkpoints)[0]


def read_checkpoint(path: Path, trust_checkpoints: bool = False) -> tuple[dict[str, torch.Tensor], str]:
    """A checkpoint's state_dict and the SHA-256 of the bytes it was read from (``unitta.models.digest``).

    Unwraps 'state_dict'/'model_state_dict' and strips 'module.' prefixes. The file is read once and
    both the digest and the weights come from those bytes, so the digest is that of the weights loaded.
    Loaded with ``torch.load(weights_only=True)``, which unpickles tensors and plain containers only.
    A file that needs more (arbitrary pickled objects, whose unpickling can run any code) is a
    CheckpointError unless ``trust_checkpoints`` (the explicit opt-in for files from a trusted source).
    """
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise CheckpointError(f"{path}: cannot be read ({err.strerror or err})") from err
    try:
        checkpoint = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        if not trust_checkpoints:
            found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(err))
            reason = f"it pickles {found.group(1)}" if found else "it pickles more than tensors"
            raise CheckpointError(
                f"{path}: not a plain state_dict, so it is not loaded ({reason}; unpickling it could run code from "
                "the file); if you trust the file, opt in with trust_checkpoints=True (sweep YAML "
                "`trust_checkpoints: true`, or --trust-checkpoints), or re-save it as a plain state_dict"
            ) from err
        warnings.warn(f"{path}: not loadable with weights_only=True; unpickling it as trusted", stacklevel=3)
        checkpoint = torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)
    except (RuntimeError, EOFError, OSError) as err:  # truncated / not a torch file
        raise CheckpointError(f"{path}: not a readable torch checkpoint ({err}); delete it and fetch it again") from err
    for key in ("state_dict", "model_state_dict"):
        if isinstance(checkpoint, dict) and key in checkpoint and isinstance(checkpoint[key], dict):
            checkpoint = checkpoint[key]
            break
    if not isinstance(checkpoint, dict):
        raise ValueError(f"{path}: expected a state_dict (a dict of tensors), got {type(checkpoint).__name__}")
    state = {(k[len("module.") :] if k.startswith("module.") else k): v for k, v in checkpoint.items()}
    return state, bytes_digest(data)


def is_reference_weights(dataset: str, name: str | None, digest: str | None) -> bool:
    """Whether ``digest`` is of the weights ``REFERENCE_WEIGHTS`` names for this model (a prefix for R50)."""
    reference = REFERENCE_WEIGHTS.get((dataset, name or _entry(dataset, None)[0]))
    return bool(reference and digest and digest.startswith(reference))


def weights_digest(dataset: str, name: str | None = None, checkpoint_dir: str | Path | None = None) -> str | None:
    """The SHA-256 of the checkpoint ``load_model`` would read now (cached per file), or None when it is
    missing or the dataset/model is unknown (``load_model`` then fails with the reason)."""
    try:
        return file_digest(checkpoint_path(dataset, name, checkpoint_dir))
    except ValueError:
        return None


def _load_weights(model: nn.Module, state: dict[str, torch.Tensor], entry: _Entry, path: Path) -> None:
    if entry.source == "torchvision":
        # torchvision's file has bare ResNet keys; a robustbench-layout file has 'model.'/'normalize.' keys.
        state = {k[len("model.") :]: v for k, v in state.items() if k.startswith("model.")} or {
            k: v for k, v in state.items() if not k.startswith("normalize.")
        }
        target = model.get_submodule("model")
    else:
        target = model
    missing, unexpected = target.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ValueError(
            f"{path} does not fit {type(target).__name__}: "
            f"missing keys {missing[:5]}{'...' if len(missing) > 5 else ''}, "
            f"unexpected keys {unexpected[:5]}{'...' if len(unexpected) > 5 else ''}"
        )


def load_model(
    dataset: str = "fmnist-c",
    name: str | None = None,
    checkpoint_dir: str | Path | None = None,
    trust_checkpoints: bool = False,
) -> tuple[nn.Module, ModelInfo]:
    """Load a source model in eval mode, offline, with its metadata (docs/models.md).

    dataset: 'fmnist-c' (embedded ResNet-20), 'cifar10-c' ('Standard' WRN-28-10),
        'cifar100-c' ('Hendrycks2020AugMix_ResNeXt'), 'imagenet-c' ('Standard_R50').
    name: model name; None picks the dataset's default (the paper's model).
    checkpoint_dir: robustbench model directory (see ``checkpoint_path``; None: './ckpt', the reference's
        CKPT_DIR); unused for 'fmnist-c'.

    trust_checkpoints: also load checkpoints that need full unpickling (which can run code from the
        file); off by default, so such a file is a CheckpointError naming it.

    Every model takes images in [0, 1] (input normalisation is inside the model). ``info.extra`` names the
    checkpoint file and the SHA-256 of the bytes loaded (``weights_digest``, part of a cell's identity).
    A missing checkpoint is a FileNotFoundError naming the path and how to obtain it
    (``python -m unitta.models fetch``); nothing is downloaded.
    """
    name, entry = _entry(dataset, name)
    checkpoint_dir = Path(checkpoint_dir if checkpoint_dir is not None else DEFAULT_CHECKPOINT_DIR)
    path = checkpoint_path(dataset, name, checkpoint_dir)
    if not path.is_file():
        raise _missing(dataset, name, checkpoint_dir)
    model, info = build_model(dataset, name)
    state, digest = read_checkpoint(path, trust_checkpoints)
    _load_weights(model, state, entry, path)
    return model.eval(), replace(info, extra={"checkpoint": str(path), "weights_digest": digest})

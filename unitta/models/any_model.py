"""One front door for every model a cell can name: the zoo's (``unitta.models.zoo``) and the ones beyond it
(``unitta.models.custom``: ``torchvision:NAME``, ``timm:NAME``, ``my_models.py:function``), for the dataset's
number of classes (docs/own_data.md, "Your model").

``load_any_model`` checks the classifier's size against the dataset's (one line naming both), reduces an
ImageNet head to a dataset's output mask (ImageNet-R/-A's 200 classes: the rows of the final linear layer), and
describes a model beyond the zoo as the zoo describes its own: classifier (the last linear layer), BatchNorm
layers, normalisation kind found from the modules, and the BDN layer chosen as for the zoo's models
(``choose_bdn_layer``). ``weights_file`` / ``weights_digest`` say which file is read and its SHA-256 (a cell's
identity holds it, as for the zoo's models).
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from pathlib import Path

import torch
from torch import nn

from unitta.models.custom import build_custom, is_custom, own_weights_file, read_weights
from unitta.models.digest import checkpoint_digest
from unitta.models.info import ModelInfo
from unitta.models.zoo import DEFAULT_CHECKPOINT_DIR, load_model, model_norm_kind, weights_digest
from unitta.nn.batchnorm import named_batchnorms
from unitta.nn.norms import named_norms, norm_kind

__all__ = ["any_norm_kind", "choose_bdn_layer", "describe", "load_any_model", "mask_head", "weights_file",
           "any_weights_digest"]


def choose_bdn_layer(bn_layers: tuple[str, ...] | list[str]) -> str | None:
    """The first BatchNorm of the stage holding the middle BatchNorm: the zoo's choice for its models
    (ResNet-20 ``layer2.0.bn1``, WRN-28-10 ``block2.layer.0.bn1``, ResNet-50 ``model.layer3.0.bn1``)."""
    if not bn_layers:
        return None
    middle = bn_layers[len(bn_layers) // 2]
    parts = middle.split(".")
    digit = next((i for i, p in enumerate(parts) if p.isdigit()), None)
    if not digit:  # no numbered stage (or a flat Sequential): the middle BatchNorm itself
        return middle
    stage = ".".join(parts[:digit]) + "."
    return next(name for name in bn_layers if name.startswith(stage))


def _classifier(model: nn.Module) -> str:
    names = [name for name, m in model.named_modules() if isinstance(m, nn.Linear)]
    if not names:
        raise ValueError(f"{type(model).__name__} has no nn.Linear layer to serve as its classifier")
    return names[-1]


def describe(model: nn.Module, name: str, num_classes: int, input_size: int) -> ModelInfo:
    """The ``ModelInfo`` of a model beyond the zoo, found from its modules."""
    bn_layers = tuple(layer for layer, _ in named_batchnorms(model))
    return ModelInfo(
        name=name, dataset="custom", classifier=_classifier(model), bn_layers=bn_layers,
        bdn_layer=choose_bdn_layer(bn_layers), num_classes=num_classes, input_size=input_size,
        norm_kind=norm_kind(model), norm_layers=tuple(layer for layer, _ in named_norms(model)),
    )


def weights_file(name: str, checkpoint: str | None, checkpoint_dir: str | Path | None) -> Path | None:
    """The weights file a custom model reads: ``checkpoint``, else its library's own file in ``checkpoint_dir``."""
    if checkpoint:
        return Path(checkpoint)
    return own_weights_file(name, Path(checkpoint_dir if checkpoint_dir is not None else DEFAULT_CHECKPOINT_DIR))


def any_weights_digest(dataset: str, name: str | None, checkpoint: str | None,
                       checkpoint_dir: str | Path | None) -> str | None:
    """SHA-256 of the file the model loads (cached per file), None when there is none."""
    if is_custom(name):
        path = weights_file(name, checkpoint, checkpoint_dir)
        return checkpoint_digest(path) if path is not None else None
    if checkpoint:
        return checkpoint_digest(checkpoint)
    return weights_digest(dataset, name, checkpoint_dir)


@cache
def any_norm_kind(dataset: str, name: str | None) -> str:
    """The normalisation kind of a model (a custom one is built once, with random weights, to look)."""
    if is_custom(name):
        model, _ = build_custom(name, 10)
        return norm_kind(model)
    return model_norm_kind(dataset, name)


def _head_size(state: dict[str, torch.Tensor], classifier: str) -> int | None:
    for key in (f"{classifier}.weight", f"{classifier.removeprefix('model.')}.weight"):
        if key in state:
            return int(state[key].shape[0])
    return None


def _build(name: str, num_classes: int, input_size: int | None) -> tuple[nn.Module, int]:
    """``build_custom``, with whatever torchvision or timm raise on the arguments (an assertion on the input size)
    as one ``ValueError`` line naming the model (a builder's own failures are already such lines)."""
    try:
        return build_custom(name, num_classes, input_size)
    except ValueError:
        raise
    except Exception as err:  # noqa: BLE001 - a library's assertion or error on the arguments, said as one line
        at = f" for input_size {input_size}" if input_size is not None else ""
        raise ValueError(f"model={name}: cannot be built{at}: {type(err).__name__}: {err}; choose an input_size the "
                         "model takes (docs/own_data.md)".replace("\n", " ")) from None


def _check_shapes(model: nn.Module, state: dict[str, torch.Tensor], name: str, path: Path) -> None:
    """Weights whose tensors have other shapes than the model's (another architecture, or a ViT's position
    embeddings for another input size): one line naming the first ones and the fix."""
    own = model.state_dict()
    differ = [k for k, v in state.items() if k in own and tuple(v.shape) != tuple(own[k].shape)]
    if not differ:
        return
    first = differ[0]
    shapes = f"{first} is {tuple(state[first].shape)} in the file, {tuple(own[first].shape)} in the model"
    more = f" (and {len(differ) - 1} more tensors)" if len(differ) > 1 else ""
    if any("pos_embed" in k for k in differ):
        fix = ("its position embeddings are for another input size: set input_size: to the side the weights were "
               "trained at")
    else:
        fix = "give weights trained for this model (the same architecture and widths)"
    raise ValueError(f"{path} does not fit {name}: {shapes}{more}; {fix}")


def _load_custom(name: str, num_classes: int, checkpoint: str | None, checkpoint_dir: str | Path | None,
                 trust: bool, input_size: int | None = None) -> tuple[nn.Module, ModelInfo]:
    path = weights_file(name, checkpoint, checkpoint_dir)
    if path is None or not path.is_file():
        if checkpoint:
            raise FileNotFoundError(f"model={name}: checkpoint {path} not found")
        where = f" (or {path.name} in checkpoint_dir {path.parent})" if path is not None else ""
        raise FileNotFoundError(f"model={name}: no weights: set checkpoint: PATH{where}; unitta never downloads them")
    model, side = _build(name, num_classes, input_size)
    info = describe(model, name, num_classes, side)
    try:
        state, digest = read_weights(path, trust)
    except ValueError as err:  # CheckpointError too: the file's own line, named for the model it was meant for
        raise type(err)(f"model={name}: {err}") from None
    found = _head_size(state, info.classifier)
    if found is not None and found != num_classes:
        raise ValueError(f"{path}: its classifier has {found} classes, the dataset has {num_classes}; give weights "
                         f"trained for these {num_classes} classes (or list classes: to match)")
    inner = model.model if hasattr(model, "normalize") and not any(k.startswith("model.") for k in state) else model
    _check_shapes(inner, state, name, path)
    missing, unexpected = inner.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ValueError(f"{path} does not fit {name}: missing keys {missing[:5]}, unexpected keys "
                         f"{unexpected[:5]}; give weights trained for this model (docs/own_data.md)")
    return model.eval(), replace(info, extra={"checkpoint": str(path), "weights_digest": digest})


def mask_head(model: nn.Module, info: ModelInfo, outputs: list[int]) -> tuple[nn.Module, ModelInfo]:
    """Keep only ``outputs`` of the classifier (the rows of its weight and bias): an output mask as a smaller head."""
    head = model.get_submodule(info.classifier)
    small = nn.Linear(head.in_features, len(outputs), bias=head.bias is not None)
    with torch.no_grad():
        small.weight.copy_(head.weight[outputs])
        if head.bias is not None:
            small.bias.copy_(head.bias[outputs])
    parent, _, leaf = info.classifier.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, leaf, small)
    return model, replace(info, num_classes=len(outputs))


def load_any_model(
    dataset: str,
    name: str | None,
    num_classes: int,
    checkpoint: str | None = None,
    checkpoint_dir: str | Path | None = None,
    trust_checkpoints: bool = False,
    outputs: list[int] | None = None,
    input_size: int | None = None,
) -> tuple[nn.Module, ModelInfo]:
    """The model ``name`` for a dataset of ``num_classes`` classes (``outputs``: its ImageNet output mask;
    ``input_size``: a custom model's input side, ``unitta.models.custom.build_custom``)."""
    if is_custom(name):
        model, info = _load_custom(name, 1000 if outputs is not None else num_classes, checkpoint, checkpoint_dir,
                                   trust_checkpoints, input_size)
        return mask_head(model, info, outputs) if outputs is not None else (model, info)
    if checkpoint:
        raise ValueError(f"checkpoint: {checkpoint} is for torchvision:/timm:/builder models; zoo model "
                         f"{name or 'default'} reads checkpoint_dir (docs/models.md)")
    model, info = load_model(dataset, name, checkpoint_dir, trust_checkpoints)
    if outputs is not None and info.num_classes == 1000:
        return mask_head(model, info, outputs)
    if info.num_classes != num_classes:
        raise ValueError(f"model {info.name} has a {info.num_classes}-class head, the dataset {dataset} has "
                         f"{num_classes} classes; use a model for {num_classes} classes (torchvision:NAME / timm:NAME "
                         "with a checkpoint) or list the matching classes")
    return model, info

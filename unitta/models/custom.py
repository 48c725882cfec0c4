"""Models beyond the zoo: ``torchvision:NAME``, ``timm:NAME`` and a user's builder ``my_models.py:build``
(docs/own_data.md, "Your model").

Each is built without weights (no network) for the dataset's number of classes and takes images in [0, 1]:
torchvision's and timm's networks are wrapped in ``Normalized`` with their weights' mean and std (torchvision:
ImageNet's; timm: the model's ``pretrained_cfg``), so their keys are ``model.*`` and a bare checkpoint (the
libraries' own files) loads into ``model``. A builder is a function ``build(num_classes) -> nn.Module`` whose
module takes [0, 1] images itself (its input side: an ``input_size`` attribute of the returned module, else a
module-level ``input_size`` of the builder file, else 224).
Weights come from ``checkpoint: PATH`` or, for torchvision, its own file name in ``checkpoint_dir``
(``resnet18-f37072fd.pth``), for timm ``<checkpoint_dir>/<NAME>.safetensors`` / ``.pth``; ``.safetensors``
files are read with safetensors (tensors only), others with the zoo's safe loader (``read_checkpoint``).
"""

from __future__ import annotations

import difflib
import warnings
from pathlib import Path
from typing import TypeGuard

import torch
from torch import nn

from unitta.models.builders import call_builder, module_input_size
from unitta.models.catalog import IMAGENET_MEAN, IMAGENET_STD, Normalized
from unitta.models.digest import bytes_digest
from unitta.models.zoo import read_checkpoint

__all__ = ["build_custom", "is_custom", "own_weights_file", "parse_spec", "read_weights"]

def is_custom(name: str | None) -> TypeGuard[str]:
    """Whether ``name`` is a ``kind:NAME`` / ``module:function`` spec rather than a zoo model name."""
    return isinstance(name, str) and ":" in name


def parse_spec(spec: str) -> tuple[str, str]:
    """('torchvision' | 'timm' | the builder's module path or name, the model or function name)."""
    head, _, tail = spec.rpartition(":")
    if not head or not tail:
        raise ValueError(f"model={spec!r}: expected torchvision:NAME, timm:NAME or my_models.py:function")
    return head, tail


def _torchvision(name: str, num_classes: int, input_size: int | None) -> tuple[nn.Module, int]:
    import torchvision

    if name not in torchvision.models.list_models(module=torchvision.models):
        raise ValueError(f"model=torchvision:{name}: torchvision has no classification model {name!r} "
                         "(torchvision.models.list_models())")
    crop = torchvision.models.get_model_weights(name).DEFAULT.transforms.keywords.get("crop_size", 224)
    with torch.device("meta"):  # its shape only (no memory, no time): a ViT's patch size and side
        probe = torchvision.models.get_model(name, weights=None, num_classes=num_classes)
    _check_patches(f"torchvision:{name}", getattr(probe, "patch_size", None), input_size)
    side = {}
    if input_size is not None and hasattr(probe, "image_size") and probe.image_size != input_size:
        side = {"image_size": input_size}  # a VisionTransformer fixes its side (position embeddings); a CNN takes any
    model = torchvision.models.get_model(name, weights=None, num_classes=num_classes, **side)
    return Normalized(model, IMAGENET_MEAN, IMAGENET_STD), int(input_size or crop)


def _check_patches(spec: str, patch: int | None, input_size: int | None) -> None:
    """A vision transformer cuts its input into patch x patch squares: a side they do not divide is refused."""
    if patch and input_size is not None and input_size % patch:
        below, above = input_size - input_size % patch, input_size - input_size % patch + patch
        raise ValueError(f"model={spec}: input_size {input_size} is not a multiple of its patch size {patch}; "
                         f"use {below or above} or {above}")


def _import_timm():
    """timm, without the deprecation warnings its import raises in torch.jit (they are not the user's business)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=FutureWarning, module=r"torch\.")
        warnings.filterwarnings("ignore", category=DeprecationWarning, module=r"torch\.")
        import timm
    return timm


def _timm(name: str, num_classes: int, input_size: int | None) -> tuple[nn.Module, int]:
    timm = _import_timm()
    if not timm.is_model(name):
        close = difflib.get_close_matches(name, timm.list_models(), n=1)
        raise ValueError(f"model=timm:{name}: timm has no model {name!r}"
                         f"{f' (did you mean {close[0]!r}?)' if close else ''}; timm.list_models() lists them")
    try:
        model = timm.create_model(name, pretrained=False, num_classes=num_classes)
    except RuntimeError as err:  # timm: "Unknown model (...)"
        raise ValueError(f"model=timm:{name}: {err}") from None
    cfg = model.pretrained_cfg
    patch = getattr(getattr(model, "patch_embed", None), "patch_size", None)
    _check_patches(f"timm:{name}", patch[-1] if isinstance(patch, tuple) else patch, input_size)
    if input_size is not None and cfg.get("fixed_input_size") and cfg["input_size"][-1] != input_size:
        # a ViT's position embeddings fix its side: built for the one asked (timm's img_size); a CNN takes any side
        model = timm.create_model(name, pretrained=False, num_classes=num_classes, img_size=input_size)
    return Normalized(model, tuple(cfg["mean"]), tuple(cfg["std"])), int(input_size or cfg["input_size"][-1])


def build_custom(spec: str, num_classes: int, input_size: int | None = None) -> tuple[nn.Module, int]:
    """The model of ``spec`` with random weights for ``num_classes`` classes, and its input side (``input_size``
    when given: a cell's ``input_size``, e.g. 32 for 32-pixel images instead of upsampling them to 224)."""
    kind, name = parse_spec(spec)
    if kind == "torchvision":
        return _torchvision(name, num_classes, input_size)
    if kind == "timm":
        return _timm(name, num_classes, input_size)
    model = call_builder(spec, num_classes)
    if not isinstance(model, nn.Module):
        raise ValueError(f"model={spec}: {name}(num_classes) returned {type(model).__name__}, not a torch nn.Module")
    # the side: the cell's input_size, else the module's input_size attribute, else the builder file's, else 224
    return model, int(input_size or getattr(model, "input_size", None) or module_input_size(spec) or 224)


def own_weights_file(spec: str, checkpoint_dir: Path) -> Path | None:
    """The library's own weights file for ``spec`` in ``checkpoint_dir`` (the first that exists), or None."""
    kind, name = parse_spec(spec)
    if kind == "torchvision":
        import torchvision

        try:
            url = torchvision.models.get_model_weights(name).DEFAULT.url
        except (ValueError, KeyError):
            return None
        return checkpoint_dir / url.rsplit("/", 1)[-1]
    if kind == "timm":
        found = [checkpoint_dir / f"{name}{ext}" for ext in (".safetensors", ".pth")]
        return next((p for p in found if p.is_file()), found[0])
    return None


def read_weights(path: Path, trust_checkpoints: bool) -> tuple[dict[str, torch.Tensor], str]:
    """A weights file's state_dict and the SHA-256 of its bytes (``.safetensors``: tensors only by design)."""
    if path.suffix == ".safetensors":
        from safetensors import SafetensorError
        from safetensors.torch import load

        data = path.read_bytes()
        try:
            return load(data), bytes_digest(data)
        except SafetensorError as err:
            raise ValueError(f"{path}: not a readable .safetensors file ({err}); it may be cut short: copy it "
                             "again from where it was saved") from None
    return read_checkpoint(path, trust_checkpoints)

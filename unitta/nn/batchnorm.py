"""Find and replace the BatchNorm layers of a model.

The model zoo lists them (``ModelInfo.bn_layers``); the normalisation-based TTA methods swap them.
"""

from __future__ import annotations

from collections.abc import Callable

from torch import nn

_BN_TYPES = (nn.BatchNorm1d, nn.BatchNorm2d)


def named_batchnorms(model: nn.Module) -> list[tuple[str, nn.modules.batchnorm._BatchNorm]]:
    """(dotted name, layer) of every BatchNorm1d/2d in module order."""
    return [(name, module) for name, module in model.named_modules() if isinstance(module, _BN_TYPES)]


def get_submodule(model: nn.Module, name: str) -> nn.Module:
    """``model.get_submodule(name)`` with an error that lists what exists."""
    try:
        return model.get_submodule(name)
    except AttributeError:
        raise ValueError(f"model has no layer {name!r}") from None


def set_submodule(model: nn.Module, name: str, new: nn.Module) -> None:
    """Replace the submodule at dotted ``name`` with ``new``."""
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, new)


def replace_batchnorms(
    model: nn.Module, factory: Callable[[str, nn.modules.batchnorm._BatchNorm], nn.Module]
) -> dict[str, nn.Module]:
    """Replace every BatchNorm layer by ``factory(name, bn)`` in place; returns {name: new layer}."""
    replaced = {}
    for name, bn in named_batchnorms(model):
        new = factory(name, bn)
        set_submodule(model, name, new)
        replaced[name] = new
    return replaced


def train_affine(layers) -> list[nn.Parameter]:
    """Make the affine weight/bias of ``layers`` trainable and return them (TENT-style adaptation)."""
    params: list[nn.Parameter] = []
    for layer in layers:
        for p in (layer.weight, layer.bias):
            if p is not None:
                p.requires_grad_(True)
                params.append(p)
    return params

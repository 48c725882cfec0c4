"""Normalisation layers of any kind: BatchNorm, LayerNorm, GroupNorm.

Methods that adapt "the normalisation layers' affine parameters" (TENT, ETA/EATA, SAR, DeYO, RPL, RDumb, CMF,
RMT, ...) do so on whatever kind a model has, as the mariodoebler TTA benchmark's ``configure_model`` /
``collect_params`` do (BatchNorm: batch statistics + affine; LayerNorm / GroupNorm: affine only).
``norm_kind(model)`` names a model's kind: 'batch', 'layer', 'group' (the first kind found, in that order
of priority, among layers with parameters), or 'none'.
"""

from __future__ import annotations

from torch import nn

__all__ = ["NORM_KINDS", "NORM_TYPES", "named_norms", "norm_kind", "norm_kind_of"]

NORM_KINDS = ("batch", "layer", "group")
NORM_TYPES: dict[str, tuple[type[nn.Module], ...]] = {
    "batch": (nn.BatchNorm1d, nn.BatchNorm2d),
    "layer": (nn.LayerNorm,),
    "group": (nn.GroupNorm,),
}


def norm_kind_of(module: nn.Module) -> str | None:
    """'batch' | 'layer' | 'group' for a normalisation layer, else None."""
    for kind, types in NORM_TYPES.items():
        if isinstance(module, types):
            return kind
    return None


def named_norms(model: nn.Module, kinds: tuple[str, ...] = NORM_KINDS) -> list[tuple[str, nn.Module]]:
    """(dotted name, layer) of every normalisation layer of the given kinds, in module order."""
    return [(name, m) for name, m in model.named_modules() if norm_kind_of(m) in kinds]


def norm_kind(model: nn.Module) -> str:
    """The model's normalisation kind: 'batch' if it has any BatchNorm, else 'layer', 'group', or 'none'."""
    found = {norm_kind_of(m) for m in model.modules()} - {None}
    for kind in NORM_KINDS:
        if kind in found:
            return kind
    return "none"

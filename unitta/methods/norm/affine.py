"""The common set-up of the affine-adapting methods, on any normalisation kind.

``adapt_norm_affine(model)``: everything frozen; every BatchNorm replaced by ``BatchStatsNorm`` (test-batch
statistics, as TENT); the affine weight/bias of every BatchNorm, LayerNorm and GroupNorm made trainable, except
layers whose dotted name starts with one of ``exclude`` (SAR leaves out the last blocks: its paper sec. 5 and
the mariodoebler TTA benchmark's ``sar.collect_params``). This is what the mariodoebler benchmark's
``configure_model`` + ``collect_params`` do for TENT, ETA/EATA, SAR, DeYO, RPL, RDumb and CMF.
"""

from __future__ import annotations

from torch import nn

from unitta.methods.norm.batch_stats import BatchStatsNorm
from unitta.nn.batchnorm import replace_batchnorms
from unitta.nn.norms import NORM_TYPES

__all__ = ["adapt_norm_affine"]


def adapt_norm_affine(
    model: nn.Module, exclude: tuple[str, ...] = (), batch_stats: bool = True
) -> list[nn.Parameter]:
    """Set ``model`` up for affine adaptation (module docstring) and return the trainable parameters.

    batch_stats: replace BatchNorms by ``BatchStatsNorm`` (False keeps the source running statistics).
    """
    model.requires_grad_(False)
    if batch_stats:
        replace_batchnorms(model, lambda name, bn: BatchStatsNorm(bn))
    norm_types = (BatchStatsNorm, *NORM_TYPES["batch"], *NORM_TYPES["layer"], *NORM_TYPES["group"])
    params: list[nn.Parameter] = []
    for name, module in model.named_modules():
        if not isinstance(module, norm_types) or any(name == p or name.startswith(p + ".") for p in exclude):
            continue
        for p in (module.weight, module.bias):
            if p is not None:
                p.requires_grad_(True)
                params.append(p)
    model.eval()
    return params

"""Small statistics helpers shared by the normalisation layers (Balanced BN, BDN, batch-stat BN).

All helpers treat a feature map ``x`` of shape (B, C, *spatial) (spatial may be empty, as for a
BatchNorm1d input of shape (B, C)) and return per-sample, per-channel quantities of shape (B, C).
"""

from __future__ import annotations

import torch
from torch import Tensor


def instance_mean_var(x: Tensor) -> tuple[Tensor, Tensor]:
    """Per-sample, per-channel mean and *biased* variance over the spatial positions, each (B, C).

    This is ``torch.var_mean(x, dim=[2, 3], unbiased=False)`` of the reference BDN (spec 2.5). For a
    (B, C) input every sample has one value per channel: mean = x, variance = 0.
    """
    if x.ndim == 2:
        return x, torch.zeros_like(x)
    var, mean = torch.var_mean(x, dim=tuple(range(2, x.ndim)), unbiased=False)
    return mean, var


def instance_second_moment(x: Tensor, centre: Tensor) -> tuple[Tensor, Tensor]:
    """Per-sample spatial means of ``x - centre`` and of ``(x - centre)**2``, each (B, C).

    ``centre`` is (B, C): the statistics each sample is compared with (its class or domain-class
    mean). These are the two sums of the EMA updates of spec 2.3 / 2.4:
    mean_hw(x_i - mu) and mean_hw((x_i - mu)^2).
    """
    delta = x - as_map(centre, x)
    if x.ndim == 2:
        return delta, delta * delta
    dims = tuple(range(2, x.ndim))
    return delta.mean(dims), delta.pow(2).mean(dims)


def as_map(stat: Tensor, x: Tensor) -> Tensor:
    """Reshape a (C,) or (B, C) statistic so that it broadcasts against ``x`` (B, C, *spatial)."""
    extra = (1,) * (x.ndim - 2)
    if stat.ndim == 1:
        return stat.view(1, -1, *extra)
    return stat.view(stat.shape[0], stat.shape[1], *extra)


def across_class_var(means: Tensor, dim: int) -> Tensor:
    """Variance of the class means along ``dim``, unbiased (divide by K-1) as torch's default.

    Spec 2.3 / 2.4: the global (or domain) variance is mean_k var_k + var_k(mean_k) with the
    *unbiased* variance of the K class means. With a single class the term is 0 (torch would give NaN).
    """
    if means.shape[dim] < 2:
        return torch.zeros_like(means.select(dim, 0))
    return means.var(dim=dim)


def normalise(x: Tensor, mean: Tensor, var: Tensor, eps: float, weight: Tensor | None, bias: Tensor | None) -> Tensor:
    """(x - mean) / sqrt(var + eps) * weight + bias with (C,) or (B, C) statistics.

    A negative variance (possible with the reference's unclamped BDN update, spec 2.4) is clamped to 0
    before adding eps, so the output is finite where the reference would give NaN; for non-negative
    variances this is exactly the reference formula.
    """
    out = (x - as_map(mean, x)) / torch.sqrt(as_map(var.clamp_min(0.0), x) + eps)
    if weight is not None:
        out = out * as_map(weight, x)
    if bias is not None:
        out = out + as_map(bias, x)
    return out

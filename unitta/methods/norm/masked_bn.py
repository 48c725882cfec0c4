"""Train-mode batch normalisation over the rows a mask keeps, with a hand-written backward in few operators.

The differentiable forward of a masked layer (``row_mask.masked_rows``): ROID's and CMF's augmented forward through
``BatchStatsNorm`` (the kept rows' statistics, a = 1), RoTTA's student through ``RobustBN`` while its memory fills
(a = its momentum). docs/benchmarks.md "Device paths" (masked statistics in few kernels) gives the counts.

With mu_b, s2_b the kept rows' mean and biased variance (``masked_moments``), m = lerp(mu_g, mu_b, a) and
v = lerp(s2_g, s2_b, a) (m = mu_b, v = s2_b for a = 1), s = (v + eps)^-1/2, k = w s, xc = x - m, N_K the kept
elements per channel, r_i the row weight (1 kept, 0 not), rho_i = r_i / N_K (``RowWeights``' mean weights) and g
the output gradient:
    y = xc k + b,
    db = sum g, dw = s sum g xc (sums over every row and position: every row's output uses the kept statistics),
    dx_i = k [g_i - a rho_i (db + s dw (x_i - mu_b))],  x - mu_b = xc + (m - mu_b).
Every statistic is a map (1, C, 1, ...), so that nothing is reshaped between the operators: the forward is two
weighted sums, the centring, rsqrt and one fused multiply-add; the backward two sums and four fused operators.
"""

from __future__ import annotations

import torch
from torch import Tensor

from unitta.methods.norm.row_mask import RowWeights, masked_moments
from unitta.methods.norm.stats import constant, parameter_map

__all__ = ["MaskedBatchNormTrain"]


class MaskedBatchNormTrain(torch.autograd.Function):
    """``MaskedBatchNormTrain.apply(x, weight, bias, weights, eps, momentum, running)``: y above for the mask of
    ``weights`` (``RowWeights``). ``running``: the (mean, var) buffers that take m and v (RobustBN), or None (a
    ``BatchStatsNorm``: its source statistics untouched, momentum 1)."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor | None, bias: Tensor | None, weights: RowWeights, eps: float,
                momentum: float = 1.0, running: tuple[Tensor, Tensor] | None = None) -> Tensor:
        mean_weights = weights.of(x)
        mean, var, centred = masked_moments(x, mean_weights)
        shift = None  # m - mu_b
        if momentum < 1.0:
            batch_mean = mean
            mean = torch.lerp(running[0].view_as(mean), batch_mean, momentum)
            var = torch.lerp(running[1].view_as(var), var, momentum)
            centred, shift = x - mean, mean - batch_mean
        if running is not None:
            running[0].copy_(mean.view(-1))
            running[1].copy_(var.view(-1))
        s = torch.rsqrt(torch.add(var, constant(eps, var)))
        k = s if weight is None else s * parameter_map(weight, x)
        out = centred * k if bias is None else torch.addcmul(parameter_map(bias, x), centred, k)
        ctx.save_for_backward(centred, s, k, mean_weights, shift)
        ctx.momentum, ctx.affine = momentum, weight is not None
        return out

    @staticmethod
    def backward(ctx, g: Tensor):
        centred, s, k, mean_weights, shift = ctx.saved_tensors
        dims = [0, *range(2, g.ndim)]
        db = g.sum(dims, keepdim=True)
        dw = (g * centred).sum(dims, keepdim=True) * s
        u = s * dw
        t = torch.addcmul(db if shift is None else torch.addcmul(db, shift, u), centred, u)  # db + s dw (x - mu_b)
        dx = torch.addcmul(g, t, mean_weights, value=-ctx.momentum) * k
        needs = ctx.needs_input_grad
        return (dx if needs[0] else None), (dw.view(-1) if ctx.affine and needs[1] else None), (
            db.view(-1) if needs[2] else None), None, None, None, None

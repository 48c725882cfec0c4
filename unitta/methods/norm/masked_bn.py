"""Train-mode batch normalisation over the rows a mask keeps, with a hand-written backward in few operators.

The differentiable forward of a masked layer (``row_mask.masked_rows``): ROID's and CMF's augmented forward through
``BatchStatsNorm`` (the kept rows' statistics, a = 1), RoTTA's student through ``RobustBN`` while its memory fills
(a = its momentum). docs/benchmarks.md "Device paths" (masked statistics in few kernels) gives the counts.

With mu_b, s2_b the kept rows' mean and biased variance (``masked_mean_var``), m = lerp(mu_g, mu_b, a) and
v = lerp(s2_g, s2_b, a) (m = mu_b, v = s2_b for a = 1), s = (v + eps)^-1/2, k = w s, N_K the kept elements per
channel, r_i the row weight (1 kept, 0 not) and g the output gradient:
    y = (x - m) k + b,
    dx_i = g_i k - r_i (a / N_K) k [sum g + s (sum g xhat) (x_i - mu_b)],  xhat = (x - m) s,
    dw = sum g xhat, db = sum g (sums over every row and position: every row's output uses the kept statistics).
``g k``, ``sum g xhat`` and ``sum g`` are one ``native_batch_norm_backward`` in eval mode (statistics m, v); the
statistics' terms are four per-channel products and two fused multiply-adds over the batch.
"""

from __future__ import annotations

import torch
from torch import Tensor

from unitta.methods.norm.row_mask import RowWeights, masked_moments
from unitta.methods.norm.stats import as_map, constant

__all__ = ["MaskedBatchNormTrain"]


class MaskedBatchNormTrain(torch.autograd.Function):
    """``MaskedBatchNormTrain.apply(x, weight, bias, weights, eps, momentum, running)``: y above for the mask of
    ``weights`` (``RowWeights``). ``running``: the (mean, var) buffers that take m and v (RobustBN), or None (a
    ``BatchStatsNorm``: its source statistics untouched, momentum 1)."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor | None, bias: Tensor | None, weights: RowWeights, eps: float,
                momentum: float = 1.0, running: tuple[Tensor, Tensor] | None = None) -> Tensor:
        rows, inverse, mean_weights = weights.of(x)
        batch_mean, var, centred = masked_moments(x, mean_weights)
        mean = batch_mean
        if momentum < 1.0:
            mean = torch.lerp(running[0], batch_mean, momentum)
            var = torch.lerp(running[1], var, momentum)
            centred = x - as_map(mean, x)
        if running is not None:
            running[0].copy_(mean)
            running[1].copy_(var)
        s = torch.rsqrt(torch.add(var, constant(eps, var)))
        k = s if weight is None else s * weight
        out = centred * as_map(k, x) if bias is None else torch.addcmul(as_map(bias, x), centred, as_map(k, x))
        ctx.save_for_backward(x, weight, mean, var, batch_mean, s, k, rows, inverse)
        ctx.eps, ctx.momentum = eps, momentum
        return out

    @staticmethod
    def backward(ctx, g: Tensor):
        x, weight, mean, var, batch_mean, s, k, rows, inverse = ctx.saved_tensors
        # g k, sum g xhat, sum g over every row: batch norm's eval-mode backward with the statistics (m, v)
        dx, dw, db = torch.ops.aten.native_batch_norm_backward(
            g, x, weight, mean, var, None, None, False, ctx.eps, [True, True, True]
        )
        c = torch.mul(k, inverse)  # (a / N_K) k
        if ctx.momentum < 1.0:
            c = torch.mul(c, constant(ctx.momentum, c))
        c1, c2 = c * db, c * s * dw
        through = torch.addcmul(as_map(torch.addcmul(c1, c2, batch_mean, value=-1.0), x), x, as_map(c2, x))
        dx = torch.addcmul(dx, through, rows, value=-1.0)  # the statistics' terms, kept rows only
        needs = ctx.needs_input_grad
        return (dx if needs[0] else None), (dw if weight is not None and needs[1] else None), (
            db if needs[2] else None), None, None, None, None

"""Robust BN (RBN): RoTTA's normalisation layer (Yuan et al., CVPR'23, sec. 3.1; docs/methods.md "RoTTA").

RBN keeps global statistics (mu_g, sigma2_g), initialised from the source BN's running statistics.

- Train mode: with the current batch's mean and *biased* variance (mu_b, sigma2_b over N and the
  spatial positions), mu_g <- (1 - alpha) mu_g + alpha mu_b and sigma2_g likewise; the output is
  normalised with the *updated* statistics (the gradient flows through mu_b, sigma2_b).
- Eval mode: normalise with the stored (mu_g, sigma2_g); nothing changes.

Then the BN's own affine (gamma, beta) applies. alpha = 0.05 in every RoTTA config
(``ADAPTER.RoTTA.ALPHA``). Works for BatchNorm1d (B, C) and BatchNorm2d (B, C, H, W) inputs and any
B >= 1: the statistics of a single (B, C) sample are its values with variance 0, so the output
stays finite. Inside ``row_mask.masked_rows`` the batch statistics are those of the rows the mask keeps.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from unitta.methods.norm.fast_paths import fast_paths
from unitta.methods.norm.masked_bn import MaskedBatchNormTrain
from unitta.methods.norm.row_mask import RowMaskedNorm, RowWeights, masked_mean_var
from unitta.methods.norm.stats import (
    AffineCache,
    affine,
    apply_affine,
    as_map,
    constant,
    float32_forward,
    needs_grad,
    normalise,
    source_statistics,
)

__all__ = ["RobustBN", "RobustBNTrain"]


class RobustBN(RowMaskedNorm):
    """RoTTA's Robust BN built from a source BatchNorm (its affine parameters are shared, not copied)."""

    def __init__(self, bn: nn.modules.batchnorm._BatchNorm, momentum: float = 0.05):
        super().__init__()
        if not 0.0 <= momentum <= 1.0:
            raise ValueError(f"momentum={momentum!r} must lie in [0, 1]")
        source_mean, source_var = source_statistics(bn, "RobustBN")
        self.num_features = bn.num_features
        self.eps = bn.eps
        self.momentum = momentum
        self.weight = bn.weight
        self.bias = bn.bias
        self.register_buffer("running_mean", source_mean)
        self.register_buffer("running_var", source_var)
        self._affine = AffineCache()

    @classmethod
    def from_bn(cls, bn: nn.modules.batchnorm._BatchNorm, momentum: float = 0.05) -> RobustBN:
        return cls(bn, momentum)

    @float32_forward
    def forward(self, x: Tensor) -> Tensor:
        masked = self.row_mask is not None
        if self.training and fast_paths() and needs_grad(x, self.weight, self.bias):
            if masked:  # the kept rows' statistics (norm/masked_bn.py)
                weights = self.row_weights_of or RowWeights(self.row_mask)
                running = (self.running_mean, self.running_var)
                return MaskedBatchNormTrain.apply(x, self.weight, self.bias, weights, self.eps, self.momentum, running)
            return RobustBNTrain.apply(x, self.weight, self.bias, self)
        if self.training:
            if masked:
                batch_mean, batch_var = masked_mean_var(x, self.row_mask, self.row_weights_of)
            else:
                batch_var, batch_mean = torch.var_mean(x, dim=[0, *range(2, x.ndim)], unbiased=False)
            # (1 - alpha) mu_g + alpha mu_b in one operator (torch.lerp), likewise the variance
            if not torch.is_grad_enabled() or not (batch_mean.requires_grad or batch_var.requires_grad):
                self.running_mean.lerp_(batch_mean, self.momentum)  # in place: the same kernel, no copy
                self.running_var.lerp_(batch_var, self.momentum)
                return normalise(x, self.running_mean, self.running_var, self.eps, self.weight, self.bias)
            mean = torch.lerp(self.running_mean, batch_mean, self.momentum)
            var = torch.lerp(self.running_var, batch_var, self.momentum)
            with torch.no_grad():
                self.running_mean.copy_(mean)
                self.running_var.copy_(var)
            return normalise(x, mean, var, self.eps, self.weight, self.bias)
        if AffineCache.usable(self.weight, self.bias):
            # eval: the statistics and affine change only at updates, so their (scale, shift) are cached and
            # the forward is one ``x * scale + shift`` operator
            shape = (-1,) + (1,) * (x.ndim - 2)
            stats = (self.running_mean, self.running_var, self.eps, self.weight, self.bias)
            scale, shift = self._affine.get(*stats, shape)
            return apply_affine(x, scale, shift)
        return normalise(x, self.running_mean, self.running_var, self.eps, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}, momentum={self.momentum}"


class RobustBNTrain(torch.autograd.Function):
    """The train-mode RBN forward (same operators, hence the same values, as the plain path) with a
    hand-written backward: about a dozen operators instead of autograd's ~100 through var_mean, lerp,
    rsqrt and the affine form (bench/opcount.py).

    With m = lerp(mu_g, mu_b, a), v = lerp(s2_g, s2_b, a), s = (v + eps)^-1/2, xc = x - m, N the
    elements per channel and g the output gradient:
        dbias = sum g, dweight = s sum g xc, dL/dm = -w s sum g, dL/dv = -w s^3 / 2 sum g xc,
        dx = g w s + (a / N) dL/dm + (2 a / N) dL/dv (x - mu_b).
    A masked batch (``row_mask``) runs ``MaskedBatchNormTrain`` instead (norm/masked_bn.py).
    The variance clamp of ``affine`` is inactive here (v is a convex mix of non-negative variances).
    """

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor | None, bias: Tensor | None, layer: RobustBN) -> Tensor:
        dims = [0, *range(2, x.ndim)]
        batch_var, batch_mean = torch.var_mean(x, dim=dims, unbiased=False)
        momentum = layer.momentum
        mean = torch.lerp(layer.running_mean, batch_mean, momentum)
        var = torch.lerp(layer.running_var, batch_var, momentum)
        layer.running_mean.copy_(mean)
        layer.running_var.copy_(var)
        scale, shift = affine(mean, var, layer.eps, weight, bias)
        ctx.save_for_backward(x, weight, mean, var, batch_mean)
        ctx.eps, ctx.momentum, ctx.dims = layer.eps, momentum, dims
        return apply_affine(x, as_map(scale, x), as_map(shift, x))

    @staticmethod
    def backward(ctx, g: Tensor):
        x, weight, mean, var, batch_mean = ctx.saved_tensors
        dims, a = ctx.dims, ctx.momentum
        n = x.numel() // x.shape[1]
        # cached 0-dim constants: a Python number operand costs a host-side conversion per call
        factor = constant(-a / n, var)
        s = torch.rsqrt(torch.add(var, constant(ctx.eps, var)))
        xc = x - as_map(mean, x)
        g_sum = g.sum(dims)
        gxc_sum = (g * xc).sum(dims)
        k = s if weight is None else s * weight  # dL/dx through the normalisation: g * k
        c1 = torch.mul(k * g_sum, factor)  # (a / N) dL/dm
        c2 = torch.mul(k * s * s * gxc_sum, factor)  # (2 a / N) dL/dv
        c0 = torch.addcmul(c1, c2, mean - batch_mean)
        through_stats = torch.addcmul(as_map(c0, x), xc, as_map(c2, x))  # c1 + c2 (x - mu_b)
        dx = torch.addcmul(through_stats, g, as_map(k, x))
        dw = None if weight is None or not ctx.needs_input_grad[1] else gxc_sum * s
        db = g_sum if ctx.needs_input_grad[2] else None
        return (dx if ctx.needs_input_grad[0] else None), dw, db, None

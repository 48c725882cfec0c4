"""TRIBE's Balanced BatchNorm (Su et al., AAAI'24, "V5"): class-balanced test statistics (docs/unitta.md).

The layer keeps per-class statistics (mu_k, sigma2_k), k = 1..K, all initialised to the source BN's
running statistics, and derives global statistics from them as if every class were equally frequent:
global_mean = mean_k mu_k, global_var = mean_k sigma2_k + var_k(mu_k) (unbiased across classes).

Update (train mode, pseudo-labels given in ``label``), per class k present with n_k samples:
  m_k = 1/n_k if n_k > 1/eta else eta                                    (TRIBE's clamp)
  delta_k = m_k sum_{i: y_i=k} (mean_hw(x_i) - mu_k),  q_k = sum_{i: y_i=k} mean_hw((x_i - mu_k)^2)
  mu_k += (1-gamma) delta_k;  then for all j: mu_j += gamma * mean_k delta_k
  s2_k += (1-gamma) (m_k (q_k - n_k s2_k) - delta_k^2);
  then for all j: s2_j += gamma (mean_k (m_k q_k - delta_k^2) - mean_k (m_k n_k) s2_j)
(means over the present classes; the all-class terms use the values after the present-class step).

Usage: set ``layer.label`` (B,) before a train-mode forward to update then normalise with the
updated global statistics; the label is consumed (reset to None) by that forward, as in TRIBE. A
method that drives many layers may set a ``ClassGroups`` (``norm/groups.py``) instead, built once per
batch and shared by all layers.
Without a label, or in eval mode, the layer normalises with the current global statistics and
changes nothing. Within an updating forward the new statistics keep their autograd history (as in
TRIBE, where the batch enters the statistics it is normalised with); the stored buffers are detached.

GPU efficiency (measured by bench/opcount.py): the update is a fixed sequence of about twenty
operators per layer whatever K and the batch's composition (two matrix products with the per-batch
class weights instead of per-class loops or scatters, no host synchronisation), and a forward that
does not update is a single ``x * scale + shift`` whose (scale, shift) are cached until the
statistics or the affine parameters change.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from unitta.methods.norm.fast_paths import fast_paths
from unitta.methods.norm.groups import ClassGroups
from unitta.methods.norm.stats import (
    AffineCache,
    apply_affine,
    as_map,
    class_mean_var,
    constant,
    ema_step,
    instance_moments,
    normalise,
    source_statistics,
)
from unitta.methods.parts.device import DevicePaths


class BalancedBatchNorm2d(nn.Module):
    """Class-balanced BatchNorm of TRIBE (docs/unitta.md "Layers"), built from a source ``nn.BatchNorm2d``."""

    def __init__(self, bn: nn.modules.batchnorm._BatchNorm, num_classes: int, eta: float, gamma: float,
                 paths: DevicePaths | None = None):
        super().__init__()
        self.paths = paths if paths is not None else DevicePaths.from_environment()  # the building method's
        if num_classes < 1:
            raise ValueError(f"num_classes={num_classes} must be >= 1")
        if not 0.0 < eta <= 1.0:
            raise ValueError(f"eta={eta} must be in (0, 1]")
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma={gamma} must be in [0, 1]")
        self.num_features = bn.num_features
        self.num_classes = num_classes
        self.eta = eta
        self.gamma = gamma
        self.eps = bn.eps
        self.weight = bn.weight  # the BN's affine parameters (None if affine=False)
        self.bias = bn.bias
        mean, var = source_statistics(bn, "BalancedBatchNorm2d")
        self.register_buffer("global_mean", mean.clone())
        self.register_buffer("global_var", var.clone())
        self.register_buffer("local_mean", mean.unsqueeze(0).repeat(num_classes, 1))
        self.register_buffer("local_var", var.unsqueeze(0).repeat(num_classes, 1))
        self.label: Tensor | ClassGroups | None = None
        self._affine = AffineCache()

    def extra_repr(self) -> str:
        return f"{self.num_features}, num_classes={self.num_classes}, eta={self.eta}, gamma={self.gamma}"

    def forward(self, x: Tensor) -> Tensor:
        label, self.label = self.label, None
        if self.training and label is not None:
            groups = self.groups(label, x)
            if _BalancedUpdate.usable(self, x, groups):
                return _BalancedUpdate.apply(x, self.weight, self.bias, self, groups)
            mean, var = self.update(x, groups)
            if mean.requires_grad or var.requires_grad:
                return normalise(x, mean, var, self.eps, self.weight, self.bias)
        return self.normalise_global(x)

    def normalise_global(self, x: Tensor) -> Tensor:
        """Normalise with the current global statistics (one cached-affine operator without autograd)."""
        if not AffineCache.usable(self.weight, self.bias):
            return normalise(x, self.global_mean, self.global_var, self.eps, self.weight, self.bias)
        shape = (-1,) + (1,) * (x.ndim - 2)
        scale, shift = self._affine.get(self.global_mean, self.global_var, self.eps, self.weight, self.bias, shape)
        return apply_affine(x, scale, shift)

    def groups(self, label: Tensor | ClassGroups, x: Tensor) -> ClassGroups:
        """The batch's ClassGroups: the one given, or built here from a (B,) label tensor."""
        if isinstance(label, ClassGroups):
            if not label.matches(self.num_classes, self.eta, x.shape[0]):
                raise ValueError("ClassGroups were built for another number of classes, eta or batch size")
            return label
        if label.shape != (x.shape[0],):
            raise ValueError(f"label has shape {tuple(label.shape)}, expected ({x.shape[0]},)")
        return ClassGroups(label.to(device=x.device), self.num_classes, self.eta, x.dtype)

    def update(self, x: Tensor, groups: ClassGroups, moments: tuple[Tensor, Tensor, int] | None = None):
        """Class-balanced EMA step (module docstring); stores and returns the new global (mean, var).

        ``moments``: ``instance_moments(x)`` if the caller already has them.
        """
        return self._step(x, groups, moments)[:2]

    def _step(self, x: Tensor, groups: ClassGroups, moments: tuple[Tensor, Tensor, int] | None = None):
        """``update``, also returning (previous class means, delta, new class means, L) for the backward."""
        previous = self.local_mean
        if moments is None:
            moments = instance_moments(x, self.paths)
        # (K, C) each: m_k sum_{i in k} of mean_hw(x_i) and of mean_hw(x_i^2)
        s1, s2 = groups.sums(*moments)
        g = self.gamma
        new_mean, new_var, delta, spread = ema_step(self.local_mean, self.local_var, s1, s2, groups.mn, 1.0 - g)
        if g > 0.0:
            # then every class moves by gamma times the mean over the present classes (absent rows are 0)
            new_mean = torch.add(new_mean, delta.sum(0) / groups.num_present, alpha=g)
            var_gap = torch.addcmul(spread, delta, delta, value=-1.0).sum(0) / groups.num_present
            new_var = torch.add(new_var, torch.addcmul(var_gap, groups.mn_mean, new_var, value=-1.0), alpha=g)
        global_mean, between = class_mean_var(new_mean, 0)
        global_var = torch.add(between, new_var.sum(0), alpha=1.0 / self.num_classes)
        self.local_mean, self.local_var = _detached(new_mean), _detached(new_var)
        self.global_mean, self.global_var = _detached(global_mean), _detached(global_var)
        return global_mean, global_var, previous, delta, new_mean, moments[2]


def _detached(t: Tensor) -> Tensor:
    return t.detach() if t.requires_grad else t


class _BalancedUpdate(torch.autograd.Function):
    """An updating Balanced BN forward (``update`` then the affine normalisation, the same operators and
    values as the autograd path) with a hand-written backward: about forty operators per layer instead
    of autograd's ~160 through the moments, the group sums, the EMA step, the class variance and the
    affine form (bench/opcount.py).

    With global (m, v), s = clamp(v + eps, eps)^-1/2, k = w s and g the output gradient:
        dL/dm = -k sum g,  dL/dv = -k s^2 / 2 sum g (x - m)   (0 where v + eps < eps, as the clamp),
        a_k = dL/dm / K + 2 dL/dv (mu'_k - m) / (K - 1)        (dL/d mu'_k, mu' the new class means),
        D = dL/dv ((1 - gamma) (1 - gamma mean_k m_k n_k) / K + gamma / P)   (dL/d s2_k, every class),
        dL/ds1_k = (1 - gamma) a_k - 2 (delta_k + mu_k) D + gamma dL/dm / P,
    where s1, s2 are the weighted group sums of the moments (``groups.sums``), mu the previous class
    means, delta the step's ``ema_step`` delta and P the present classes; then through the moments
    dL/dx = g k + W^T dL/ds1 + 2 x (colsum W) D, for the (K, B) group weights W.
    """

    @staticmethod
    def usable(layer: BalancedBatchNorm2d, x: Tensor, groups: ClassGroups) -> bool:
        return (
            fast_paths() and torch.is_grad_enabled() and x.requires_grad and groups.weight is not None and x.ndim >= 2
            and layer.weight is not None and layer.bias is not None
        )

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, bias: Tensor, layer: BalancedBatchNorm2d, groups: ClassGroups):
        mean, var, previous, delta, new_mean, divisor = layer._step(x, groups)
        # ``affine``'s operators, keeping s = clamp(v + eps, eps)^-1/2 and the clamp's mask for the backward
        shifted = torch.add(var, constant(layer.eps, var))
        unclamped = shifted >= constant(layer.eps, shifted)
        s = torch.rsqrt(shifted.clamp_min_(layer.eps))
        scale = s * weight
        shift = torch.addcmul(bias, mean, scale, value=-1.0)
        ctx.save_for_backward(x, previous, delta, new_mean, mean, s, scale, unclamped)
        ctx.layer, ctx.groups, ctx.divisor = layer, groups, divisor
        return apply_affine(x, as_map(scale, x), as_map(shift, x))

    @staticmethod
    def backward(ctx, g: Tensor):
        x, previous, delta, new_mean, mean, s, k, unclamped = ctx.saved_tensors
        layer, groups = ctx.layer, ctx.groups
        K, gamma = layer.num_classes, layer.gamma
        dims = [0, *range(2, x.ndim)]
        g_sum = g.sum(dims)
        gxc_sum = (g * (x - as_map(mean, x))).sum(dims)
        kg = k * g_sum  # -dL/dm
        d_weight = gxc_sum * s
        h = torch.mul(k * s, d_weight)  # -2 dL/dv before the clamp's mask
        h = torch.where(unclamped, h, constant(0.0, h))
        if K > 1:
            a = torch.addcmul(torch.mul(kg, constant(-1.0 / K, kg)), new_mean - mean, h, value=-1.0 / (K - 1))
        else:
            a = torch.neg(kg).unsqueeze(0)
        # 2 D, and the factor of the moments' derivatives (1/L when they are spatial means, as on CUDA)
        positions = math.prod(x.shape[2:])
        f = ctx.divisor / positions
        if gamma == 0.0:
            d2 = torch.mul(h, constant(-f / K, h))
        else:
            coef = (1.0 - gamma) / K * (1.0 - gamma * groups.mn_mean) + gamma / groups.num_present
            d2 = h * (-f * coef)
            if gamma < 1.0:
                a = a - (gamma / (1.0 - gamma)) * kg / groups.num_present
        if gamma == 1.0:
            d_s1 = torch.addcmul(-(f * gamma) * kg / groups.num_present, delta + previous, d2, value=-1.0)
        else:
            ra = a if gamma == 0.0 and f == 1.0 else a * ((1.0 - gamma) * f)
            d_s1 = torch.addcmul(ra, delta + previous, d2, value=-1.0)
        weight_t, weight_sums = groups.scaled_weight(ctx.divisor)  # (B, K), (B, 1): of the weights ``sums`` used
        d_first = torch.mm(weight_t, d_s1)  # (B, C)
        d_second = torch.mul(weight_sums, d2)  # (B, C)
        dx = torch.addcmul(torch.addcmul(as_map(d_first, x), x, as_map(d_second, x)), g, as_map(k, x))
        return dx, d_weight, g_sum, None, None

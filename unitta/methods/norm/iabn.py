"""Instance-aware BN (IABN): NOTE's normalisation layer (Gong et al., NeurIPS'22, sec. 3.1; docs/methods.md "NOTE").

For a sample's instance statistics (mu_i, sigma2_i; unbiased variance over its L = H*W positions)
and the "batch" statistics (mu_B, sigma2_B):

    s_mu     = sqrt((sigma2_B + eps) / L)
    s_sigma2 = (sigma2_B + eps) * sqrt(2 / (L - 1))
    mu^      = mu_B + softshrink(mu_i - mu_B, k * s_mu)
    sigma2^  = max(0, sigma2_B + softshrink(sigma2_i - sigma2_B, k * s_sigma2))
    y        = gamma * (x - mu^) / sqrt(sigma2^ + eps) + beta

(mu_B, sigma2_B) are the running statistics in eval mode and the unbiased statistics of the current
batch in train mode; a train forward also updates the running statistics with ``momentum``, as a
PyTorch BatchNorm does. k = 4 and momentum = 0.01 in NOTE's and UT's configs. Layers with
L <= ``skip_threshold`` (default 1; e.g. a BatchNorm1d on (B, C)) use (mu_B, sigma2_B) alone, since
instance statistics need L >= 2.

A train-mode batch with a single value per channel (N * L == 1) has no unbiased variance: the layer
then normalises with the running statistics and leaves them unchanged, so the output stays finite.

DEVIATION(NOTE paper): NOTE pre-trains the source model with IABN; UT (and this project, which uses
off-the-shelf BN checkpoints) swaps IABN into a BN-trained model at test time (docs/methods.md "NOTE").
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from unitta.methods.norm.fast_paths import fast_paths
from unitta.methods.norm.stats import (
    as_map,
    constant,
    float32_forward,
    instance_mean_var,
    needs_grad,
    normalise,
    source_statistics,
)
from unitta.methods.parts.device import DevicePaths

__all__ = ["InstanceAwareBN"]


class InstanceAwareBN(nn.Module):
    """NOTE's IABN built from a source BatchNorm (affine shared, running statistics copied)."""

    def __init__(
        self,
        bn: nn.modules.batchnorm._BatchNorm,
        k: float = 4.0,
        momentum: float = 0.01,
        skip_threshold: int = 1,
        paths: DevicePaths | None = None,
    ):
        super().__init__()
        self.paths = paths if paths is not None else DevicePaths.from_environment()  # the building method's
        source_mean, source_var = source_statistics(bn, "InstanceAwareBN")
        if k < 0:
            raise ValueError(f"k={k!r} must be >= 0")
        if not 0.0 <= momentum <= 1.0:
            raise ValueError(f"momentum={momentum!r} must lie in [0, 1]")
        self.num_features = bn.num_features
        self.eps = bn.eps
        self.k = k
        self.momentum = momentum
        self.skip_threshold = skip_threshold
        self.weight = bn.weight
        self.bias = bn.bias
        self.register_buffer("running_mean", source_mean)
        self.register_buffer("running_var", source_var)
        self._cached: tuple | None = None  # the thresholds of ``_thresholds``

    @classmethod
    def from_bn(cls, bn: nn.modules.batchnorm._BatchNorm, **kwargs) -> InstanceAwareBN:
        return cls(bn, **kwargs)

    @float32_forward
    def forward(self, x: Tensor) -> Tensor:
        positions = math.prod(x.shape[2:])  # L (1 for a (B, C) input)
        instance_term = positions > self.skip_threshold and positions >= 2
        train = self.training and x.shape[0] * positions > 1 and instance_term
        if train and fast_paths() and needs_grad(x, self.weight, self.bias):
            return _IABNTrain.apply(x, self.weight, self.bias, self)
        return self._forward(x, positions, instance_term)

    def _forward(self, x: Tensor, positions: int, instance_term: bool) -> Tensor:
        """The layer as a composition of operators (autograd differentiates it where it is used with grad)."""
        if self.training and x.shape[0] * positions > 1:
            batch_var, batch_mean = self._batch_statistics(x)
        else:
            batch_var, batch_mean = self.running_var, self.running_mean
        if not instance_term:
            return normalise(x, batch_mean, batch_var, self.eps, self.weight, self.bias)
        # per-sample statistics, (B, C) each, pulled towards the batch ones by the soft-shrinkage
        inst_mean, inst_var = instance_mean_var(x, self.paths, unbiased=True)
        (t_mean, nt_mean), (t_var, nt_var) = self._thresholds(batch_var, positions)
        # mu_B + softshrink(mu_i - mu_B, t) == mu_i - clamp(mu_i - mu_B, -t, t) (up to rounding); the
        # max(0, .) of the variance is ``normalise``'s clamp (the same value bit for bit)
        mean = inst_mean - torch.clamp(inst_mean - batch_mean, nt_mean, t_mean)
        var = inst_var - torch.clamp(inst_var - batch_var, nt_var, t_var)
        return normalise(x, mean, var, self.eps, self.weight, self.bias)

    def _batch_statistics(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """(unbiased variance, mean) per channel of a train-mode batch; moves the running statistics."""
        batch_var, batch_mean = torch.var_mean(x, dim=[0, *range(2, x.ndim)], unbiased=True)
        with torch.no_grad():  # (1 - m) r + m b, outside any graph
            self.running_mean.lerp_(batch_mean, self.momentum)
            self.running_var.lerp_(batch_var, self.momentum)
        return batch_var, batch_mean

    def _thresholds(self, batch_var: Tensor, positions: int) -> tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]]:
        """(k s_mu, -k s_mu) and (k s_sigma2, -k s_sigma2), each (C,); cached while the running
        statistics they come from are unchanged (every eval forward between two updates)."""
        key = (positions, batch_var._version)
        if self._cached is not None and self._cached[0] is batch_var and self._cached[1] == key:
            return self._cached[2]
        out = self._threshold_values(batch_var, positions)[:2]
        if batch_var is self.running_var:
            self._cached = (batch_var, key, out)
        return out

    def _threshold_values(self, batch_var: Tensor, positions: int):
        """The thresholds (and the spread v + eps they come from): k s_mu = sqrt(v + eps) k / sqrt(L) and
        k s_sigma2 = (v + eps) k sqrt(2 / (L - 1)), each with its negative."""
        spread = torch.add(batch_var, constant(self.eps, batch_var))
        t_mean = torch.mul(torch.sqrt(spread), constant(self.k / math.sqrt(positions), spread))
        t_var = torch.mul(spread, constant(self.k * math.sqrt(2.0 / (positions - 1)), spread))
        return (t_mean, t_mean.neg()), (t_var, t_var.neg()), spread

    def extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}, k={self.k}, momentum={self.momentum}"


class _IABNTrain(torch.autograd.Function):
    """The train-mode IABN forward (the operators of ``InstanceAwareBN._forward``, hence the same values)
    with a hand-written backward: about fifty small operators and six passes over x instead of autograd's
    ~350 operators per layer through the statistics, thresholds, clamps and the affine form
    (bench/opcount.py).

    Per channel, with N samples of L positions, batch statistics (mu_B, v_B; v_B unbiased over N L),
    instance statistics (mu_i, v_i; unbiased over L), thresholds t_mu = k sqrt((v_B + eps) / L) and
    t_v = k sqrt(2 / (L - 1)) (v_B + eps), d_mu = mu_i - mu_B and d_v = v_i - v_B:
        m_i = mu_i - clamp(d_mu, -t_mu, t_mu),  u_i = relu(v_i - clamp(d_v, -t_v, t_v)),
        y = (x - m_i) r_i w + b,  r_i = (u_i + eps)^-1/2.
    With g the output gradient, G_i = sum_l g, X_i = sum_l g (x - m_i):
        db = sum_i G_i,  dw = sum_i r_i X_i,  dL/dm_i = -w r_i G_i,  dL/du_i = -w r_i^3 X_i / 2 (0 where u_i = 0);
    inside the band (|d| <= t) m_i = mu_B (u_i = v_B), above it m_i = mu_i - t_mu, below mu_i + t_mu:
    the gradient goes to the batch statistic, or to the instance one and the threshold. Thresholds feed
    v_B: dL/dv_B += dL/dt_mu t_mu / (2 (v_B + eps)) + dL/dt_v k sqrt(2 / (L - 1)). Finally
        dx = g w r_i + dL/dmu_B / (N L) + 2 dL/dv_B (x - mu_B) / (N L - 1)
             + dL/dmu_i / L + 2 dL/dv_i (x - mu_i) / (L - 1).
    """

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor | None, bias: Tensor | None, layer: InstanceAwareBN) -> Tensor:
        positions = math.prod(x.shape[2:])
        batch_var, batch_mean = layer._batch_statistics(x)
        inst_mean, inst_var = instance_mean_var(x, layer.paths, unbiased=True)
        (t_mean, nt_mean), (t_var, nt_var), spread = layer._threshold_values(batch_var, positions)
        d_mean, d_var = inst_mean - batch_mean, inst_var - batch_var
        c_mean, c_var = torch.clamp(d_mean, nt_mean, t_mean), torch.clamp(d_var, nt_var, t_var)
        mean = inst_mean - c_mean  # as ``InstanceAwareBN._forward``
        var = torch.clamp_min(inst_var - c_var, 0.0)
        shrunk_mean, shrunk_var = d_mean - c_mean, d_var - c_var  # 0 inside the band: the backward's routing
        ctx.save_for_backward(x, weight, batch_mean, spread, inst_mean, mean, var, shrunk_mean, shrunk_var, t_mean)
        ctx.eps, ctx.k = layer.eps, layer.k
        return normalise(x, mean, var, layer.eps, weight, bias)

    @staticmethod
    def backward(ctx, g: Tensor):
        x, weight, batch_mean, spread, inst_mean, mean, var, shrunk_mean, shrunk_var, t_mean = ctx.saved_tensors
        n, positions = x.shape[0], math.prod(x.shape[2:])
        dims = tuple(range(2, x.ndim))
        r = torch.rsqrt(torch.add(var, constant(ctx.eps, var)))  # (B, C)
        k = r if weight is None else r * weight
        g_sum = g.sum(dims)  # G_i
        gxc_sum = (g * (x - as_map(mean, x))).sum(dims)  # X_i
        d_m = torch.mul(k, g_sum).neg_()  # dL/dm_i, (B, C)
        # dL/du_i; the relu passes where u_i > 0 (sign(u_i) is 1 there, 0 at u_i = 0)
        d_u = torch.addcmul(constant(0.0, r), k * r, r * gxc_sum, value=-0.5).mul_(torch.sign(var))
        # the band of each soft-shrinkage: inside it (shrunk == 0) the batch statistic passes; above it
        # (sign +1) the instance statistic and -threshold, below it (sign -1) the instance one and +threshold
        sign_m, sign_v = torch.sign(shrunk_mean), torch.sign(shrunk_var)
        d_inst_mean, d_inst_var = d_m * (sign_m * sign_m), d_u * (sign_v * sign_v)
        d_batch_mean = (d_m - d_inst_mean).sum(0)
        # dt_mu/dv_B = t_mu / (2 (v_B + eps)), dt_v/dv_B = k sqrt(2 / (L - 1)); (d * sign).sum(0) = -dL/dt
        d_batch_var = torch.addcmul((d_u - d_inst_var).sum(0), (d_m * sign_m).sum(0), torch.div(t_mean, spread),
                                    value=-0.5)
        d_batch_var = d_batch_var.add_((d_u * sign_v).sum(0), alpha=-ctx.k * math.sqrt(2.0 / (positions - 1)))
        dx = None
        if ctx.needs_input_grad[0]:
            total = n * positions
            c_batch = torch.mul(d_batch_var, constant(2.0 / (total - 1), r))  # (C,)
            c_inst = torch.mul(d_inst_var, constant(2.0 / (positions - 1), r))  # (B, C)
            slope = c_inst + c_batch  # coefficient of x, (B, C)
            offset = torch.addcmul(torch.mul(d_batch_mean, constant(1.0 / total, r)), c_batch, batch_mean, value=-1.0)
            offset = torch.addcmul(offset, d_inst_mean, constant(1.0 / positions, r))
            offset = torch.addcmul(offset, c_inst, inst_mean, value=-1.0)
            dx = torch.addcmul(torch.addcmul(as_map(offset, x), x, as_map(slope, x)), g, as_map(k, x))
        dw = (gxc_sum * r).sum(0) if weight is not None and ctx.needs_input_grad[1] else None
        db = g_sum.sum(0) if ctx.needs_input_grad[2] else None
        return dx, dw, db, None

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

from unitta.methods.norm.stats import constant, instance_mean_var, normalise

__all__ = ["InstanceAwareBN"]


def _softshrink(x: Tensor, threshold: Tensor, negative_threshold: Tensor) -> Tensor:
    """sign(x) * relu(|x| - threshold), as x - clamp(x, -threshold, threshold) (equal bit for bit, fewer
    operators)."""
    return x - torch.clamp(x, negative_threshold, threshold)


class InstanceAwareBN(nn.Module):
    """NOTE's IABN built from a source BatchNorm (affine shared, running statistics copied)."""

    def __init__(
        self,
        bn: nn.modules.batchnorm._BatchNorm,
        k: float = 4.0,
        momentum: float = 0.01,
        skip_threshold: int = 1,
    ):
        super().__init__()
        if bn.running_mean is None or bn.running_var is None:
            raise ValueError("InstanceAwareBN needs a BatchNorm with running statistics (track_running_stats=True)")
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
        self.register_buffer("running_mean", bn.running_mean.detach().clone())
        self.register_buffer("running_var", bn.running_var.detach().clone())
        self._cached: tuple | None = None  # the thresholds of ``_thresholds``

    @classmethod
    def from_bn(cls, bn: nn.modules.batchnorm._BatchNorm, **kwargs) -> InstanceAwareBN:
        return cls(bn, **kwargs)

    def forward(self, x: Tensor) -> Tensor:
        positions = math.prod(x.shape[2:])  # L (1 for a (B, C) input)
        if self.training and x.shape[0] * positions > 1:
            batch_var, batch_mean = torch.var_mean(x, dim=[0, *range(2, x.ndim)], unbiased=True)
            with torch.no_grad():
                self.running_mean.lerp_(batch_mean.detach(), self.momentum)  # (1 - m) r + m b
                self.running_var.lerp_(batch_var.detach(), self.momentum)
        else:
            batch_var, batch_mean = self.running_var, self.running_mean
        if positions <= self.skip_threshold or positions < 2:
            return normalise(x, batch_mean, batch_var, self.eps, self.weight, self.bias)
        # per-sample statistics, (B, C) each, pulled towards the batch ones by the soft-shrinkage
        inst_mean, inst_var = instance_mean_var(x, unbiased=True)
        t_mean, t_var = self._thresholds(batch_var, positions)
        mean = batch_mean + _softshrink(inst_mean - batch_mean, *t_mean)
        var = torch.relu(batch_var + _softshrink(inst_var - batch_var, *t_var))
        return normalise(x, mean, var, self.eps, self.weight, self.bias)

    def _thresholds(self, batch_var: Tensor, positions: int) -> tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]]:
        """(k s_mu, -k s_mu) and (k s_sigma2, -k s_sigma2), each (C,); cached while the running
        statistics they come from are unchanged (every eval forward between two updates)."""
        key = (positions, batch_var._version)
        if self._cached is not None and self._cached[0] is batch_var and self._cached[1] == key:
            return self._cached[2]
        spread = torch.add(batch_var, constant(self.eps, batch_var))
        s_mu = torch.sqrt(torch.div(spread, constant(float(positions), spread)))
        s_var = torch.mul(spread, constant(math.sqrt(2.0 / (positions - 1)), spread))
        t_mean, t_var = torch.mul(s_mu, constant(self.k, spread)), torch.mul(s_var, constant(self.k, spread))
        out = ((t_mean, t_mean.neg()), (t_var, t_var.neg()))
        if not batch_var.requires_grad:
            self._cached = (batch_var, key, out)
        return out

    def extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}, k={self.k}, momentum={self.momentum}"

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

from unitta.methods.norm.stats import as_map

__all__ = ["InstanceAwareBN"]


def _softshrink(x: Tensor, threshold: Tensor) -> Tensor:
    return torch.sign(x) * torch.relu(x.abs() - threshold)


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

    @classmethod
    def from_bn(cls, bn: nn.modules.batchnorm._BatchNorm, **kwargs) -> "InstanceAwareBN":
        return cls(bn, **kwargs)

    def forward(self, x: Tensor) -> Tensor:
        positions = math.prod(x.shape[2:])  # L (1 for a (B, C) input)
        if self.training and x.shape[0] * positions > 1:
            batch_var, batch_mean = torch.var_mean(x, dim=[0, *range(2, x.ndim)], unbiased=True)
            with torch.no_grad():
                self.running_mean.mul_(1.0 - self.momentum).add_(batch_mean.detach(), alpha=self.momentum)
                self.running_var.mul_(1.0 - self.momentum).add_(batch_var.detach(), alpha=self.momentum)
        else:
            batch_var, batch_mean = self.running_var, self.running_mean
        mu_b, var_b = as_map(batch_mean, x), as_map(batch_var, x)
        if positions <= self.skip_threshold or positions < 2:
            mean, var = mu_b, var_b
        else:
            inst_var, inst_mean = torch.var_mean(x, dim=tuple(range(2, x.ndim)), keepdim=True, unbiased=True)
            s_mu = torch.sqrt((var_b + self.eps) / positions)
            s_var = (var_b + self.eps) * math.sqrt(2.0 / (positions - 1))
            mean = mu_b + _softshrink(inst_mean - mu_b, self.k * s_mu)
            var = torch.relu(var_b + _softshrink(inst_var - var_b, self.k * s_var))
        out = (x - mean) * torch.rsqrt(var + self.eps)
        if self.weight is not None:
            out = out * as_map(self.weight, x)
        if self.bias is not None:
            out = out + as_map(self.bias, x)
        return out

    def extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}, k={self.k}, momentum={self.momentum}"

"""Robust BN (RBN): RoTTA's normalisation layer (Yuan et al., CVPR'23, sec. 3.1; docs/methods.md "RoTTA").

RBN keeps global statistics (mu_g, sigma2_g), initialised from the source BN's running statistics.

- Train mode: with the current batch's mean and *biased* variance (mu_b, sigma2_b over N and the
  spatial positions), mu_g <- (1 - alpha) mu_g + alpha mu_b and sigma2_g likewise; the output is
  normalised with the *updated* statistics (the gradient flows through mu_b, sigma2_b).
- Eval mode: normalise with the stored (mu_g, sigma2_g); nothing changes.

Then the BN's own affine (gamma, beta) applies. alpha = 0.05 in every RoTTA config
(``ADAPTER.RoTTA.ALPHA``). Works for BatchNorm1d (B, C) and BatchNorm2d (B, C, H, W) inputs and any
B >= 1: the statistics of a single (B, C) sample are its values with variance 0, so the output
stays finite.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from unitta.methods.norm.stats import normalise

__all__ = ["RobustBN"]


class RobustBN(nn.Module):
    """RoTTA's Robust BN built from a source BatchNorm (its affine parameters are shared, not copied)."""

    def __init__(self, bn: nn.modules.batchnorm._BatchNorm, momentum: float = 0.05):
        super().__init__()
        if not 0.0 <= momentum <= 1.0:
            raise ValueError(f"momentum={momentum!r} must lie in [0, 1]")
        if bn.running_mean is None or bn.running_var is None:
            raise ValueError("RobustBN needs a BatchNorm with running statistics (track_running_stats=True)")
        self.num_features = bn.num_features
        self.eps = bn.eps
        self.momentum = momentum
        self.weight = bn.weight
        self.bias = bn.bias
        self.register_buffer("running_mean", bn.running_mean.detach().clone())
        self.register_buffer("running_var", bn.running_var.detach().clone())

    @classmethod
    def from_bn(cls, bn: nn.modules.batchnorm._BatchNorm, momentum: float = 0.05) -> RobustBN:
        return cls(bn, momentum)

    def forward(self, x: Tensor) -> Tensor:
        if self.training:
            dims = [0, *range(2, x.ndim)]
            batch_var, batch_mean = torch.var_mean(x, dim=dims, unbiased=False)
            # (1 - alpha) mu_g + alpha mu_b in one operator (torch.lerp), likewise the variance
            mean = torch.lerp(self.running_mean, batch_mean, self.momentum)
            var = torch.lerp(self.running_var, batch_var, self.momentum)
            with torch.no_grad():
                self.running_mean.copy_(mean)
                self.running_var.copy_(var)
        else:
            mean, var = self.running_mean, self.running_var
        return normalise(x, mean, var, self.eps, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"{self.num_features}, eps={self.eps}, momentum={self.momentum}"

"""TRIBE's Balanced BatchNorm (Su et al., AAAI'24, "V5"): class-balanced test statistics (spec 2.3).

The layer keeps per-class statistics (mu_k, sigma2_k), k = 1..K, all initialised to the source BN's
running statistics, and derives global statistics from them as if every class were equally frequent:
global_mean = mean_k mu_k, global_var = mean_k sigma2_k + var_k(mu_k) (unbiased across classes).

Update (train mode, pseudo-labels given in ``label``), spec 2.3, per class k present with n_k samples:
  m_k = 1/n_k if n_k > 1/eta else eta                                    (TRIBE's clamp)
  delta_k = m_k sum_{i: y_i=k} (mean_hw(x_i) - mu_k),  q_k = sum_{i: y_i=k} mean_hw((x_i - mu_k)^2)
  mu_k += (1-gamma) delta_k;  then for all j: mu_j += gamma * mean_k delta_k
  s2_k += (1-gamma) (m_k (q_k - n_k s2_k) - delta_k^2);
  then for all j: s2_j += gamma (mean_k (m_k q_k - delta_k^2) - mean_k (m_k n_k) s2_j)
(means over the present classes; the all-class terms use the values after the present-class step).

Usage: set ``layer.label`` (B,) before a train-mode forward to update then normalise with the
updated global statistics; the label is consumed (reset to None) by that forward, as in TRIBE.
Without a label, or in eval mode, the layer normalises with the current global statistics and
changes nothing. Within an updating forward the new statistics keep their autograd history (as in
TRIBE, where the batch enters the statistics it is normalised with); the stored buffers are detached.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from unitta.methods.norm.stats import across_class_var, instance_second_moment, normalise


class BalancedBatchNorm2d(nn.Module):
    """Class-balanced BatchNorm of TRIBE (spec 2.3), built from a source ``nn.BatchNorm2d``."""

    def __init__(self, bn: nn.modules.batchnorm._BatchNorm, num_classes: int, eta: float, gamma: float):
        super().__init__()
        if num_classes < 1:
            raise ValueError(f"num_classes={num_classes} must be >= 1")
        if not 0.0 < eta <= 1.0:
            raise ValueError(f"eta={eta} must be in (0, 1]")
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma={gamma} must be in [0, 1]")
        if bn.running_mean is None or bn.running_var is None:
            raise ValueError("BalancedBatchNorm2d needs a BatchNorm with running statistics")
        self.num_features = bn.num_features
        self.num_classes = num_classes
        self.eta = eta
        self.gamma = gamma
        self.eps = bn.eps
        self.weight = bn.weight  # the BN's affine parameters (None if affine=False)
        self.bias = bn.bias
        mean = bn.running_mean.detach().clone()
        var = bn.running_var.detach().clone()
        self.register_buffer("global_mean", mean.clone())
        self.register_buffer("global_var", var.clone())
        self.register_buffer("local_mean", mean.unsqueeze(0).repeat(num_classes, 1))
        self.register_buffer("local_var", var.unsqueeze(0).repeat(num_classes, 1))
        self.label: Tensor | None = None

    def extra_repr(self) -> str:
        return f"{self.num_features}, num_classes={self.num_classes}, eta={self.eta}, gamma={self.gamma}"

    def forward(self, x: Tensor) -> Tensor:
        label, self.label = self.label, None
        if self.training and label is not None:
            mean, var = self._update(x, label)
        else:
            mean, var = self.global_mean, self.global_var
        return normalise(x, mean, var, self.eps, self.weight, self.bias)

    def _update(self, x: Tensor, label: Tensor) -> tuple[Tensor, Tensor]:
        """Class-balanced EMA step of spec 2.3; returns the new global (mean, var)."""
        if label.shape != (x.shape[0],):
            raise ValueError(f"label has shape {tuple(label.shape)}, expected ({x.shape[0]},)")
        K = self.num_classes
        label = label.to(device=x.device, dtype=torch.long)
        old_mean, old_var = self.local_mean.detach(), self.local_var.detach()
        d_mean, d_sq = instance_second_moment(x, old_mean[label])  # (B, C) each
        counts = torch.bincount(label, minlength=K)  # (K,)
        present = counts > 0
        n = counts.to(x.dtype)
        # TRIBE's clamp: a class with more than 1/eta samples moves to its batch mean (weight 1/n)
        m = torch.where(n > 1.0 / self.eta, 1.0 / n.clamp_min(1.0), torch.full_like(n, self.eta))
        m = torch.where(present, m, torch.zeros_like(m))
        delta = d_mean.new_zeros(K, d_mean.shape[1]).index_add(0, label, d_mean) * m[:, None]  # (K, C)
        q = d_sq.new_zeros(K, d_sq.shape[1]).index_add(0, label, d_sq)  # (K, C)
        g = self.gamma
        pm = present[:, None]
        new_mean = torch.where(pm, old_mean + (1.0 - g) * delta, old_mean)
        new_var = torch.where(pm, old_var + (1.0 - g) * (m[:, None] * (q - n[:, None] * old_var) - delta.pow(2)), old_var)
        if g > 0.0:
            n_present = present.sum()
            new_mean = new_mean + g * delta[present].sum(0) / n_present
            var_gap = (m[:, None] * q - delta.pow(2))[present].sum(0) / n_present
            new_var = new_var + g * (var_gap - (m * n)[present].sum() / n_present * new_var)
        global_mean = new_mean.mean(0)
        global_var = new_var.mean(0) + across_class_var(new_mean, 0)
        self.local_mean = new_mean.detach()
        self.local_var = new_var.detach()
        self.global_mean = global_mean.detach()
        self.global_var = global_var.detach()
        return global_mean, global_var

"""BatchNorm with test-batch statistics (the ``BN`` baseline's layer, configs/adapter/*/bn.yaml; also TENT's).

A source BatchNorm with its running statistics removed: every forward normalises with the mean and
biased variance of the current batch over (N, H, W), exactly ``F.batch_norm(training=True)``
without running statistics.

Batch of size 1: the statistics are then those of the single sample over its H x W positions (what
PyTorch's train-mode BatchNorm computes for N = 1, an instance normalisation). When there is only one
value per channel (N * H * W == 1, e.g. a BatchNorm1d on one sample), batch statistics do not exist
and the layer falls back to the source running statistics. Either way the output is finite.
Inside ``row_mask.masked_rows`` the statistics are those of the rows the mask keeps, with the same fallback when
one kept row has one value per channel.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from unitta.methods.norm.fast_paths import fast_paths
from unitta.methods.norm.masked_bn import MaskedBatchNormTrain
from unitta.methods.norm.row_mask import RowMaskedNorm, RowWeights, masked_mean_var
from unitta.methods.norm.stats import float32_forward, needs_grad, normalise, source_statistics


class BatchStatsNorm(RowMaskedNorm):
    """Normalise with the current batch's statistics; source statistics only when N*H*W == 1."""

    def __init__(self, bn: nn.modules.batchnorm._BatchNorm):
        super().__init__()
        self.num_features = bn.num_features
        self.eps = bn.eps
        self.weight = bn.weight  # the BN's own affine parameters (shared, so optimisers find them)
        self.bias = bn.bias
        source_mean, source_var = source_statistics(bn, "BatchStatsNorm")
        self.register_buffer("source_mean", source_mean)
        self.register_buffer("source_var", source_var)

    def forward(self, x: Tensor) -> Tensor:
        values_per_channel = x.numel() // max(x.shape[1], 1)
        if self.row_mask is not None and values_per_channel > 1:
            return self._masked(x)
        if values_per_channel > 1:
            return F.batch_norm(x, None, None, self.weight, self.bias, training=True, eps=self.eps)
        return F.batch_norm(x, self.source_mean, self.source_var, self.weight, self.bias, training=False, eps=self.eps)

    @float32_forward
    def _masked(self, x: Tensor) -> Tensor:
        """The statistics of the rows ``row_mask`` keeps (in float32 under autocast, as BatchNorm)."""
        one_position = x.ndim == 2 or math.prod(x.shape[2:]) == 1
        if not one_position and fast_paths() and needs_grad(x, self.weight, self.bias):
            # the kept rows' statistics with a hand-written backward (norm/masked_bn.py)
            weights = self.row_weights_of or RowWeights(self.row_mask)
            return MaskedBatchNormTrain.apply(x, self.weight, self.bias, weights, self.eps)
        mean, var = masked_mean_var(x, self.row_mask, self.row_weights_of)
        if one_position:
            # one kept row of a (B, C) input has one value per channel: a forward of that row alone takes the
            # source statistics (see the module docstring), chosen on the device (no host read of the count)
            single = self.row_mask.sum() == 1
            mean = torch.where(single, self.source_mean, mean)
            var = torch.where(single, self.source_var, var)
        return normalise(x, mean, var, self.eps, self.weight, self.bias)

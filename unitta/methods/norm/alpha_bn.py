"""BatchNorm with the source statistics as a prior: (1 - alpha) source + alpha test-batch (Schneider et al. 2020).

"Improving robustness against common corruptions by covariate shift adaptation" (NeurIPS'20) mixes the
source statistics with the current batch's; the reference TTA benchmark's ``AlphaBatchNorm``
(``methods/bn.py``, used by its ``norm_alpha`` baseline and by MEMO, ``BN.ALPHA`` = 0.1) computes

    mean = (1 - alpha) mu_src + alpha mu_batch
    var  = (1 - alpha) var_src + alpha var_batch      (var_batch the *unbiased* batch variance over N x H x W)

and normalises with them as constants: the batch statistics come from a momentum-1 running-statistics update
of an inner BatchNorm, so no gradient flows through them. The same here: the batch mean and unbiased variance
are computed under ``no_grad`` and the affine parameters are the source BatchNorm's own (shared, trainable).
With one value per channel (N x H x W == 1) the unbiased variance does not exist (PyTorch's BatchNorm raises);
the layer then uses the source statistics alone.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from unitta.nn.batchnorm import replace_batchnorms

__all__ = ["AlphaBatchNorm", "convert_to_alpha_bn"]


class AlphaBatchNorm(nn.Module):
    """Normalise with ``(1 - alpha)`` source + ``alpha`` current-batch statistics (module docstring)."""

    def __init__(self, bn: nn.modules.batchnorm._BatchNorm, alpha: float):
        super().__init__()
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha={alpha!r} must lie in [0, 1]")
        if bn.running_mean is None or bn.running_var is None:
            raise ValueError("AlphaBatchNorm needs a BatchNorm with running statistics (track_running_stats=True)")
        self.alpha = alpha
        self.num_features = bn.num_features
        self.eps = bn.eps
        self.weight = bn.weight
        self.bias = bn.bias
        self.register_buffer("source_mean", bn.running_mean.detach().clone())
        self.register_buffer("source_var", bn.running_var.detach().clone())

    def forward(self, x: Tensor) -> Tensor:
        dims = [0, *range(2, x.ndim)]
        values = x.numel() // max(x.shape[1], 1)
        if values > 1 and self.alpha > 0:
            with torch.no_grad():
                var, mean = torch.var_mean(x, dim=dims, unbiased=True)
            keep = 1.0 - self.alpha  # the reference's (1 - alpha) * src + alpha * batch, in that order
            mean = keep * self.source_mean + self.alpha * mean
            var = keep * self.source_var + self.alpha * var
        else:
            mean, var = self.source_mean, self.source_var
        return F.batch_norm(x, mean, var, self.weight, self.bias, training=False, eps=self.eps)


def convert_to_alpha_bn(model: nn.Module, alpha: float) -> dict[str, AlphaBatchNorm]:
    """Replace every BatchNorm of ``model`` in place by an ``AlphaBatchNorm`` (its own affine, shared)."""
    return replace_batchnorms(model, lambda name, bn: AlphaBatchNorm(bn, alpha))

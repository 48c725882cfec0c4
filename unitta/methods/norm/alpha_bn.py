"""BatchNorm with the source statistics as a prior on the test batch's (Schneider et al., NeurIPS'20, sec. 2).

The layer normalises with

    mu = (1 - alpha) mu_s + alpha mu_b,    sigma^2 = (1 - alpha) sigma^2_s + alpha sigma^2_b

where mu_s, sigma^2_s are the source running statistics and mu_b, sigma^2_b the current batch's per-channel mean
and *unbiased* variance over (N, H, W); affine weight and bias unchanged. In Schneider et al.'s notation with a
prior of N source samples and n test samples, alpha = n / (N + n). The unbiased batch variance is what the
mariodoebler TTA benchmark's ``AlphaBatchNorm`` (after bethgelab/robustness) mixes in: it reads the running
variance of a momentum-1 BatchNorm updated in train mode.

When the batch has a single value per channel (N * H * W == 1) the unbiased variance does not exist; the layer
then uses the source statistics alone (the reference fails there). The statistics are float32 buffers computed
without gradient, as the reference's running buffers. Under ``torch.func`` transforms (``vmap``, ``grad``: MEMO
runs its episodes so) the batch statistics are ``torch.var_mean``'s, which those transforms batch (the recording
batch norm writes into buffers in place, which ``vmap`` refuses): the same values up to float rounding.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from unitta.methods.norm.stats import source_statistics
from unitta.methods.parts.device import DevicePaths
from unitta.nn.batchnorm import replace_batchnorms

__all__ = ["AlphaBatchNorm", "convert_to_alpha_bn"]


class AlphaBatchNorm(nn.Module):
    """Normalise with ``(1 - alpha) * source + alpha * batch`` statistics (module docstring)."""

    def __init__(self, bn: nn.BatchNorm2d, alpha: float, paths: DevicePaths | None = None):
        super().__init__()
        self.paths = paths if paths is not None else DevicePaths.from_environment()  # the building method's
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"alpha={alpha!r} must be in [0, 1]")
        source_mean, source_var = source_statistics(bn, "AlphaBatchNorm")
        self.alpha = alpha
        self.num_features = bn.num_features
        self.eps = bn.eps
        self.weight = bn.weight
        self.bias = bn.bias
        self.register_buffer("source_mean", source_mean)
        self.register_buffer("source_var", source_var)

    def forward(self, x: Tensor) -> Tensor:
        mean, var = self.mixed_statistics(x)
        if torch._C._functorch.is_functorch_wrapped_tensor(x):
            # vmap's batch-norm rule wants one dtype for the input and the statistics (bf16 autocast gives two):
            # the same affine map, elementwise, in the statistics' precision
            scale = torch.rsqrt(var + self.eps) if self.weight is None else self.weight * torch.rsqrt(var + self.eps)
            shift = -mean * scale if self.bias is None else self.bias - mean * scale
            return x * scale.view(-1, 1, 1) + shift.view(-1, 1, 1)
        return F.batch_norm(x, mean, var, self.weight, self.bias, training=False, momentum=0.0, eps=self.eps)

    @torch.no_grad()
    def mixed_statistics(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """(mean, variance) per channel that ``forward`` normalises with."""
        if x.numel() // max(x.shape[1], 1) <= 1:
            return self.source_mean, self.source_var
        # recorded as the reference does: a train-mode batch norm with momentum 1 into fresh buffers (one fused
        # pass over the batch; 3x faster on CPU than torch.var_mean over (N, H, W)). On the CPU the statistics
        # alone (``batch_norm_update_stats``: the same kernel, bit for bit, without the normalised output that
        # would be discarded; a MEMO step 4 % faster)
        if torch._C._functorch.is_functorch_wrapped_tensor(x):  # under torch.func (MEMO's batched episodes)
            batch_var, batch_mean = torch.var_mean(x, dim=(0, 2, 3), correction=1)  # a reduction vmap batches
            return self._mix(batch_mean.to(self.source_mean.dtype), batch_var.to(self.source_var.dtype))
        batch_mean = torch.zeros_like(self.source_mean)
        batch_var = torch.ones_like(self.source_var)
        if not self.paths.cuda(x) and x.dtype == batch_mean.dtype:
            torch.batch_norm_update_stats(x, batch_mean, batch_var, 1.0)
        else:
            F.batch_norm(x, batch_mean, batch_var, None, None, training=True, momentum=1.0, eps=self.eps)
        return self._mix(batch_mean, batch_var)

    def _mix(self, batch_mean: Tensor, batch_var: Tensor) -> tuple[Tensor, Tensor]:
        a = self.alpha
        return (1.0 - a) * self.source_mean + a * batch_mean, (1.0 - a) * self.source_var + a * batch_var


def convert_to_alpha_bn(model: nn.Module, alpha: float, paths: DevicePaths | None = None) -> dict[str, AlphaBatchNorm]:
    """Replace every BatchNorm of ``model`` in place by an ``AlphaBatchNorm`` (its own affine, shared)."""
    return replace_batchnorms(model, lambda name, bn: AlphaBatchNorm(bn, alpha, paths))

"""Batch statistics over some rows of a batch only, so that a method can keep its input shapes static.

A method that adapts on a data-dependent subset of a batch (ROID's and CMF's kept samples, DeYO's low-entropy
samples, RoTTA's memory, padded to its capacity) would otherwise feed its network a new batch size almost every
batch: a new shape for every convolution (a cuDNN algorithm search each) and a host read for the subset's size.
Instead it feeds every row and masks: inside ``masked_rows(model, mask)`` every layer below that computes batch
statistics (a ``RowMaskedNorm``: ``BatchStatsNorm``, ``RobustBN``, ``UnMixTNS2d``) computes them over the rows
where ``mask`` (B,) is true, as if the others were not in the batch; the method gives the masked rows zero loss
weight. The outputs of the kept rows are those of a forward on the kept rows alone (up to float rounding: sums
over more terms); the masked rows' outputs are normalised with the kept rows' statistics and are to be ignored.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator

from torch import Tensor, nn

__all__ = ["RowMaskedNorm", "masked_rows", "masked_mean_var", "row_weights"]


class RowMaskedNorm(nn.Module):
    """A layer whose batch statistics can be taken over some rows of the batch only: the base of every such layer.

    ``row_mask`` (B,) bool, or None for every row, is the one input besides the batch; ``masked_rows`` sets it for
    the body of a ``with`` block and clears it after, and the layer reads it in its ``forward``."""

    row_mask: Tensor | None = None


@contextlib.contextmanager
def masked_rows(model: nn.Module, mask: Tensor | None) -> Iterator[None]:
    """Batch statistics of the ``RowMaskedNorm`` layers of ``model`` over the rows where ``mask`` (B,) is true
    (None: all rows)."""
    layers = [m for m in model.modules() if isinstance(m, RowMaskedNorm)]
    for layer in layers:
        layer.row_mask = mask
    try:
        yield
    finally:
        for layer in layers:
            layer.row_mask = None


def row_weights(mask: Tensor, x: Tensor) -> Tensor:
    """``mask`` (B,) as 0/1 weights of ``x``'s dtype, shaped (B, 1, ...) to broadcast against ``x``."""
    if mask.shape != x.shape[:1]:
        raise ValueError(f"row mask of shape {tuple(mask.shape)} for a batch of {x.shape[0]} rows")
    return mask.to(x.dtype).view(-1, *([1] * (x.ndim - 1)))


def masked_mean_var(x: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Per-channel mean and *biased* variance of ``x`` (B, C, ...) over the rows where ``mask`` and every position,
    each (C,): the statistics of ``torch.var_mean(x[mask], dim=[0, 2, ...], unbiased=False)`` without the
    data-dependent shape (two passes, as ``var_mean``). No kept row gives mean 0 and variance 0."""
    w = row_weights(mask, x)
    dims = [0, *range(2, x.ndim)]
    count = (w.sum() * math.prod(x.shape[2:])).clamp_min(1.0)
    mean = (x * w).sum(dims) / count
    centred = x - mean.view(1, -1, *([1] * (x.ndim - 2)))
    var = (centred * centred * w).sum(dims) / count
    return mean, var

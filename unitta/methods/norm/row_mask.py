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

import torch
from torch import Tensor, nn

from unitta.methods.norm.stats import constant

__all__ = ["RowMaskedNorm", "RowWeights", "masked_moments", "masked_rows", "masked_mean_var", "row_weights"]


class RowWeights:
    """The weights of one row mask, made once per ``masked_rows`` block and shared by all its layers
    (docs/benchmarks.md "Device paths": masked statistics in few kernels): per (dtype, rank, positions L) the
    (B, 1, ...) weights of a per-channel mean over the kept rows, 1 / (kept rows x L) on a kept row and 0 on the
    others (1 / L when no row is kept)."""

    def __init__(self, mask: Tensor):
        self.mask = mask
        self._rows: dict[tuple, tuple[Tensor, Tensor]] = {}
        self._made: dict[tuple, Tensor] = {}

    def of(self, x: Tensor) -> Tensor:
        """The mean weights (B, 1, ...) for a batch shaped as ``x``."""
        positions = math.prod(x.shape[2:])
        key = (x.dtype, x.ndim, positions, x.device)
        if key not in self._made:
            if self.mask.shape != x.shape[:1]:
                raise ValueError(f"row mask of shape {tuple(self.mask.shape)} for a batch of {x.shape[0]} rows")
            if (x.dtype, x.device) not in self._rows:  # the 0/1 rows and 1 / kept rows, once per dtype
                rows = self.mask.to(x.dtype)
                self._rows[(x.dtype, x.device)] = (rows, rows.sum().clamp_min(1.0).reciprocal())
            rows, per_row = self._rows[(x.dtype, x.device)]
            inverse = per_row if positions == 1 else torch.mul(per_row, constant(1.0 / positions, per_row))
            self._made[key] = rows.view(-1, *([1] * (x.ndim - 1))) * inverse
        return self._made[key]


class RowMaskedNorm(nn.Module):
    """A layer whose batch statistics can be taken over some rows of the batch only: the base of every such layer.

    ``row_mask`` (B,) bool, or None for every row, is the one input besides the batch; ``masked_rows`` sets it for
    the body of a ``with`` block and clears it after, and the layer reads it in its ``forward``; ``row_weights_of``
    is the block's ``RowWeights``, shared by its layers (None outside a block)."""

    row_mask: Tensor | None = None
    row_weights_of: RowWeights | None = None


@contextlib.contextmanager
def masked_rows(model: nn.Module, mask: Tensor | None) -> Iterator[None]:
    """Batch statistics of the ``RowMaskedNorm`` layers of ``model`` over the rows where ``mask`` (B,) is true
    (None: all rows)."""
    layers = [m for m in model.modules() if isinstance(m, RowMaskedNorm)]
    weights = None if mask is None else RowWeights(mask)
    for layer in layers:
        layer.row_mask = mask
        layer.row_weights_of = weights
    try:
        yield
    finally:
        for layer in layers:
            layer.row_mask = None
            layer.row_weights_of = None


def row_weights(mask: Tensor, x: Tensor) -> Tensor:
    """``mask`` (B,) as 0/1 weights of ``x``'s dtype, shaped (B, 1, ...) to broadcast against ``x``."""
    if mask.shape != x.shape[:1]:
        raise ValueError(f"row mask of shape {tuple(mask.shape)} for a batch of {x.shape[0]} rows")
    return mask.to(x.dtype).view(-1, *([1] * (x.ndim - 1)))


def masked_mean_var(x: Tensor, mask: Tensor, weights: RowWeights | None = None) -> tuple[Tensor, Tensor]:
    """Per-channel mean and *biased* variance of ``x`` (B, C, ...) over the rows where ``mask`` and every position,
    each (C,): the statistics of ``torch.var_mean(x[mask], dim=[0, 2, ...], unbiased=False)`` without the
    data-dependent shape. Two passes, as ``var_mean`` (the mean, then the mean square deviation from it), each one
    weighted sum over the rows and positions with the mask's row weights / N (``RowWeights``: made once per mask,
    not per layer). No kept row gives mean 0 and variance 0."""
    mean, var, _ = masked_moments(x, (weights or RowWeights(mask)).of(x))
    return mean.view(-1), var.view(-1)


def masked_moments(x: Tensor, mean_weights: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(mean, biased variance, x - mean) of ``masked_mean_var``, the first two as maps (1, C, 1, ...), with the mean
    weights of ``RowWeights.of(x)``: two weighted sums over the rows and positions (one for the mean, one of the
    squared deviations from it)."""
    dims = [0, *range(2, x.ndim)]
    mean = (x * mean_weights).sum(dims, keepdim=True)
    centred = x - mean
    return mean, (centred * mean_weights * centred).sum(dims, keepdim=True), centred

"""The masked train-mode batch norm (unitta/methods/norm/masked_bn.py) against its definition in float64: the kept
rows' statistics by boolean indexing, autograd through the plain formula (value and gradient), and a forward of the
kept rows alone."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from unitta.methods.norm.masked_bn import MaskedBatchNormTrain
from unitta.methods.norm.row_mask import RowWeights

KEEP = torch.tensor([True, False, True, True, False, True, False])


def _reference(x, weight, bias, keep, eps, momentum, running):
    """The definition: statistics of x[keep] (biased variance), mixed into ``running`` at ``momentum``."""
    dims = [0, *range(2, x.ndim)]
    var, mean = torch.var_mean(x[keep], dim=dims, unbiased=False)
    if running is not None:
        mean, var = torch.lerp(running[0], mean, momentum), torch.lerp(running[1], var, momentum)
    shape = (-1,) + (1,) * (x.ndim - 2)
    y = (x - mean.view(shape)) / torch.sqrt(var.view(shape) + eps)
    y = y if weight is None else y * weight.view(shape)
    return (y if bias is None else y + bias.view(shape)), mean.detach(), var.detach()


@pytest.mark.parametrize("shape", [(7, 3, 4, 5), (7, 3)])
@pytest.mark.parametrize("momentum", [1.0, 0.3])
@pytest.mark.parametrize("affine", [True, False])
def test_masked_batch_norm_is_the_definition_in_float64(shape, momentum, affine) -> None:
    g = torch.Generator().manual_seed(11)
    x = torch.randn(*shape, generator=g, dtype=torch.float64) * 2 + 1
    grad = torch.randn(*shape, generator=g, dtype=torch.float64)  # every row's output carries a gradient
    params = [torch.rand(3, generator=g, dtype=torch.float64) + 0.5 for _ in range(2)] if affine else [None, None]
    start = (torch.randn(3, generator=g, dtype=torch.float64), torch.rand(3, generator=g, dtype=torch.float64) + 1)
    results = []
    for fused in (True, False):
        xi = x.clone().requires_grad_(True)
        w, b = (None, None) if not affine else (params[0].clone().requires_grad_(True), params[1].clone().requires_grad_(True))
        running = None if momentum == 1.0 else tuple(t.clone() for t in start)
        if fused:
            y = MaskedBatchNormTrain.apply(xi, w, b, RowWeights(KEEP), 1e-5, momentum, running)
            stats = running
        else:
            y, *stats = _reference(xi, w, b, KEEP, 1e-5, momentum, running)
        (y * grad).sum().backward()
        results.append([y.detach(), xi.grad, *(() if not affine else (w.grad, b.grad)), *(stats or ())])
    for fused, reference in zip(*results):
        torch.testing.assert_close(fused, reference, rtol=1e-10, atol=1e-12)


def test_the_kept_rows_are_a_forward_of_the_kept_rows_alone() -> None:
    """Kept rows: the values and input gradients of batch norm in train mode on x[keep] (the dropped rows' outputs
    carry no loss, as in ROID's and RoTTA's masked forwards)."""
    g = torch.Generator().manual_seed(12)
    x = torch.randn(7, 3, 4, 4, generator=g, dtype=torch.float64)
    grad = torch.randn(7, 3, 4, 4, generator=g, dtype=torch.float64) * KEEP.view(-1, 1, 1, 1)
    weight, bias = torch.rand(3, generator=g, dtype=torch.float64), torch.rand(3, generator=g, dtype=torch.float64)
    masked = x.clone().requires_grad_(True)
    y = MaskedBatchNormTrain.apply(masked, weight, bias, RowWeights(KEEP), 1e-5)
    (y * grad).sum().backward()
    alone = x[KEEP].clone().requires_grad_(True)
    y_alone = F.batch_norm(alone, None, None, weight, bias, training=True, eps=1e-5)
    (y_alone * grad[KEEP]).sum().backward()
    torch.testing.assert_close(y.detach()[KEEP], y_alone.detach(), rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(masked.grad[KEEP], alone.grad, rtol=1e-10, atol=1e-12)
    assert torch.equal(masked.grad[~KEEP], torch.zeros_like(masked.grad[~KEEP]))

"""COME: the opinion entropy against its formula in float64, its limits, and one step = TENT's on that loss."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from unitta.methods import get_method
from unitta.methods.come import opinion, opinion_entropy
from unitta.methods.norm.affine import adapt_norm_affine

pytestmark = pytest.mark.usefixtures("one_thread")


def _formula(z: torch.Tensor) -> torch.Tensor:
    """The authors' dirichlet_entropy written out (BlueWhaleLab/COME tent_come.py), K = the number of classes."""
    k = z.shape[1]
    e = z.exp()
    s = e.sum(dim=1, keepdim=True) + k
    p = torch.cat([e / s, k / s], dim=1) + 1e-7
    return -(p * p.log()).sum(dim=1)


def test_the_loss_is_the_authors_formula_in_float64():
    z = torch.randn(32, 10, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 4
    torch.testing.assert_close(opinion_entropy(z), _formula(z), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(opinion(z).sum(dim=1), torch.ones(32, dtype=torch.float64))
    # float32 agrees with the float64 value to float rounding
    torch.testing.assert_close(opinion_entropy(z.float()), _formula(z).float(), rtol=1e-5, atol=1e-6)


def test_limits_no_evidence_and_full_evidence():
    k = 10
    # zero logits: evidence 1 per class, S = 2K, beliefs 1/(2K) each, uncertainty 1/2
    none = opinion_entropy(torch.zeros(1, k, dtype=torch.float64))
    expected = -(k * (1 / (2 * k)) * math.log(1 / (2 * k)) + 0.5 * math.log(0.5))
    assert none.item() == pytest.approx(expected, abs=1e-5)  # the +1e-7 shifts it by about 1e-6
    # one class with overwhelming evidence: the opinion is certain, entropy -> 0 (finite in float32, where the
    # authors' exp(z) overflows)
    z = torch.zeros(1, k)
    z[0, 3] = 1000.0
    sure = opinion_entropy(z)
    assert torch.isfinite(sure).all() and sure.item() < 1e-4
    assert torch.isnan(_formula(z)).all()  # what the DEVIATION avoids
    # scaling logits up lowers the entropy less than softmax entropy's: little evidence keeps the uncertainty mass
    small = torch.tensor([[0.5, 0.0, 0.0]])
    assert opinion(small)[0, -1] > 0.4


def test_the_gradient_keeps_the_logits_norm():
    """z / ||z|| * sg(||z||): the gradient is orthogonal to z, so a small step does not grow the norm."""
    z = torch.randn(8, 10, generator=torch.Generator().manual_seed(1), dtype=torch.float64, requires_grad=True)
    opinion_entropy(z).sum().backward()
    radial = (z.grad * z.detach()).sum(dim=1)
    assert radial.abs().max().item() < 1e-12


def test_one_step_is_tent_on_the_opinion_entropy(embedded_model, fmnist_c_images):
    model, info = embedded_model
    x = fmnist_c_images[:32]
    come = get_method("come", model, info)
    out = come(x)
    by_hand = copy.deepcopy(model)
    params = adapt_norm_affine(by_hand)
    opt = torch.optim.Adam(params, lr=1e-3)
    logits = by_hand(x)
    torch.testing.assert_close(out, logits.detach())  # the prediction is the pre-step forward
    opinion_entropy(logits).mean().backward()
    opt.step()
    got = [p for p in come.model.parameters() if p.requires_grad]
    assert len(got) == len(params)
    for a, b in zip(got, params):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)  # fused Adam: float rounding
    tent = get_method("tent", model, info)
    tent(x)
    assert any(not torch.allclose(a, b) for a, b in zip(got, [p for p in tent.model.parameters() if p.requires_grad]))


def test_presets_and_range_checks(embedded_model):
    model, info = embedded_model
    come = get_method("come", model, info, dataset="imagenet-c")
    assert (come.cfg.optimizer, come.cfg.lr) == ("sgd", 2.5e-4)
    with pytest.raises(ValueError, match="lr=0.0 must be > 0"):
        get_method("come", model, info, lr=0.0)


def test_fmnist_cell(fmnist_cell):
    fmnist_cell("come")

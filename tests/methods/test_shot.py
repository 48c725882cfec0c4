"""Online SHOT: its three loss terms against their formulas in float64, one step is SGD on their weighted sum over
every parameter but the classifier (which stays the source's), and out-of-range values are refused."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from tests.methods.fmnist_cnn import grey_shift
from unitta.methods import get_method
from unitta.methods.norm.batch_stats import BatchStatsNorm
from unitta.methods.shot import shot_loss_terms
from unitta.nn.batchnorm import replace_batchnorms


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


@pytest.mark.parametrize("threshold", [0.0, 0.6, 0.9, 1.0])
def test_loss_terms_are_their_formulas(threshold):
    z = 3.0 * torch.randn(32, 10, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    pseudo_label, entropy, diversity = (t.item() for t in shot_loss_terms(z, threshold))
    p = _softmax(z.numpy())
    reliable = p.max(1) > threshold
    ce = -np.log(p[np.arange(32), p.argmax(1)])
    assert pseudo_label == pytest.approx(ce[reliable].mean() if reliable.any() else 0.0, rel=1e-12, abs=1e-15)
    assert entropy == pytest.approx(-(p * np.log(p)).sum(1).mean(), rel=1e-12)
    pbar = p.mean(0)
    assert diversity == pytest.approx((pbar * np.log(pbar + 1e-5)).sum(), rel=1e-12)
    assert 0 < reliable.sum() < 32 or threshold in (0.0, 1.0)  # 0.6 and 0.9 select some, not all


def test_no_reliable_sample_gives_zero_pseudo_label_term_and_gradient():
    z = torch.zeros(4, 10, dtype=torch.float64, requires_grad=True)  # uniform: top probability 0.1
    pseudo_label, _, _ = shot_loss_terms(z, 0.9)
    pseudo_label.backward()
    assert pseudo_label.item() == 0.0 and torch.equal(z.grad, torch.zeros_like(z))


def test_one_step_adapts_the_extractor_and_leaves_the_classifier(fmnist_cnn):
    x = grey_shift(fmnist_cnn.x[:32], seed=7)
    shot = get_method("shot", fmnist_cnn.model, fmnist_cnn.info)
    out = shot(x)
    # the same step by hand: batch-statistics BN, SGD 1e-3 (Nesterov) on every parameter but the classifier
    model = copy.deepcopy(fmnist_cnn.model)
    replace_batchnorms(model, lambda name, bn: BatchStatsNorm(bn))
    classifier = fmnist_cnn.info.classifier
    params = [p for n, p in model.named_parameters() if not n.startswith(classifier + ".")]
    opt = torch.optim.SGD(params, lr=1e-3, momentum=0.9, nesterov=True)
    logits = model(x)
    torch.testing.assert_close(out, logits.detach())  # the pre-step forward
    pl, ent, div = shot_loss_terms(logits, 0.9)
    (0.3 * pl + ent + div).backward()
    opt.step()
    got, want = dict(shot.model.named_parameters()), dict(model.named_parameters())
    assert got.keys() == want.keys()
    for name, p in want.items():
        torch.testing.assert_close(got[name], p, rtol=1e-5, atol=1e-7)
        source = dict(fmnist_cnn.model.named_parameters())[name]
        assert torch.equal(got[name], source) == name.startswith(classifier + "."), name  # all else moved


@pytest.mark.parametrize("bad", [{"threshold": 1.5}, {"pseudo_label_weight": -0.1}, {"lr": 0.0}])
def test_out_of_range_values_are_refused_in_one_line(bad, fmnist_cnn):
    with pytest.raises(ValueError) as err:
        get_method("shot", fmnist_cnn.model, fmnist_cnn.info, **bad)
    assert next(iter(bad)) in str(err.value) and "\n" not in str(err.value)

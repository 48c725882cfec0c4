"""Conjugate PL: the conjugate loss equals its formula in float64 (cross-entropy and PolyLoss), one step is SGD on
it over the norm affine parameters (``layer4`` frozen, as ttab), out-of-range values are refused."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from torch import nn

from tests.methods.fmnist_cnn import grey_shift
from unitta.methods import get_method
from unitta.methods.conjugate_pl import conjugate_loss
from unitta.methods.norm.affine import adapt_norm_affine
from unitta.models.info import ModelInfo


def _logits(seed: int, b: int = 16, k: int = 7) -> torch.Tensor:
    return 3.0 * torch.randn(b, k, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize("temperature", [1.0, 0.5, 2.5])
def test_cross_entropy_conjugate_is_the_entropy_at_temperature(temperature):
    z = _logits(0).requires_grad_(True)
    loss = conjugate_loss(z, temperature)
    h = z.detach().numpy() / temperature
    p = np.exp(h - h.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    expected = -(p * np.log(p)).sum(1)  # f(h) - grad f(h)^T h with f = logsumexp is H(softmax(h))
    np.testing.assert_allclose(loss.detach().numpy(), expected, rtol=1e-12, atol=1e-12)
    # the pseudo-label is not detached: the gradient is the entropy's full gradient
    loss.sum().backward()
    z2 = z.detach().clone().requires_grad_(True)
    log_p = (z2 / temperature).log_softmax(1)
    (-(log_p.exp() * log_p).sum()).backward()
    torch.testing.assert_close(z.grad, z2.grad, rtol=1e-10, atol=1e-12)


def test_polyloss_conjugate_solves_the_linear_system():
    eps = 6.0  # the authors' CIFAR PolyLoss model (tta_conjugate cfgs/cifar.yaml MODEL.EPS)
    z = _logits(1)
    loss = conjugate_loss(z, 1.0, eps).numpy()
    for i, h in enumerate(z.numpy()):
        p = np.exp(h - h.max())
        p /= p.sum()
        y = np.linalg.solve(np.eye(len(p)) + eps * np.diag(p) - eps * np.outer(p, p), p)
        expected = np.log(np.exp(h).sum()) - (y * h - eps * y * (1 - p)).sum()
        assert loss[i] == pytest.approx(expected, rel=1e-10, abs=1e-12)


def test_one_step_is_sgd_on_the_conjugate_loss(fmnist_cnn):
    x = grey_shift(fmnist_cnn.x[:32], seed=5)
    method = get_method("conjugate_pl", fmnist_cnn.model, fmnist_cnn.info, temperature=2.0)
    out = method(x)
    model = copy.deepcopy(fmnist_cnn.model)
    params = adapt_norm_affine(model)
    opt = torch.optim.SGD(params, lr=1e-3, momentum=0.9, nesterov=True)
    logits = model(x)
    torch.testing.assert_close(out, logits.detach())  # the pre-step forward
    conjugate_loss(logits, 2.0).mean().backward()
    opt.step()
    adapted = [p for p in method.model.parameters() if p.requires_grad]
    assert len(adapted) == len(params)
    for got, want in zip(adapted, params):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-7)


class _Stages(nn.Module):
    """conv-BN, then a 'layer4' conv-BN (frozen by ttab's rule), pooled, then fc."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.layer4 = nn.Sequential(nn.Conv2d(4, 4, 3, padding=1), nn.BatchNorm2d(4))
        self.fc = nn.Linear(4, 10)

    def forward(self, x):
        return self.fc(self.layer4(torch.relu(self.bn(self.conv(x)))).mean(dim=(2, 3)))


def test_layer4_stays_frozen():
    torch.manual_seed(0)
    model = _Stages().eval()
    info = ModelInfo(name="s", dataset="fmnist", classifier="fc", bn_layers=("bn", "layer4.1"), bdn_layer=None,
                     num_classes=10)
    method = get_method("conjugate_pl", model, info)
    method(torch.rand(8, 3, 8, 8, generator=torch.Generator().manual_seed(0)))
    trainable = {name for name, p in method.model.named_parameters() if p.requires_grad}
    assert trainable == {"bn.weight", "bn.bias"}
    assert not torch.equal(method.model.bn.weight, model.bn.weight)
    assert torch.equal(method.model.layer4[1].weight, model.layer4[1].weight)


@pytest.mark.parametrize("bad", [{"temperature": 0.0}, {"poly_eps": -1.0}, {"lr": float("nan")}])
def test_out_of_range_values_are_refused_in_one_line(bad, fmnist_cnn):
    with pytest.raises(ValueError) as err:
        get_method("conjugate_pl", fmnist_cnn.model, fmnist_cnn.info, **bad)
    assert next(iter(bad)) in str(err.value) and "\n" not in str(err.value)

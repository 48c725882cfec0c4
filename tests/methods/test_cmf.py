"""CMF: the hidden model's Kalman filter step in closed form, filtering vs none, prior-corrected logits, a cell."""

from __future__ import annotations

import math

import torch

from tests.methods.fmnist_cnn import grey_shift
from unitta.methods import get_method
from unitta.methods.cmf import PARAM_SCALE


def test_filter_step_in_closed_form(fmnist_cnn):
    cmf = get_method("cmf", fmnist_cnn.model, fmnist_cnn.info, q=0.5)
    n = sum(p.numel() for p in cmf.params)
    q = 0.5 * n / PARAM_SCALE
    assert math.isclose(cmf.process_noise, q)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p, h, s in zip(cmf.params, cmf.hidden_params, cmf.source_params):
            p.copy_(torch.randn(p.shape, generator=g))
            h.copy_(torch.randn(p.shape, generator=g))
            s.copy_(torch.randn(p.shape, generator=g))
    theta = [p.clone() for p in cmf.params]
    hidden = [h.clone() for h in cmf.hidden_params]
    source = [s.clone() for s in cmf.source_params]
    var = 0.0
    for _ in range(3):
        cmf.filter_step()
        var = 0.99**2 * var + q
        beta = max((1 - q) / (var + 1 - q), 0.89)
        beta = 1.0 if beta >= 0.9999 else beta
        var = beta * var
        for i in range(len(theta)):
            recovered = 0.99 * hidden[i] + 0.01 * source[i]
            hidden[i] = beta * recovered + (1 - beta) * theta[i]
            theta[i] = 0.99 * theta[i] + 0.01 * hidden[i]
        assert 0.89 <= beta < 1.0
        assert math.isclose(cmf.hidden_var, var, rel_tol=1e-12)
    for got, want in zip(cmf.params, theta):
        torch.testing.assert_close(got, want)
    for got, want in zip(cmf.hidden_params, hidden):
        torch.testing.assert_close(got, want)


def test_default_noise_keeps_beta_one_at_first(embedded_model):
    """With the reference's q on the ResNet-20 (1568 BN affine parameters) Q is tiny, so beta starts at 1 (the hidden
    model only drifts to the source) and the target is pulled towards the hidden model at rate 1 - gamma."""
    model, info = embedded_model
    cmf = get_method("cmf", model, info)
    assert sum(p.numel() for p in cmf.params) == 1568
    assert math.isclose(cmf.process_noise, 0.005 * 1568 / 38400)
    theta = [p.detach().clone() + 1.0 for p in cmf.params]
    with torch.no_grad():
        torch._foreach_copy_(cmf.params, theta)
    cmf.filter_step()
    for got, t, s in zip(cmf.params, theta, cmf.source_params):
        torch.testing.assert_close(got, 0.99 * t + 0.01 * s)  # hidden = source (recovered), beta = 1


def test_hidden_model_filters_the_adaptation(fmnist_cnn):
    """Adapting with the filter (gamma 0.99) keeps the parameters closer to the source than without (gamma 1),
    and the hidden model lies between the source and the target."""
    xs = grey_shift(fmnist_cnn.x[:512], seed=7)
    runs = {}
    for gamma in (0.99, 1.0):
        cmf = get_method("cmf", fmnist_cnn.model, fmnist_cnn.info, gamma=gamma, lr=5e-3)
        for i in range(0, 512, 64):
            cmf(xs[i : i + 64])
        drift = sum(float((p.detach() - s).norm() ** 2) for p, s in zip(cmf.params, cmf.source_params)) ** 0.5
        hidden = sum(float((h - s).norm() ** 2) for h, s in zip(cmf.hidden_params, cmf.source_params)) ** 0.5
        runs[gamma] = (drift, hidden)
    assert runs[0.99][0] < runs[1.0][0]
    assert 0 < runs[0.99][1] < runs[0.99][0]


def test_output_is_the_prior_corrected_logits(fmnist_cnn):
    x = grey_shift(fmnist_cnn.x[:16], seed=8)
    cmf = get_method("cmf", fmnist_cnn.model, fmnist_cnn.info)
    with torch.no_grad():
        logits = cmf.model(x)
    out = cmf(x)
    prior = logits.softmax(1).mean(0)
    smooth = max(1 / 16, 1 / 10) / prior.max()
    torch.testing.assert_close(out, logits * (prior + smooth) / (1 + smooth * 10))
    one = cmf(x[:1])  # below min_update_batch: predicted, no step
    assert one.shape == (1, 10) and torch.isfinite(one).all() and cmf.cost.backwards == 1


def test_fmnist_cell(fmnist_cell):
    fmnist_cell("cmf")

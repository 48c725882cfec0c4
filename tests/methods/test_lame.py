"""LAME: valid distributions that follow the affinity."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.methods.fmnist_cnn import error, shift
from tests.methods.fmnist_cnn import info_for as tiny_info
from unitta.methods import get_method
from unitta.methods.lame import affinity_matrix, laplacian_optimization


@pytest.fixture(scope="module")
def noisy(fmnist_cnn):
    """Model, a mildly shifted test set (Gaussian noise only) and labels."""
    model, x, y = fmnist_cnn.model, fmnist_cnn.x[:2000], fmnist_cnn.y[:2000]
    return model, shift(x, contrast=1.0, brightness=0.0, noise=0.15), y


def correlated_batches(y: torch.Tensor, n_batches: int = 10, size: int = 64, classes: int = 2):
    """Index batches drawn from ``classes`` random classes each (label-correlated, LAME's use case)."""
    g = torch.Generator().manual_seed(0)
    for _ in range(n_batches):
        chosen = torch.randperm(10, generator=g)[:classes]
        pool = torch.nonzero(torch.isin(y, chosen)).flatten()
        yield pool[torch.randperm(len(pool), generator=g)[:size]]


def test_outputs_are_distributions_and_neighbours_agree_more(noisy):
    model, x, y = noisy
    lame = get_method("lame", model, tiny_info(model))
    with torch.no_grad():
        source = model(x).softmax(1)
    agree_src, agree_lame, err_src, err_lame, n = 0.0, 0.0, 0.0, 0.0, 0
    for idx in correlated_batches(y):
        out = lame(x[idx])
        assert (out >= 0).all()
        torch.testing.assert_close(out.sum(1), torch.ones(len(idx)))
        with torch.no_grad():
            kernel = affinity_matrix(F.normalize(lame.model(x[idx]), dim=1), "knn", 5)
        i, j = kernel.nonzero().T  # kNN-connected pairs
        agree_src += float((source[idx].argmax(1)[i] == source[idx].argmax(1)[j]).float().mean())
        agree_lame += float((out.argmax(1)[i] == out.argmax(1)[j]).float().mean())
        err_src += error(source[idx], y[idx])
        err_lame += error(out, y[idx])
        n += 1
    # 640 predictions: the standard error of an error rate is <= 0.02; margins: 5 (error), 10 (agreement) points
    assert agree_lame / n > agree_src / n + 0.1
    assert err_lame / n < err_src / n - 0.05


def test_output_is_the_fixed_point_of_the_laplacian_objective(noisy):
    model, x, _ = noisy
    lame = get_method("lame", model, tiny_info(model), affinity="rbf", max_steps=1000)
    out = lame(x[:64])
    with torch.no_grad():
        features = F.normalize(lame.model(x[:64]), dim=1)
        probs = lame.model.logits(lame.model(x[:64])).softmax(1)
    kernel = affinity_matrix(features, "rbf", 5)
    fixed = (torch.log(probs + 1e-10) + kernel @ out).softmax(1)
    torch.testing.assert_close(out, fixed, atol=1e-4, rtol=0)


def test_no_affinity_returns_the_source_distribution():
    torch.manual_seed(0)
    probs = torch.rand(6, 4).softmax(1)
    out = laplacian_optimization(-torch.log(probs + 1e-10), torch.zeros(6, 6), 100)
    torch.testing.assert_close(out, probs, atol=1e-6, rtol=0)


@pytest.mark.parametrize("affinity", ["knn", "rbf", "linear"])
def test_single_sample_batch_returns_the_source_probabilities(noisy, affinity):
    model, x, _ = noisy
    lame = get_method("lame", model, tiny_info(model), affinity=affinity)
    out = lame(x[:1])
    with torch.no_grad():
        torch.testing.assert_close(out, model(x[:1]).softmax(1))


def test_knn_affinity_excludes_self_and_caps_k_at_batch_size():
    features = F.normalize(torch.randn(7, 5, generator=torch.Generator().manual_seed(0)), dim=1)
    kernel = affinity_matrix(features, "knn", 3)
    assert torch.equal(kernel.diag(), torch.zeros(7))
    assert torch.equal(kernel.sum(1), torch.full((7,), 3.0))
    small = affinity_matrix(features[:3], "knn", 5)  # B - 1 = 2 < k: every other sample
    assert torch.equal(small, torch.ones(3, 3) - torch.eye(3))
    duplicate = affinity_matrix(torch.ones(4, 5), "rbf", 5)  # sigma 0 in the reference: NaN
    assert torch.isfinite(duplicate).all()


def test_bad_config_is_refused(noisy):
    model, _, _ = noisy
    with pytest.raises(ValueError, match="affinity"):
        get_method("lame", model, tiny_info(model), affinity="cosine")
    with pytest.raises(ValueError, match="knn"):
        get_method("lame", model, tiny_info(model), knn=0)

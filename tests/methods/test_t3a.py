"""T3A: every model parameter stays the source's, the supports grow from the classifier's rows and are filtered to
the M lowest-entropy ones per predicted class (checked against a growing list sorted per class, as the paper and
ttab keep them), the scores are the adjusted classifier's, and predict() leaves the supports as they are."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from tests.methods.fmnist_cnn import grey_shift
from unitta.methods import get_method
from unitta.methods.parts.heads import FeatureModel


def _batches(fmnist_cnn, n: int = 4, size: int = 24) -> list[torch.Tensor]:
    x = grey_shift(fmnist_cnn.x[: n * size], seed=2)
    return list(x.split(size))


def test_every_model_parameter_stays_the_source_s(fmnist_cnn):
    t3a = get_method("t3a", fmnist_cnn.model, fmnist_cnn.info)
    for x in _batches(fmnist_cnn):
        t3a(x)
    classifier = fmnist_cnn.info.classifier
    source = dict(fmnist_cnn.model.named_parameters())
    got = dict(t3a.model.named_parameters())
    assert got.keys() == {f"backbone.{n}" for n in source if not n.startswith(classifier + ".")} | {
        f"head.{n.removeprefix(classifier + '.')}" for n in source if n.startswith(classifier + ".")}
    for name, p in got.items():
        want = source[name.removeprefix("backbone.")] if name.startswith("backbone.") else source[
            classifier + "." + name.removeprefix("head.")]
        assert torch.equal(p, want) and not p.requires_grad, name


def _growing_list(model, info, batches, m):
    """The supports as the paper keeps them: a list that grows by each batch, then per class the m of lowest
    entropy (sorted), and the batch's scores from the normalised per-class sums."""
    net = FeatureModel(copy.deepcopy(model), info.classifier).eval()
    w = net.head.weight.detach()
    supports, logits = w.clone(), net.head(w).detach()
    outputs = []
    with torch.no_grad():
        for x in batches:
            z = net(x)
            supports = torch.cat([supports, z])
            logits = torch.cat([logits, net.head(z)])
            label = logits.argmax(1)
            entropy = -(logits.softmax(1) * logits.log_softmax(1)).sum(1)
            keep = torch.cat([torch.nonzero(label == k).flatten()[entropy[label == k].argsort()[:m]]
                              for k in range(w.shape[0])])
            supports, logits = supports[keep], logits[keep]
            label = logits.argmax(1)
            weights = F.normalize(supports, dim=1).T @ F.one_hot(label, w.shape[0]).to(z.dtype)
            outputs.append(z @ F.normalize(weights, dim=0))
    return supports, label, outputs


@pytest.mark.parametrize("m", [1, 3, 100])
def test_supports_grow_and_are_filtered_per_class_by_entropy(fmnist_cnn, m):
    batches = _batches(fmnist_cnn)
    t3a = get_method("t3a", fmnist_cnn.model, fmnist_cnn.info, filter_k=m)
    bank = t3a.model.supports
    counts = torch.isfinite(bank.entropy).sum(1)
    assert counts.sum() == fmnist_cnn.info.num_classes and counts.max() <= m  # the warm-up: one row per class
    outputs = [t3a(x) for x in batches]
    supports, label, expected = _growing_list(fmnist_cnn.model, fmnist_cnn.info, batches, m)
    filled = torch.isfinite(bank.entropy)
    counts = filled.sum(1)
    assert torch.equal(counts, torch.bincount(label, minlength=fmnist_cnn.info.num_classes))
    assert counts.max() <= m and (m > 3 or counts.max() == m)  # few slots fill up, 100 do not from 106 images
    kept = bank.vectors[filled]  # (sum counts, d): unit vectors, class by class in entropy order
    want = torch.cat([F.normalize(supports[label == k], dim=1) for k in range(fmnist_cnn.info.num_classes)])
    assert torch.allclose(torch.sort(kept, dim=0).values, torch.sort(want, dim=0).values, atol=1e-6)
    ordered = torch.where(filled, bank.entropy, torch.full_like(bank.entropy, float("inf")))
    assert torch.all(ordered.diff(dim=1).nan_to_num(0.0) >= 0)  # each class's supports in entropy order
    for got, ref in zip(outputs, expected):
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
        assert torch.equal(got.argmax(1), ref.argmax(1))


def test_predict_scores_with_the_supports_as_they_are(fmnist_cnn):
    first, second = _batches(fmnist_cnn, n=2)
    t3a = get_method("t3a", fmnist_cnn.model, fmnist_cnn.info, filter_k=5)
    t3a(first)
    before = t3a.model.supports.entropy.clone()
    scores = t3a.predict(second)
    assert torch.equal(t3a.model.supports.entropy, before)
    with torch.no_grad():
        z = t3a.model(second)
    torch.testing.assert_close(scores, z @ t3a.model.supports.prototypes().T)
    assert t3a.cost.backwards == 0


@pytest.mark.parametrize("filter_k", [0, -1, 10_001])
def test_filter_k_out_of_range_is_refused_in_one_line(fmnist_cnn, filter_k):
    with pytest.raises(ValueError, match=rf"filter_k={filter_k} must be in \[1, 10000\]") as err:
        get_method("t3a", fmnist_cnn.model, fmnist_cnn.info, filter_k=filter_k)
    assert "\n" not in str(err.value)

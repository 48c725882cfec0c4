"""SANTA: source needed, prototypes, the anchoring term, the contrastive term's value, what adapts, a cell."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from tests.methods.fmnist_cnn import grey_shift
from unitta.methods import get_method
from unitta.methods.norm.affine import adapt_norm_affine
from unitta.methods.parts.heads import FeatureModel
from unitta.methods.parts.losses import aug_cross_entropy


@pytest.fixture(scope="module")
def source(fmnist_cnn):
    """Clean images with their true labels (the source domain of the small CNN)."""
    return TensorDataset(fmnist_cnn.x[2000:2400], fmnist_cnn.y[2000:2400])


def test_needs_source(fmnist_cnn):
    with pytest.raises(ValueError, match="needs labelled source images"):
        get_method("santa", fmnist_cnn.model, fmnist_cnn.info)


def test_prototypes_are_class_means_of_the_configured_features(fmnist_cnn, source):
    santa = get_method("santa", fmnist_cnn.model, fmnist_cnn.info, source=source, source_batch_size=400)
    model = copy.deepcopy(fmnist_cnn.model)
    adapt_norm_affine(model)  # one source batch of 400: batch statistics over all of them
    features = FeatureModel(model, "fc")(source.tensors[0]).detach()
    labels = source.tensors[1]
    expected = torch.stack([features[labels == k].mean(0) for k in range(10)])
    torch.testing.assert_close(santa.prototypes, expected, rtol=1e-4, atol=1e-5)
    assert santa.has_prototype.all()
    santa.reset()  # computed once per object, the same after reset
    torch.testing.assert_close(santa.prototypes, expected, rtol=1e-4, atol=1e-5)


def test_class_without_source_images_is_never_nearest(fmnist_cnn, source):
    x, y = source.tensors
    partial = TensorDataset(x[y != 3], y[y != 3])
    santa = get_method("santa", fmnist_cnn.model, fmnist_cnn.info, source=partial)
    assert not santa.has_prototype[3] and santa.has_prototype.sum() == 9
    nearest = santa.nearest_prototypes(santa.prototypes[3:4] + 1.0)
    assert torch.isfinite(nearest).all()


def test_anchoring_term_on_known_logits():
    z = torch.tensor([[2.0, 0.0]])
    z_aug = torch.tensor([[0.0, 2.0]])
    anchor = torch.tensor([[1.0, -1.0]])
    p, p_aug, log_a = z.softmax(1), z_aug.softmax(1), anchor.log_softmax(1)
    expected = -0.5 * (p * log_a).sum(1) - 0.5 * (p_aug * log_a).sum(1)
    torch.testing.assert_close(aug_cross_entropy(z, z_aug, anchor), expected)
    # the student is pulled towards the anchor: the term is smallest when both views agree with it
    agree = aug_cross_entropy(torch.tensor([[9.0, -9.0]]), torch.tensor([[9.0, -9.0]]), anchor)
    assert agree < aug_cross_entropy(z, z_aug, anchor)


def test_contrastive_value_with_orthogonal_images(fmnist_cnn, source):
    santa = get_method("santa", fmnist_cnn.model, fmnist_cnn.info, source=source)
    santa.projector = nn.Identity()
    b, t = 4, santa.cfg.temperature
    views = torch.eye(b).unsqueeze(1).repeat(1, 3, 1)  # every view of image i is e_i
    expected = math.log(2 + 3 * (b - 1) * math.exp(-1 / t))
    torch.testing.assert_close(santa.contrastive(views), torch.tensor(expected))


def test_what_adapts_and_the_frozen_anchor(fmnist_cnn, source):
    x = grey_shift(fmnist_cnn.x[:32], seed=12)
    santa = get_method("santa", fmnist_cnn.model, fmnist_cnn.info, source=source)
    anchor = {k: v.clone() for k, v in santa.anchor.state_dict().items()}
    projector = [p.detach().clone() for p in santa.projector.parameters()]
    affine = [p.detach().clone() for p in santa.optimizer.param_groups[0]["params"][:6]]
    out = santa(x)
    assert out.shape == (32, 10) and santa.cost.backwards == 1
    assert all(torch.equal(v, santa.anchor.state_dict()[k]) for k, v in anchor.items())
    assert all(not torch.equal(a, b) for a, b in zip(projector, santa.projector.parameters()))
    assert all(not torch.equal(a, b) for a, b in zip(affine, santa.optimizer.param_groups[0]["params"][:6]))
    # both terms drive the step: switching either off changes the update
    steps = {}
    for weights in ((1.0, 1.0), (0.0, 1.0), (1.0, 0.0)):
        m = get_method(
            "santa", fmnist_cnn.model, fmnist_cnn.info, source=source, lambda_ce_trg=weights[0], lambda_cont=weights[1]
        )
        m(x)
        steps[weights] = torch.cat([p.detach().flatten() for p in m.optimizer.param_groups[0]["params"][:6]])
    assert not torch.allclose(steps[(1.0, 1.0)], steps[(0.0, 1.0)])
    assert not torch.allclose(steps[(1.0, 1.0)], steps[(1.0, 0.0)])


def test_fmnist_cell(fmnist_cell):
    fmnist_cell("santa", prototype_samples=400)

"""CoTTA: cost with and without the augmented teacher passes, batches of one, presets, stochastic restore."""

from __future__ import annotations

import math

import pytest
import torch

from tests.methods.fmnist_cnn import grey_shift
from unitta.methods import get_method


@pytest.fixture(scope="module")
def stream(fmnist_cnn) -> torch.Tensor:
    return grey_shift(fmnist_cnn.x[:256], seed=1)


def test_cost_counts_the_augmented_teacher_passes(fmnist_cnn, stream):
    model, info = fmnist_cnn.model, fmnist_cnn.info
    # student + anchor + N augmented teacher passes when the anchor is unsure (AP = 1) ...
    cotta = get_method("cotta", model, info, n_augmentations=3, anchor_threshold=1.0)
    cotta(stream[:16])
    assert (cotta.cost.forwards, cotta.cost.backwards) == (5, 1)
    # ... and student + anchor + one teacher pass when it is confident (AP = 0).
    cotta = get_method("cotta", model, info, anchor_threshold=0.0)
    cotta(stream[:16])
    assert (cotta.cost.forwards, cotta.cost.backwards) == (3, 1)


def test_batch_of_one_is_predicted_without_an_update(fmnist_cnn, stream):
    method = get_method("cotta", fmnist_cnn.model, fmnist_cnn.info)
    before = {k: v.clone() for k, v in method.model.state_dict().items()}
    out = method(stream[:1])
    assert out.shape == (1, 10) and torch.isfinite(out).all()
    assert method.cost.backwards == 0
    assert all(torch.equal(v, before[k]) for k, v in method.model.state_dict().items())


def test_presets_and_bad_hyper_parameters(fmnist_cnn):
    model, info = fmnist_cnn.model, fmnist_cnn.info
    assert get_method("cotta", model, info, dataset="cifar100-c").cfg.anchor_threshold == 0.72
    cotta_in = get_method("cotta", model, info, dataset="imagenet-c").cfg
    assert (cotta_in.restore_prob, cotta_in.anchor_threshold, cotta_in.loss, cotta_in.aug_size) == (
        0.001, 0.1, "symmetric", None)
    with pytest.raises(ValueError, match="restore_prob"):
        get_method("cotta", model, info, restore_prob=1.5)
    with pytest.raises(ValueError, match="aug_size"):
        get_method("cotta", model, info, aug_size=1)


def test_cotta_restores_a_fraction_rst_of_weights_and_updates_the_teacher(fmnist_cnn, stream):
    model, info = fmnist_cnn.model, fmnist_cnn.info
    batch = stream[:64]
    rst = 0.1
    plain = get_method("cotta", model, info, anchor_threshold=0.0, restore_prob=0.0)
    restored = get_method("cotta", model, info, anchor_threshold=0.0, restore_prob=rst)
    plain(batch)
    restored(batch)
    changed = total = n_restored = 0
    for name, source in restored.source_params.items():
        stepped = plain.params[name].detach()  # the same step without the restore
        after = restored.params[name].detach()
        moved = stepped != source
        is_source = after == source
        # an element either kept its stepped value or went back to its source value
        assert torch.all(is_source | (after == stepped))
        changed += int(moved.sum())
        n_restored += int((moved & is_source).sum())
        total += source.numel()
        # teacher = 0.999 source + 0.001 stepped student (EMA before the restore)
        assert torch.allclose(restored.teacher.get_parameter(name), 0.999 * source + 0.001 * stepped, atol=1e-6)
    assert changed > 0.9 * total
    fraction = n_restored / changed
    tolerance = 5 * math.sqrt(rst * (1 - rst) / changed)  # 5 binomial standard deviations
    assert abs(fraction - rst) < tolerance, (fraction, tolerance)

"""AdaContrast: the MoCo queue fills with the key encoder's keys and pseudo-labels, the pseudo-labels come from a kNN
vote over the feature bank after the first samples, the key encoder is an EMA, the prediction is the adapted model
in eval mode; the contrastive losses; one cell."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tests.methods.fmnist_cnn import grey_shift
from unitta.methods import get_method
from unitta.methods.parts.contrastive import class_aware_instance_loss, moco_logits, multiview_contrastive_loss


@pytest.fixture(scope="module")
def stream(fmnist_cnn) -> torch.Tensor:
    return grey_shift(fmnist_cnn.x[:160], seed=4)


def test_queue_fills_with_normalised_keys_and_pseudo_labels(fmnist_cnn, stream):
    method = get_method("adacontrast", fmnist_cnn.model, fmnist_cnn.info, queue_size=100)
    initial = method.queue.clone()
    for i in range(3):
        method(stream[32 * i : 32 * (i + 1)])
    assert method.queue_ptr == 96
    norms = method.queue.norm(dim=0)
    torch.testing.assert_close(norms, torch.ones_like(norms))
    assert not torch.equal(method.queue[:, :96], initial[:, :96])  # written ...
    assert torch.equal(method.queue[:, 96:], initial[:, 96:])  # ... and the rest still the random start
    method(stream[96:128])  # wraps around the ring
    assert method.queue_ptr == 28 and not torch.equal(method.queue[:, 96:], initial[:, 96:])


def test_enqueued_labels_are_the_batch_pseudo_labels(fmnist_cnn, stream):
    method = get_method("adacontrast", fmnist_cnn.model, fmnist_cnn.info, queue_size=64)
    seen = []
    original = method._pseudo_labels
    method._pseudo_labels = lambda f, z: seen.append(original(f, z)) or seen[-1]
    method(stream[:32])
    assert torch.equal(method.queue_labels[:32], seen[0])


def test_pseudo_labels_come_from_a_knn_vote_over_the_bank(fmnist_cnn, stream):
    method = get_method("adacontrast", fmnist_cnn.model, fmnist_cnn.info, queue_size=64, knn_after=64)
    method(stream[:32])
    method(stream[32:64])
    assert method.bank_features.shape[0] == 64 and method.samples_seen == 64
    features = method.model.encode(stream[64:96]).detach()
    logits = method.model.head(features)
    # the vote follows the bank's probabilities, whatever the model predicts
    method.bank_probs = F.one_hot(torch.full((64,), 7), 10).float()
    assert (method._pseudo_labels(features, logits) == 7).all()
    # the k nearest entries decide: give the 10 nearest of sample 0 class 2, the rest class 7
    nearest = (F.normalize(features[:1], dim=1) @ F.normalize(method.bank_features, dim=1).T).topk(10).indices[0]
    method.bank_probs[nearest] = F.one_hot(torch.tensor(2), 10).float()
    assert method._pseudo_labels(features, logits)[0] == 2


def test_first_samples_use_the_argmax_prediction(fmnist_cnn, stream):
    method = get_method("adacontrast", fmnist_cnn.model, fmnist_cnn.info, knn_after=1024)
    features = method.model.encode(stream[:32]).detach()
    logits = method.model.head(features)
    assert torch.equal(method._pseudo_labels(features, logits), logits.argmax(dim=1))
    assert method.samples_seen == 32


def test_bank_grows_to_the_queue_size_then_is_a_ring(fmnist_cnn, stream):
    method = get_method("adacontrast", fmnist_cnn.model, fmnist_cnn.info, queue_size=50)
    for i in range(3):
        method(stream[32 * i : 32 * (i + 1)])
    assert method.bank_features.shape[0] == 64  # grows past 50 by whole batches, as the reference
    torch.testing.assert_close(method.bank_probs.sum(dim=1), torch.ones(64))


def test_key_encoder_is_an_ema_and_prediction_uses_the_adapted_model(fmnist_cnn, stream):
    method = get_method("adacontrast", fmnist_cnn.model, fmnist_cnn.info)
    p0 = {k: p.detach().clone() for k, p in method.model.named_parameters()}
    out = method(stream[:32])
    keys = dict(method.key_encoder.named_parameters())
    for name in p0:  # the EMA runs before the step: m * p0 + (1 - m) * p0
        torch.testing.assert_close(keys[name], p0[name], rtol=0, atol=1e-6)
    assert not method.model.training
    with torch.no_grad():
        torch.testing.assert_close(out, method.model(stream[:32]))  # eval mode, after the step
    p1 = {k: p.detach().clone() for k, p in method.model.named_parameters()}
    assert any(not torch.equal(p1[k], p0[k]) for k in p0)  # every weight adapts
    method(stream[32:64])
    m = method.cfg.momentum
    for name in p0:
        torch.testing.assert_close(keys[name], m * p0[name] + (1 - m) * p1[name], rtol=0, atol=1e-6)


def test_adaptation_updates_the_running_statistics_used_for_prediction(fmnist_cnn, stream):
    method = get_method("adacontrast", fmnist_cnn.model, fmnist_cnn.info)
    mean = method.model.backbone.bn1.running_mean.clone()
    method(stream[:32])
    assert not torch.equal(method.model.backbone.bn1.running_mean, mean)


def test_multiview_contrastive_loss_matches_its_definition():
    g = torch.Generator().manual_seed(0)
    views = F.normalize(torch.randn(5, 3, 8, generator=g), dim=-1)
    flat = views.transpose(0, 1).reshape(15, 8)
    sample = torch.arange(5).repeat(3)
    t, total = 0.1, 0.0
    for a in range(15):
        others = [j for j in range(15) if j != a]
        log_denominator = torch.logsumexp(torch.stack([flat[a] @ flat[j] / t for j in others]), dim=0)
        positives = [j for j in others if sample[j] == sample[a]]
        total += -sum(flat[a] @ flat[p] / t - log_denominator for p in positives) / len(positives)
    torch.testing.assert_close(multiview_contrastive_loss(views, t), total / 15)


def test_class_aware_loss_drops_same_label_negatives():
    g = torch.Generator().manual_seed(1)
    q, k = F.normalize(torch.randn(4, 8, generator=g), dim=1), F.normalize(torch.randn(4, 8, generator=g), dim=1)
    queue = F.normalize(torch.randn(8, 6, generator=g), dim=0)
    logits = moco_logits(q, k, queue, 0.07)
    labels = torch.tensor([0, 1, 0, 1])
    same = torch.zeros(6, dtype=torch.long)  # every queue entry has label 0
    loss = class_aware_instance_loss(logits, labels, same)
    expected = torch.stack(
        [  # label 0: only the positive remains (loss 0); label 1: all negatives count
            torch.tensor(0.0),
            F.cross_entropy(logits[1:2], torch.tensor([0])),
            torch.tensor(0.0),
            F.cross_entropy(logits[3:4], torch.tensor([0])),
        ]
    ).mean()
    torch.testing.assert_close(loss, expected)


def test_presets_and_bad_hyper_parameters(fmnist_cnn):
    model, info = fmnist_cnn.model, fmnist_cnn.info
    cfg = get_method("adacontrast", model, info, dataset="imagenet-c").cfg
    assert (cfg.optimizer, cfg.lr, cfg.weight_decay, cfg.queue_size, cfg.temperature) == (
        "sgd",
        2e-4,
        1e-4,
        16384,
        0.07,
    )
    with pytest.raises(ValueError, match="queue_size"):
        get_method("adacontrast", model, info, queue_size=0)


def test_fmnist_c_cell(fmnist_cell):
    fmnist_cell("adacontrast", S=2)

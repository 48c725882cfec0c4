"""TENT, CoTTA, RoTTA, Robust BN and NOTE (issue 5, part 1): contract and behaviour on real data.

Contract, for every method: finite (B, K) outputs for any batch size >= 1, ``reset()`` restores
the source exactly, determinism on CPU for a fixed seed, cost accounting. Behaviour, on a tiny CNN
trained for a few seconds on Fashion-MNIST and a contrast+noise shift (``baselines_1_common``).
"""

from __future__ import annotations

import math

import pytest
import torch

from tests.methods.baselines_1_common import adaptation_data, error, info_for, shift, trained_model
from unitta.methods import get_method
from unitta.methods.losses import softmax_entropy

# Small memories / few augmentations keep the runs short; the logic under test is the same.
CASES = {
    "tent": ("tent", {}),
    "tent-sgd": ("tent", {"optimizer": "sgd", "lr": 2.5e-4}),
    "cotta": ("cotta", {"n_augmentations": 2, "anchor_threshold": 1.0}),
    "cotta-imagenet-style": ("cotta", {"n_augmentations": 2, "loss": "symmetric", "aug_size": 16}),
    "rotta": ("rotta", {"update_every": 8, "memory_size": 16}),
    "robust_bn": ("robust_bn", {}),
    "robust_bn-reference": ("robust_bn", {"variant": "reference"}),
    "note": ("note", {"update_every": 8, "memory_size": 16}),
    "note-ut": ("note", {"update_every": 0, "optimizer": "sgd", "memory_size": 16}),
}


@pytest.fixture(scope="module", autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def model():
    return trained_model()


@pytest.fixture(scope="module")
def stream() -> torch.Tensor:
    x, _ = adaptation_data()
    return shift(x[:256], seed=1, contrast=0.5, noise=0.1)


def _build(case: str, model, seed: int = 0, **extra):
    name, kwargs = CASES[case]
    return get_method(name, model, info_for(model), seed=seed, **{**kwargs, **extra})


def _state(method) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in method.model.state_dict().items()}


@pytest.mark.parametrize("case", sorted(CASES))
def test_any_batch_size_gives_finite_scores(case, model, stream):
    method = _build(case, model)
    start = 0
    for size in (1, 2, 7, 1, 16, 3):
        out = method(stream[start : start + size])
        start += size
        assert out.shape == (size, 10)
        assert torch.isfinite(out).all(), f"{case}: non-finite output at batch size {size}"
    assert all(torch.isfinite(v).all() for v in method.model.state_dict().values() if v.is_floating_point())


@pytest.mark.parametrize("case", sorted(CASES))
def test_reset_restores_the_source_exactly(case, model, stream):
    source_state = {k: v.clone() for k, v in model.state_dict().items()}
    method = _build(case, model)
    fresh = _build(case, model)
    initial = _state(method)
    for i in range(4):
        method(stream[16 * i : 16 * (i + 1)])
    adapted = _state(method)
    assert any(not torch.equal(adapted[k], initial[k]) for k in initial), f"{case}: nothing adapted"
    method.reset()
    assert all(torch.equal(v, initial[k]) for k, v in _state(method).items())
    assert method.cost.batches == 0 and method.cost.forwards == 0
    # Same outputs as a never-used method on the next batches: teachers, memories, optimiser
    # state and random generators are restored too, not only the model weights.
    for i in range(4, 7):
        batch = stream[16 * i : 16 * (i + 1)]
        assert torch.equal(method(batch), fresh(batch))
    assert all(torch.equal(v, source_state[k]) for k, v in model.state_dict().items()), "source model modified"


@pytest.mark.parametrize("case", sorted(CASES))
def test_deterministic_for_a_fixed_seed(case, model, stream):
    a, b = _build(case, model, seed=5), _build(case, model, seed=5)
    for i in range(5):
        batch = stream[24 * i : 24 * (i + 1)]
        assert torch.equal(a(batch), b(batch))


def test_cost_accounting(model, stream):
    batch = stream[:16]
    tent = _build("tent", model)
    for _ in range(3):
        tent(batch)
    assert (tent.cost.forwards, tent.cost.backwards, tent.cost.images) == (3, 3, 48)
    # CoTTA: student + anchor + N augmented teacher passes when the anchor is unsure (AP = 1) ...
    cotta = _build("cotta", model, n_augmentations=3, anchor_threshold=1.0)
    cotta(batch)
    assert (cotta.cost.forwards, cotta.cost.backwards) == (5, 1)
    # ... and student + anchor + one teacher pass when it is confident (AP = 0).
    cotta = _build("cotta", model, anchor_threshold=0.0)
    cotta(batch)
    assert (cotta.cost.forwards, cotta.cost.backwards) == (3, 1)
    # RoTTA: one teacher pass per batch, plus teacher + student passes per update (every 16 samples).
    rotta = _build("rotta", model, update_every=16)
    for i in range(4):
        rotta(stream[8 * i : 8 * (i + 1)])
    assert (rotta.cost.forwards, rotta.cost.backwards, rotta.updates) == (8, 2, 2)
    note = _build("note", model, update_every=16)
    for i in range(4):
        note(stream[8 * i : 8 * (i + 1)])
    assert (note.cost.forwards, note.cost.backwards, note.updates) == (6, 2, 2)


@pytest.mark.parametrize("name", ["tent", "cotta"])
def test_batch_of_one_is_predicted_without_an_update(name, model, stream):
    method = get_method(name, model, info_for(model))
    before = _state(method)
    out = method(stream[:1])
    assert out.shape == (1, 10) and torch.isfinite(out).all()
    assert method.cost.backwards == 0
    assert all(torch.equal(v, before[k]) for k, v in _state(method).items())


def test_update_cadence_counts_samples_not_batches(model, stream):
    for name in ("rotta", "note"):
        ones = get_method(name, model, info_for(model), update_every=8, memory_size=16)
        for i in range(40):
            ones(stream[i : i + 1])
        thirteens = get_method(name, model, info_for(model), update_every=8, memory_size=16)
        for start in (0, 13, 26, 39):
            thirteens(stream[start : min(start + 13, 40)])
        assert ones.updates == thirteens.updates == 5, name


def test_bad_hyper_parameters_are_refused(model):
    info = info_for(model)
    with pytest.raises(ValueError, match="optimizer"):
        get_method("tent", model, info, optimizer="rmsprop")
    with pytest.raises(ValueError, match="restore_prob"):
        get_method("cotta", model, info, restore_prob=1.5)
    with pytest.raises(ValueError, match="update_every"):
        get_method("rotta", model, info, update_every=0)
    with pytest.raises(ValueError, match="variant"):
        get_method("robust_bn", model, info, variant="bbn")


def test_presets_follow_the_reference_configs(model):
    info = info_for(model)
    tent = get_method("tent", model, info, dataset="imagenet-c")
    assert (tent.cfg.optimizer, tent.cfg.lr) == ("sgd", 2.5e-4)
    assert isinstance(tent.optimizer, torch.optim.SGD) and tent.optimizer.defaults["nesterov"]
    assert get_method("cotta", model, info, dataset="cifar100-c").cfg.anchor_threshold == 0.72
    cotta_in = get_method("cotta", model, info, dataset="imagenet-c").cfg
    assert (cotta_in.restore_prob, cotta_in.anchor_threshold, cotta_in.loss, cotta_in.aug_size) == (
        0.001, 0.1, "symmetric", None)
    note = get_method("note", model, info)
    assert isinstance(note.optimizer, torch.optim.Adam) and note.cfg.lr == 1e-4
    assert get_method("robust_bn", model, info, dataset="imagenet-c").cfg.eta == 0.5


# ---------------------------------------------------------------------- behaviour on real data
def test_tent_lowers_entropy_on_a_shifted_stream(model):
    x, _ = adaptation_data()
    xs = shift(x, seed=2, contrast=0.5, noise=0.1)
    held_out = xs[3000:3256]
    # lr 5e-3 (5x the CIFAR default) so that 30 steps on this 80-parameter model move it clearly
    tent = get_method("tent", model, info_for(model), lr=5e-3)
    with torch.no_grad():
        before = softmax_entropy(tent.model(held_out)).mean().item()  # batch-stat BN, source affine
    for i in range(0, 1920, 64):
        tent(xs[i : i + 64])
    with torch.no_grad():
        after = softmax_entropy(tent.model(held_out)).mean().item()
    assert after < 0.9 * before, (before, after)


def test_cotta_restores_a_fraction_rst_of_weights_and_updates_the_teacher(model, stream):
    batch = stream[:64]
    rst = 0.1
    plain = get_method("cotta", model, info_for(model), anchor_threshold=0.0, restore_prob=0.0)
    restored = get_method("cotta", model, info_for(model), anchor_threshold=0.0, restore_prob=rst)
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


def test_rotta_memory_keeps_its_class_balance(model):
    x, y = adaptation_data()
    xs = shift(x, seed=3, contrast=0.5, noise=0.1)
    # a label-imbalanced stream: 70 % trousers (class 1), the rest mixed
    trousers = torch.nonzero(y == 1).flatten()[:280]
    others = torch.nonzero(y != 1).flatten()[:120]
    g = torch.Generator().manual_seed(0)
    order = torch.cat([trousers, others])[torch.randperm(400, generator=g)]
    rotta = get_method("rotta", model, info_for(model))
    quota = math.ceil(64 / 10)
    predicted = []
    for i in range(0, 400, 32):
        predicted.append(rotta(xs[order[i : i + 32]]).argmax(dim=1))
        assert max(rotta.memory.class_counts()) <= quota
        assert len(rotta.memory) <= 64
    predicted = torch.cat(predicted)
    dominant = int(torch.mode(predicted).values)
    stream_share = float((predicted == dominant).float().mean())
    memory_share = rotta.memory.class_counts()[dominant] / len(rotta.memory)
    assert stream_share > 0.35, "the stream is not imbalanced enough for this test to discriminate"
    assert len(rotta.memory) >= 40
    assert memory_share <= quota / len(rotta.memory) < stream_share / 2
    assert rotta.updates == 400 // 64


def test_rotta_beats_the_source_model_on_a_shifted_stream(model):
    x, y = adaptation_data()
    xs = shift(x[:1280], seed=4, contrast=0.5, noise=0.1)
    rotta = get_method("rotta", model, info_for(model))
    preds = torch.cat([rotta(xs[i : i + 64]) for i in range(0, 1280, 64)])
    with torch.no_grad():
        source_error = error(model(xs), y[:1280])
    # 1280 samples: a binomial standard error below 1.5 points, the margin is 10 points
    assert error(preds, y[:1280]) < source_error - 0.10


def test_note_pbrs_keeps_its_class_balance_on_a_label_sorted_stream(model):
    x, y = adaptation_data()
    xs = shift(x[:2000], seed=5, contrast=0.5, noise=0.1)
    order = torch.argsort(y[:2000], stable=True)  # fully label-correlated (non-i.i.d.)
    note = get_method("note", model, info_for(model))
    for i in range(0, 2000, 64):
        note(xs[order[i : i + 64]])
    counts, seen = note.memory.class_counts(), note.memory.seen
    assert len(note.memory) == 64
    frequent = [c for c in range(10) if seen[c] >= 64]
    assert len(frequent) >= 3
    assert max(counts[c] for c in frequent) - min(counts[c] for c in frequent) <= 1
    # a rarely predicted class is never the largest, so it keeps every item it had
    for c in range(10):
        if seen[c] < min(counts[f] for f in frequent):
            assert counts[c] == seen[c]


def test_robust_bn_statistics_move_toward_the_target_at_momentum_alpha(model):
    x, _ = adaptation_data()
    xs = shift(x[:2560], seed=6, contrast=0.5, noise=0.1)
    alpha, steps = 0.05, 40
    method = get_method("robust_bn", model, info_for(model), alpha=alpha)
    layer = method.model.bn1  # its input conv1(x) does not depend on any normalisation
    with torch.no_grad():
        features = model.conv1(xs)  # (N, C, H, W)
        target = features.mean(dim=(0, 2, 3))
        batch_means = torch.stack([features[i : i + 64].mean(dim=(0, 2, 3)) for i in range(0, 2560, 64)])
    start = layer.running_mean.clone()
    for i in range(steps):
        method(xs[64 * i : 64 * (i + 1)])
    expected = target + (1 - alpha) ** steps * (start - target)
    # EMA noise: stationary standard deviation sqrt(alpha / (2 - alpha)) x that of the batch means
    noise = math.sqrt(alpha / (2 - alpha)) * batch_means.std(dim=0)
    assert torch.all((layer.running_mean - expected).abs() < 5 * noise + 1e-6)
    gap = (start - target).abs()
    assert torch.all(gap > 10 * noise), "the shift is too small for this test to discriminate"
    # exact: the statistics are the EMA of the batch statistics the layer saw
    ema = start.clone()
    for i in range(steps):
        ema = (1 - alpha) * ema + alpha * batch_means[i]
    assert torch.allclose(layer.running_mean, ema, atol=1e-5)

"""ETA, EATA and RDumb: the sample filter, the weighted entropy, EATA's Fisher penalty, RDumb's periodic reset."""

from __future__ import annotations

import copy
import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import TensorDataset

from tests.methods.fmnist_cnn import grey_shift
from unitta.methods import get_method
from unitta.methods.parts.entropy_filter import SampleFilter, entropy_margin, weighted_entropy
from unitta.methods.parts.losses import softmax_entropy

K = 10
E0 = entropy_margin(K, 0.4)  # 0.4 ln 10 = 0.921


def _logits(*rows: tuple[int, float]) -> torch.Tensor:
    """One row per sample: (class, margin) -> logits with ``margin`` on that class (margin 0: uniform)."""
    z = torch.zeros(len(rows), K)
    for i, (c, margin) in enumerate(rows):
        z[i, c] = margin
    return z


def _state(method) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in method.model.state_dict().items()}


def _same(a: dict, b: dict) -> bool:
    return all(torch.equal(a[k], b[k]) for k in a)


# ---------------------------------------------------------------- the filter
def test_filter_drops_high_entropy_then_redundant_samples():
    f = SampleFilter(K, E0, d_margin=0.4, device=torch.device("cpu"))
    confident, uniform = (0, 8.0), (0, 0.0)
    kept, entropy = f(_logits(confident, uniform))
    assert entropy[0] < E0 < entropy[1]  # ln 10 = 2.30 for the uniform one
    assert kept.tolist() == [True, False]  # no m yet: only the entropy filter
    assert torch.allclose(f.probs, _logits(confident).softmax(1)[0])  # m = the kept sample's probabilities
    # now m points at class 0: a second confident class-0 sample is redundant (cos ~ 1), a class-3 one is not
    kept, _ = f(_logits((0, 8.0), (3, 8.0), (5, 0.5)))
    assert kept.tolist() == [False, True, False]
    assert (int(f.reliable_total), int(f.kept_total)) == (1 + 2, 1 + 1)


def test_moving_average_follows_the_kept_samples_only_and_waits_for_one():
    f = SampleFilter(K, E0, d_margin=0.4, device=torch.device("cpu"))
    f(_logits((0, 0.0)))  # nothing reliable: m does not exist yet
    assert not bool(f.has_probs)
    f(_logits((2, 9.0)))
    m = f.probs.clone()
    p7 = _logits((7, 9.0)).softmax(1)[0]
    f(_logits((7, 9.0), (2, 9.0)))  # the class-2 sample is redundant and must not enter m
    assert torch.allclose(f.probs, 0.9 * m + 0.1 * p7)
    f.reset()
    assert not bool(f.has_probs) and f(_logits((2, 9.0)))[0].tolist() == [True]


def test_weighted_entropy_matches_the_index_selected_formula():
    g = torch.Generator().manual_seed(0)
    z = 3 * torch.randn(64, K, generator=g)
    ent = softmax_entropy(z)
    kept = ent < E0
    assert 0 < kept.sum() < 64
    selected = ent[kept]
    expected = (selected * torch.exp(-(selected - E0))).mean()  # EATA eq. 6 over the kept samples
    assert torch.allclose(weighted_entropy(ent, kept, E0), expected)
    assert weighted_entropy(ent, torch.zeros(64, dtype=torch.bool), E0) == 0


# ---------------------------------------------------------------- ETA
def test_eta_takes_no_step_when_every_sample_is_filtered(fmnist_cnn):
    batch = grey_shift(fmnist_cnn.x[:64], seed=1)
    eta = get_method("eta", fmnist_cnn.model, fmnist_cnn.info, e_factor=1e-6)  # E_0 ~ 0: nothing is reliable
    before = _state(eta)
    eta(batch)
    assert eta.cost.backwards == 0 and _same(before, _state(eta))
    assert eta.extra_metrics() == {"eta_reliable": 0, "eta_kept": 0}


def test_eta_filters_on_a_real_stream_and_adapts(fmnist_cnn):
    xs = grey_shift(fmnist_cnn.x[:640], seed=2)
    eta = get_method("eta", fmnist_cnn.model, fmnist_cnn.info)
    before = _state(eta)
    for i in range(0, 640, 64):
        eta(xs[i : i + 64])
    stats = eta.extra_metrics()
    # both filters act: some samples are unreliable, and some reliable ones are redundant
    assert 0 < stats["eta_kept"] < stats["eta_reliable"] < 640, stats
    assert eta.cost.backwards >= 1 and not _same(before, _state(eta))


def _index_selected_eta(model, batches, d_margin: float, lr: float) -> list[torch.Tensor]:
    """ETA written out from the paper's eq. 3-6 with index selection, as EATA's code orders it; returns the logits."""
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=lr)
    m, outputs = None, []
    for x in batches:
        z = model(x)
        ent = softmax_entropy(z)
        reliable = torch.where(ent < E0)[0]
        ent, chosen = ent[reliable], z[reliable]
        if m is not None:
            keep = torch.where(F.cosine_similarity(m[None], chosen.softmax(1), dim=1).abs() < d_margin)[0]
            ent, chosen = ent[keep], chosen[keep]
        if len(chosen):
            mean = chosen.detach().softmax(1).mean(0)
            m = mean if m is None else 0.9 * m + 0.1 * mean
            optimizer.zero_grad()
            (ent * torch.exp(-(ent.detach() - E0))).mean().backward()
            optimizer.step()
        outputs.append(z.detach())
    return outputs


def test_eta_equals_the_index_selected_algorithm_batch_by_batch(fmnist_cnn):
    xs = grey_shift(fmnist_cnn.x[:384], seed=7)
    batches = [xs[i : i + 64] for i in range(0, 384, 64)]
    eta = get_method("eta", fmnist_cnn.model, fmnist_cnn.info, lr=5e-3)
    configured = copy.deepcopy(eta.model)
    configured._forward_hooks.clear()
    expected = _index_selected_eta(configured, batches, d_margin=0.4, lr=5e-3)
    for b, z in zip(batches, expected):
        assert torch.allclose(eta(b), z, atol=1e-4)
    stats = eta.extra_metrics()
    assert 0 < stats["eta_kept"] < stats["eta_reliable"]  # both filters were active on this stream


def test_eta_presets_follow_the_reference_configs(fmnist_cnn):
    model, info = fmnist_cnn.model, fmnist_cnn.info
    assert get_method("eta", model, info).cfg.d_margin == 0.4
    assert get_method("eta", model, info, dataset="cifar100").cfg.d_margin == 0.1
    imagenet = get_method("eta", model, info, dataset="imagenet")
    assert (imagenet.cfg.optimizer, imagenet.cfg.lr, imagenet.cfg.d_margin) == ("sgd", 2.5e-4, 0.05)
    assert math.isclose(imagenet.filter.e_margin, 0.4 * math.log(10))
    with pytest.raises(ValueError, match="d_margin"):
        get_method("eta", model, info, d_margin=1.5)


# ---------------------------------------------------------------- EATA
def _source(fmnist_cnn, n: int = 512, shifted: bool = False) -> TensorDataset:
    x = fmnist_cnn.x[-n:]
    return TensorDataset(grey_shift(x, seed=5) if shifted else x, fmnist_cnn.y[-n:])


def test_eata_needs_a_source_set(fmnist_cnn):
    with pytest.raises(ValueError, match="needs labelled source images"):
        get_method("eata", fmnist_cnn.model, fmnist_cnn.info)


def test_eata_fisher_comes_from_the_source_images(fmnist_cnn):
    batch = grey_shift(fmnist_cnn.x[:64], seed=1)
    kwargs = {"num_source_samples": 256, "fisher_batch_size": 64}
    clean = get_method("eata", fmnist_cnn.model, fmnist_cnn.info, source=_source(fmnist_cnn), **kwargs)
    clean(batch)
    shifted = get_method("eata", fmnist_cnn.model, fmnist_cnn.info, source=_source(fmnist_cnn, shifted=True), **kwargs)
    shifted(batch)
    assert len(clean.fisher) == len(clean.params) and all((f >= 0).all() for f in clean.fisher)
    assert sum(float(f.sum()) for f in clean.fisher) > 0
    assert any(not torch.allclose(a, b) for a, b in zip(clean.fisher, shifted.fisher))
    # 256 source images in batches of 64 (4 forward/backward passes) before the stream's batch: set-up, not its cost
    assert (clean.setup_cost.forwards, clean.cost.forwards) == (4, 1)


def test_eata_fisher_is_the_mean_squared_gradient_of_the_pseudo_label_loss(fmnist_cnn):
    source = _source(fmnist_cnn, n=200)
    eata = get_method("eata", fmnist_cnn.model, fmnist_cnn.info, source=source, num_source_samples=150, seed=11)
    configured = copy.deepcopy(eata.model)
    configured._forward_hooks.clear()
    eata(grey_shift(fmnist_cnn.x[:64], seed=1))  # the first batch (64 images) sets the Fisher batch size
    # by hand: the same 150 images (the method's generator), batches of 64, 64, 22, CE to the model's own argmax
    order = torch.randperm(200, generator=torch.Generator().manual_seed(11))[:150]
    params = [p for p in configured.parameters() if p.requires_grad]
    squares = [torch.zeros_like(p) for p in params]
    for idx in order.split(64):
        z = configured(source.tensors[0][idx])
        grads = torch.autograd.grad(F.cross_entropy(z, z.argmax(1)), params)
        squares = [s + g**2 for s, g in zip(squares, grads)]
    for got, s in zip(eata.fisher, squares):
        assert torch.allclose(got, s / 3, rtol=1e-4, atol=1e-10)
    assert all(torch.equal(a, p.detach()) for a, p in zip(eata.anchor, params))  # anchored at the source values


def test_eata_fisher_penalty_pulls_parameters_back_to_the_source(fmnist_cnn):
    xs = grey_shift(fmnist_cnn.x[:1280], seed=3)
    source = _source(fmnist_cnn)
    common = {"lr": 5e-3}  # 5x the CIFAR lr so that 20 steps move this small model clearly

    def drift(name: str, **kwargs) -> float:
        method = get_method(name, fmnist_cnn.model, fmnist_cnn.info, **common, **kwargs)
        start = [p.detach().clone() for p in method.params]
        for i in range(0, 1280, 64):
            method(xs[i : i + 64])
        return sum(float(((p.detach() - s) ** 2).sum()) for p, s in zip(method.params, start))

    free = drift("eta")
    weak = drift("eata", source=source, fisher_alpha=2000.0)
    strong = drift("eata", source=source, fisher_alpha=20000.0)
    assert strong < 0.5 * weak and weak < 0.75 * free, (strong, weak, free)
    assert drift("eata", source=source, fisher_alpha=0.0) == pytest.approx(free)  # alpha 0: ETA again


# ---------------------------------------------------------------- RDumb
def test_rdumb_resets_to_the_source_every_n_batches(fmnist_cnn):
    xs = grey_shift(fmnist_cnn.x[:320], seed=4)
    batches = [xs[i : i + 64] for i in range(0, 320, 64)]
    rdumb = get_method("rdumb", fmnist_cnn.model, fmnist_cnn.info, reset_every=3)
    initial = _state(rdumb)
    for b in batches[:2]:
        rdumb(b)
    assert not _same(initial, _state(rdumb))  # adapted in between
    rdumb(batches[2])
    assert _same(initial, _state(rdumb)) and not bool(rdumb.filter.has_probs)
    assert rdumb.extra_metrics()["rdumb_resets"] == 1
    # after the reset it behaves as a method that starts at batch 3, optimiser state included
    fresh = get_method("eta", fmnist_cnn.model, fmnist_cnn.info)
    for b in batches[3:]:
        assert torch.equal(rdumb(b), fresh(b))
    assert rdumb.cost.batches == 5  # the reset keeps the cost counters


def test_rdumb_presets_follow_the_reference_configs(fmnist_cnn):
    model, info = fmnist_cnn.model, fmnist_cnn.info
    assert get_method("rdumb", model, info).cfg.reset_every == 1000
    assert get_method("rdumb", model, info, dataset="cifar100").cfg.d_margin == 0.4  # not ETA's 0.1
    assert get_method("rdumb", model, info, dataset="imagenet").cfg.d_margin == 0.05
    with pytest.raises(ValueError, match="reset_every"):
        get_method("rdumb", model, info, reset_every=0)


# ---------------------------------------------------------------- other normalisation kinds
class _NormNet(torch.nn.Module):
    """conv -> GroupNorm or LayerNorm -> linear, with logits scaled so that some predictions are confident."""

    def __init__(self, kind: str):
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 8, 4, stride=4)
        # named "gn", not "norm": SAR leaves a layer named "norm" alone (timm's final norm)
        self.gn = torch.nn.GroupNorm(2, 8) if kind == "group" else torch.nn.LayerNorm(8 * 8 * 8)
        self.fc = torch.nn.Linear(8 * 8 * 8, K)
        with torch.no_grad():
            for p in (self.conv.weight, self.fc.weight):
                p.copy_(torch.randn(p.shape, generator=g) * 0.2)

    def forward(self, x):
        h = self.conv(x)
        h = self.gn(h).flatten(1) if isinstance(self.gn, torch.nn.GroupNorm) else self.gn(h.flatten(1))
        return 8 * self.fc(torch.relu(h))


@pytest.mark.parametrize("kind", ["group", "layer"])
@pytest.mark.parametrize("name", ["eta", "eata", "rdumb", "sar"])
def test_adapts_the_affine_parameters_of_layer_and_group_norms(name, kind, fmnist_cnn):
    model = _NormNet(kind).eval()
    info = dataclasses.replace(fmnist_cnn.info, name=f"{kind}net", bn_layers=(), bdn_layer="")
    source = _source(fmnist_cnn, n=128) if name == "eata" else None
    # SAR: no recovery, which would restore the source at the end (this model's entropies are low)
    kwargs = {"reset_constant": 0.0} if name == "sar" else {}
    method = get_method(name, model, info, source=source, **kwargs)
    assert kind in method.norm_kinds
    before = {k: v.clone() for k, v in method.model.named_parameters()}
    for i in range(0, 256, 64):
        assert torch.isfinite(method(grey_shift(fmnist_cnn.x[i : i + 64], seed=6))).all()
    changed = {k for k, v in method.model.named_parameters() if not torch.equal(v, before[k])}
    assert changed == {"gn.weight", "gn.bias"}, changed

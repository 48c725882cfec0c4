"""DeYO: the patch shuffle, the entropy and PLPD filters (no step when they drop every sample), parameters, a cell."""

from __future__ import annotations

import math

import torch

from tests.methods.fmnist_cnn import grey_shift
from unitta.methods import get_method
from unitta.methods.deyo import excluded
from unitta.methods.parts.augment import patch_shuffle


def test_patch_shuffle_moves_whole_patches():
    x = torch.arange(2 * 3 * 8 * 8, dtype=torch.float32).view(2, 3, 8, 8)
    g = torch.Generator().manual_seed(0)
    y = patch_shuffle(x, 4, g)
    assert y.shape == x.shape and not torch.equal(x, y)

    def patches(t):  # (B, 16, C*2*2): the 2x2 patches of every image
        return t.unfold(2, 2, 2).unfold(3, 2, 2).permute(0, 2, 3, 1, 4, 5).reshape(2, 16, -1)

    for b in range(2):  # the same patches, in another order
        assert sorted(map(tuple, patches(x)[b].tolist())) == sorted(map(tuple, patches(y)[b].tolist()))
    assert torch.equal(patch_shuffle(x, 1, g), x)  # one patch: nothing to shuffle
    assert not torch.equal(patch_shuffle(x, 4, torch.Generator().manual_seed(1)), y)  # the generator decides


def test_patch_shuffle_changes_the_kept_set(fmnist_cnn):
    """With 4 x 4 shuffling many confident samples lose their prediction (PLPD > 0.2) and are kept; without
    destroying the object (one patch) the prediction barely moves and (almost) nothing passes the PLPD filter."""
    x = grey_shift(fmnist_cnn.x[:64], seed=4)
    shuffled = get_method("deyo", fmnist_cnn.model, fmnist_cnn.info)
    identity = get_method("deyo", fmnist_cnn.model, fmnist_cnn.info, patch_len=1)
    shuffled(x)
    identity(x)
    assert int(shuffled.kept_last) >= 10 > 2 >= int(identity.kept_last), (shuffled.kept_last, identity.kept_last)


def test_filters_that_drop_everything_take_no_step(fmnist_cnn):
    x = grey_shift(fmnist_cnn.x[:32], seed=5)
    for overrides in ({"margin": 1e-6}, {"plpd_threshold": 0.999}):  # S1 empty; S2 empty
        deyo = get_method("deyo", fmnist_cnn.model, fmnist_cnn.info, **overrides)
        before = [p.detach().clone() for p in deyo.optimizer.param_groups[0]["params"]]
        out = deyo(x)
        assert out.shape == (32, 10) and deyo.cost.backwards == 0, overrides
        assert all(torch.equal(a, b) for a, b in zip(before, deyo.optimizer.param_groups[0]["params"]))
    deyo = get_method("deyo", fmnist_cnn.model, fmnist_cnn.info, plpd_threshold=-1.0)  # every S1 sample kept
    deyo(x)
    assert deyo.cost.backwards == 1 and int(deyo.kept_last) > 0


def test_an_empty_first_filter_returns_before_the_shuffled_forward(fmnist_cnn):
    """S1 empty: the reference returns before shuffling (no second forward, no draw). On the CPU path the read of
    S1 comes first; the CUDA path keeps its one read (of S2) per batch and runs the shuffled forward (docstring)."""
    x = grey_shift(fmnist_cnn.x[:16], seed=5)
    deyo = get_method("deyo", fmnist_cnn.model, fmnist_cnn.info, margin=1e-6)
    forwards = []
    hook = deyo.model.register_forward_hook(lambda *_: forwards.append(1))
    state = deyo.aug_generator.get_state()
    try:
        deyo(x)
    finally:
        hook.remove()
    assert len(forwards) == 1 and deyo.cost.backwards == 0
    assert torch.equal(deyo.aug_generator.get_state(), state)  # nothing drawn for a shuffle


def test_the_loss_is_the_reweighted_entropy_of_the_kept_samples(fmnist_cnn):
    """Recompute the loss from the filters' pieces: mean over S2 of H (exp(-(H - e0)) + exp(PLPD))."""
    x = grey_shift(fmnist_cnn.x[:64], seed=6)
    deyo = get_method("deyo", fmnist_cnn.model, fmnist_cnn.info)
    state = deyo.aug_generator.get_state()
    with torch.no_grad():
        logits = deyo.model(x)
        loss = deyo.loss(x, logits)
        deyo.aug_generator.set_state(state)
        probs = logits.softmax(1)
        entropy = -(probs * logits.log_softmax(1)).sum(1)
        s1 = (entropy < 0.5 * math.log(10)).nonzero().squeeze(1)
        # DeYO shuffles every image (static shapes) and normalises with S1's statistics: a forward of S1 alone
        shuffled = deyo.model(patch_shuffle(x, 4, deyo.aug_generator)[s1]).softmax(1)
        y = probs[s1].argmax(1, keepdim=True)
        plpd = (probs[s1].gather(1, y) - shuffled.gather(1, y)).squeeze(1)
        keep = plpd > 0.2
        h = entropy[s1][keep]
        expected = (h * (torch.exp(-(h - 0.4 * math.log(10))) + torch.exp(plpd[keep]))).mean()
    torch.testing.assert_close(loss, expected)


def test_parameters_and_excluded_layers(fmnist_cnn, embedded_model):
    model, info = embedded_model
    deyo = get_method("deyo", model, info)
    trained = {id(p) for p in deyo.optimizer.param_groups[0]["params"]}
    assert len(trained) == 2 * len(info.bn_layers)  # ResNet-20: no layer4, every BN affine adapts
    assert excluded(model) == ("norm",)  # the input normaliser, as the reference's exact-name rule
    imagenet = get_method("deyo", fmnist_cnn.model, fmnist_cnn.info, dataset="imagenet")
    assert (imagenet.cfg.optimizer, imagenet.cfg.lr) == ("sgd", 2.5e-4)


def test_fmnist_cell(fmnist_cell):
    fmnist_cell("deyo")

"""TEA: SGLD lowers its samples' energy, the chain is seeded, the step is contrastive divergence, bad values refused."""

from __future__ import annotations

import pytest
import torch

from unitta.methods import get_method
from unitta.methods.tea import energy
from unitta.schema import ConfigError
from unitta.sweep.config import parse_config

pytestmark = pytest.mark.usefixtures("one_thread")

SHORT = {"sgld_steps": 3, "buffer_size": 48}  # a short chain and a small buffer: what is checked does not depend on them


def _mean_energy(method, x: torch.Tensor) -> float:
    with torch.no_grad():
        return energy(method.model(x)).mean().item()


def test_langevin_lowers_the_energy_of_its_samples(embedded_model, fmnist_c_images):
    model, info = embedded_model
    tea = get_method("tea", model, info, **SHORT)
    tea(fmnist_c_images[:8])  # makes the buffer
    start = tea.noise((8, *fmnist_c_images.shape[1:]), fmnist_c_images)
    before = _mean_energy(tea, start)
    moved = tea.langevin(start.clone())
    assert moved.shape == start.shape and not moved.requires_grad
    after = _mean_energy(tea, moved)
    assert after < before - 0.1, (before, after)  # 3 steps of 0.1 down the energy's gradient, noise 0.01
    # noise-free and longer: lower still
    long = get_method("tea", model, info, sgld_steps=8, sgld_std=0.0, buffer_size=48)
    long.model.load_state_dict(tea.model.state_dict())
    assert _mean_energy(long, long.langevin(start.clone())) < after


def test_the_chain_is_seeded_and_writes_back_to_the_buffer(embedded_model, fmnist_c_images):
    model, info = embedded_model
    x = fmnist_c_images[:8]

    def run(seed):
        tea = get_method("tea", model, info, seed=seed, **SHORT)
        out = [tea(x), tea(fmnist_c_images[8:16])]
        return tea, torch.cat(out)

    a, out_a = run(0)
    b, out_b = run(0)
    c, out_c = run(1)
    assert torch.equal(a.buffer, b.buffer) and torch.equal(out_a, out_b)
    assert not torch.equal(a.buffer, c.buffer) and not torch.equal(out_a, out_c)
    # the buffer started as U(-1, 1) noise; the slots the two batches drew now hold SGLD samples
    fresh = get_method("tea", model, info, seed=0, **SHORT)
    fresh.buffer = fresh.noise((SHORT["buffer_size"], *x.shape[1:]), x)
    changed = (a.buffer != fresh.buffer).flatten(1).any(dim=1)
    assert 0 < int(changed.sum()) <= 16
    assert fresh.buffer.min() >= -1 and fresh.buffer.max() <= 1


def test_one_step_lowers_the_test_energy_and_predicts_after_it(embedded_model, fmnist_c_images):
    model, info = embedded_model
    x = fmnist_c_images[:32]
    tea = get_method("tea", model, info, **SHORT)
    before = _mean_energy(tea, x)
    forwards = tea.cost.forwards
    out = tea(x)
    assert tea.cost.forwards - forwards == SHORT["sgld_steps"] + 3 and tea.cost.backwards == SHORT["sgld_steps"] + 1
    with torch.no_grad():
        torch.testing.assert_close(out, tea.model(x))  # the authors' classify(x) after the step
    assert _mean_energy(tea, x) < before  # contrastive divergence pulls the test images' energy down
    trainable = [n for n, p in tea.model.named_parameters() if p.requires_grad]
    affine = {f"{layer}.{p}" for layer in info.norm_layers for p in ("weight", "bias")}
    assert set(trainable) == affine  # the BatchNorm affine parameters only


@pytest.mark.parametrize("bad, message", [
    ({"sgld_steps": 0}, "sgld_steps=0 must be >= 1"),
    ({"sgld_lr": 0.0}, "sgld_lr=0.0 must be > 0"),
    ({"sgld_std": -0.1}, "sgld_std=-0.1 must be >= 0"),
    ({"buffer_size": 0}, "buffer_size=0 must be >= 1"),
    ({"reinit_freq": 1.5}, "reinit_freq=1.5 must be in [0, 1]"),
])
def test_out_of_range_values_are_one_line_before_any_cell(embedded_model, bad, message):
    model, info = embedded_model
    with pytest.raises(ValueError, match=message.replace("[", r"\[")):
        get_method("tea", model, info, **bad)
    raw = {"name": "x", "datasets": ["fmnist-c"], "methods": [{"tea": bad}], "settings": ["i111"]}
    with pytest.raises(ConfigError) as err:
        parse_config(raw)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_fmnist_cell(fmnist_cell):
    fmnist_cell("tea", **SHORT)

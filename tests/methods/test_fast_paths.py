"""The fast-path switch (unitta.methods.norm.fast_paths): every method with a hand-written backward or fused
statistics gives the same predictions and the same adapted state with the plain autograd path (CPU)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from tests.methods.fmnist_cnn import grey_shift
from unitta.methods import get_method
from unitta.methods.norm import balanced_bn_layer, iabn, masked_bn, stats
from unitta.methods.norm.fast_paths import fast_paths, fast_paths_set
from unitta.methods.parts.device import DevicePaths

# the methods whose layers have a hand-written backward (IABN: note; Robust BN: robust_bn, rotta; Balanced BN:
# balanced_bn, tribe) or use the fused per-sample statistics (BDN: unitta, bdn; UnMix-TNS: unmixtns, roid)
METHODS = ["note", "robust_bn", "rotta", "balanced_bn", "tribe", "unitta", "bdn", "unmixtns"]


def _run(fmnist_cnn, name: str, fast: bool) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    xs = grey_shift(fmnist_cnn.x[:192], seed=3)
    with fast_paths_set(fast):
        method = get_method(name, fmnist_cnn.model, fmnist_cnn.info)
        logits = torch.cat([method(xs[i : i + 64]).detach() for i in range(0, 192, 64)])
    state = {k: v.detach().clone() for k, v in method.model.state_dict().items() if v.is_floating_point()}
    return logits, state


@pytest.mark.parametrize("name", METHODS)
def test_fast_and_plain_paths_agree(fmnist_cnn, name: str) -> None:
    fast_logits, fast_state = _run(fmnist_cnn, name, True)
    plain_logits, plain_state = _run(fmnist_cnn, name, False)
    # float32 sums in another order: relative differences of a few ulps, grown over three adapted batches
    assert torch.allclose(fast_logits, plain_logits, rtol=1e-3, atol=1e-3), (fast_logits - plain_logits).abs().max()
    assert fast_state.keys() == plain_state.keys()
    for key in fast_state:
        assert torch.allclose(fast_state[key], plain_state[key], rtol=1e-3, atol=1e-4), key


def test_the_environment_switches_them_off() -> None:
    code = "from unitta.methods.norm.fast_paths import fast_paths; print(fast_paths())"
    for value, expected in (("0", "False"), ("1", "True")):
        env = {**os.environ, "UNITTA_FAST_PATHS": value}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert out.stdout.strip() == expected
    assert fast_paths()  # the default


@pytest.mark.parametrize(
    "name, function",
    [
        ("note", iabn._IABNTrain),
        ("rotta", masked_bn.MaskedBatchNormTrain),  # its memory fills over these 3 batches: masked statistics
        ("tribe", balanced_bn_layer._BalancedUpdate),
    ],
)
def test_the_switch_bypasses_each_hand_written_backward(fmnist_cnn, monkeypatch, name: str, function) -> None:
    calls = []
    original = function.apply
    monkeypatch.setattr(function, "apply", lambda *args: calls.append(1) or original(*args))
    _run(fmnist_cnn, name, True)
    used = len(calls)
    _run(fmnist_cnn, name, False)
    assert used > 0 and len(calls) == used  # the plain path never calls it


def test_plain_statistics_are_the_cuda_branch_on_the_cpu() -> None:
    x = torch.randn(4, 3, 5, 5, generator=torch.Generator().manual_seed(0))
    first, second, positions = stats.instance_moments(x, DevicePaths())
    assert positions == 25
    with fast_paths_set(False):
        mean, square, one = stats.instance_moments(x, DevicePaths())
    assert one == 1 and torch.allclose(mean * positions, first, atol=1e-5)
    assert torch.allclose(square * positions, second, atol=1e-4)

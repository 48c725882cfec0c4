"""The same cell on cuda and on cpu gives the same results, up to a few near-tied predictions (needs a GPU)."""

from __future__ import annotations

import math

import pytest
import torch

from unitta.cell import Cell
from unitta.evaluate import evaluate

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.fixture
def strict_fp32():
    """cuDNN may use TF32 for fp32 convolutions by default: switch that off, as the cpu never does it."""
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


@pytest.mark.parametrize("method", ["test", "bn", "unitta"])
def test_cuda_matches_cpu(method, strict_fp32):
    cell = dict(dataset="fmnist-c", method=method, setting="n111", n_per_domain=100, seed=425)
    cpu = evaluate(Cell(**cell, device="cpu"))
    cuda = evaluate(Cell(**cell, device="cuda"))
    assert cuda["device"] != cpu["device"]
    n = cpu["n_samples"]
    assert cuda["n_samples"] == n and cuda["config_hash"] == cpu["config_hash"]
    # Both sum in fp32 but in different orders (relative differences ~1e-6): only predictions whose top
    # two scores are nearly tied can flip. Allow 0.5 % of the stream (at least 2) in total and per domain.
    tolerance = max(2, math.ceil(0.005 * n))
    assert abs(cuda["n_correct"] - cpu["n_correct"]) <= tolerance
    for a, b in zip(cpu["per_domain"], cuda["per_domain"]):
        assert a["key"] == b["key"] and a["n"] == b["n"]
        assert abs(a["error"] - b["error"]) * a["n"] / 100 <= tolerance


# ---------------------------------------------------------------------- hand-written backwards on CUDA
def _source_bn(device: str) -> torch.nn.BatchNorm2d:
    g = torch.Generator().manual_seed(0)
    bn = torch.nn.BatchNorm2d(4).double()
    with torch.no_grad():
        bn.running_mean.copy_(torch.randn(4, generator=g, dtype=torch.double))
        bn.running_var.copy_(0.5 + torch.rand(4, generator=g, dtype=torch.double))
        bn.weight.copy_(1.0 + 0.1 * torch.randn(4, generator=g, dtype=torch.double))
        bn.bias.copy_(0.1 * torch.randn(4, generator=g, dtype=torch.double))
    return bn.to(device)


def _layer(kind: str, device: str):
    from unitta.methods.norm.balanced_bn_layer import BalancedBatchNorm2d
    from unitta.methods.norm.groups import ClassGroups
    from unitta.methods.norm.iabn import InstanceAwareBN
    from unitta.methods.norm.robust_bn_layer import RobustBN

    if kind == "iabn":
        return InstanceAwareBN(_source_bn(device), k=4.0, momentum=0.3).train(), None
    if kind == "robust_bn":
        return RobustBN(_source_bn(device), momentum=0.3).train(), None
    layer = BalancedBatchNorm2d(_source_bn(device), 3, 0.05, 0.1).train()
    labels = torch.tensor([0, 1, 2, 0, 1, 2, 0, 0, 1, 2, 2, 1], device=device)
    return layer, lambda: ClassGroups(labels, 3, 0.05, torch.double)


@pytest.mark.parametrize("kind", ["iabn", "robust_bn", "balanced_bn"])
def test_hand_written_backward_equals_autograd_on_cuda(kind):
    """IABN, Robust BN and Balanced BN: the hand-written backward (fast paths on) against plain autograd (off),
    on CUDA, where the statistics take the fused ``torch.var_mean`` branch (Balanced BN's ``f != 1`` path)."""
    from unitta.methods.norm.fast_paths import fast_paths_set

    g = torch.Generator().manual_seed(5)
    x = (1.0 + 2.0 * torch.randn(12, 4, 5, 5, generator=g, dtype=torch.double)).cuda()
    w = torch.randn(x.shape, generator=g, dtype=torch.double).cuda()
    results = []
    for fast in (True, False):
        layer, groups = _layer(kind, "cuda")
        xs = x.clone().requires_grad_()
        with fast_paths_set(fast):
            if groups is not None:
                layer.label = groups()
            out = layer(xs)
            grads = torch.autograd.grad((out * w).sum(), [xs, layer.weight, layer.bias])
        buffers = [b.detach().clone() for b in layer.buffers() if b.is_floating_point()]
        results.append((out.detach(), grads, buffers))
    (out_a, grads_a, buf_a), (out_b, grads_b, buf_b) = results
    torch.testing.assert_close(out_a, out_b, rtol=1e-9, atol=1e-11)
    for a, b in zip(grads_a, grads_b):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)
    for a, b in zip(buf_a, buf_b):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-11)

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

"""RMT, AdaContrast and GTTA on a model without BatchNorm (GroupNorm + LayerNorm), as the mariodoebler TTA benchmark
runs them: every weight and bias adapts, whatever the normalisation kind."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor, nn

from tests.methods.fmnist_cnn import grey_shift, source_set
from unitta.methods import get_method, method_class
from unitta.models.info import ModelInfo
from unitta.nn.norms import norm_kind

NAMES = ("rmt", "adacontrast", "gtta")
FAST = {"rmt": {"warmup_samples": 32, "source_batch_size": 16}, "adacontrast": {"queue_size": 32, "knn_after": 16}}


class GroupLayerNet(nn.Module):
    """conv-GroupNorm-ReLU x 2, pooled, LayerNorm, linear ``fc`` (random weights from a seeded generator)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.gn1 = nn.GroupNorm(2, 8)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.gn2 = nn.GroupNorm(4, 16)
        self.ln = nn.LayerNorm(16)
        self.fc = nn.Linear(16, 10)
        g = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(p + 0.1 * torch.randn(p.shape, generator=g))

    def forward(self, x: Tensor) -> Tensor:
        x = torch.relu(self.gn1(self.conv1(x)))
        x = torch.relu(self.gn2(self.conv2(x)))
        return self.fc(self.ln(x.mean(dim=(2, 3))))


@pytest.mark.parametrize("name", NAMES)
def test_adapts_every_weight_of_a_group_and_layer_norm_model(name, fmnist_cnn):
    model = GroupLayerNet().eval()
    assert norm_kind(model) == "layer" and {"group", "layer"} <= set(method_class(name).norm_kinds)
    info = ModelInfo(name="gln", dataset="fmnist", classifier="fc", bn_layers=(), bdn_layer="", num_classes=10)
    source = source_set(64) if method_class(name).needs_source else None
    method = get_method(name, model, info, source=source, **FAST.get(name, {}))
    before = {k: p.detach().clone() for k, p in method.model.named_parameters()}
    x = grey_shift(fmnist_cnn.x[:48], seed=6)
    for i in range(3):
        assert torch.isfinite(method(x[16 * i : 16 * (i + 1)])).all()
    changed = {k for k, p in method.model.named_parameters() if not torch.equal(p, before[k])}
    assert any("gn1" in k for k in changed) and any("ln" in k for k in changed) and any("conv1" in k for k in changed)

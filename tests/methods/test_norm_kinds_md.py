"""DeYO, RPL, MEMO, SANTA and CMF on a model without BatchNorm: they adapt LayerNorm/GroupNorm affine parameters,
as the mariodoebler TTA benchmark's ``configure_model``/``collect_params`` do (issue 23; docs/methods.md)."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from unitta.methods import get_method, method_class
from unitta.models.info import ModelInfo


class GroupLayerNet(nn.Module):
    """conv - GroupNorm - ReLU - mean pool - LayerNorm - fc: normalisation of both non-batch kinds."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.gn = nn.GroupNorm(2, 8)
        self.ln = nn.LayerNorm(8)
        self.fc = nn.Linear(8, 10)

    def forward(self, x):
        return self.fc(self.ln(torch.relu(self.gn(self.conv(x))).mean(dim=(2, 3))))


OVERRIDES = {"deyo": {"margin": 2.0, "plpd_threshold": -1.0}, "memo": {"n_augmentations": 2}}


@pytest.mark.parametrize("name", ["deyo", "rpl", "memo", "santa", "cmf"])
def test_adapts_layer_and_group_norm_affine(name):
    assert {"layer", "group"} <= set(method_class(name).norm_kinds)
    g = torch.Generator().manual_seed(0)
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model = GroupLayerNet().eval()
    info = ModelInfo(name="gln", dataset="fmnist", classifier="fc", bn_layers=(), bdn_layer=None, num_classes=10)
    source = TensorDataset(torch.rand(40, 3, 16, 16, generator=g), torch.arange(40) % 10)
    method = get_method(name, model, info, source=source, **OVERRIDES.get(name, {}))
    norms = {
        id(p) for m in (method.model.modules()) if isinstance(m, (nn.GroupNorm, nn.LayerNorm)) for p in m.parameters()
    }
    trained = [p for p in method.optimizer.param_groups[0]["params"] if id(p) in norms]
    assert len(trained) == 4
    before = [p.detach().clone() for p in trained]
    out = method(torch.rand(8, 3, 16, 16, generator=g))
    assert out.shape == (8, 10) and torch.isfinite(out).all()
    assert all(not torch.equal(a, b) for a, b in zip(before, trained))

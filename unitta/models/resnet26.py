"""The GroupNorm ResNet-26 of the mariodoebler TTA benchmark's correlated CIFAR-10-C experiments (docs/models.md).

Architecture as published by mariodoebler/test-time-adaptation (``classification/models/resnet26.py``,
``build_resnet26``), itself TTT's / MEMO's CIFAR ResNet (Sun et al., ICML'20; Zhang et al., NeurIPS'22): a
pre-activation ResNet-(6n+2) with n = 4, widths 16/32/64, GroupNorm with 8 groups in place of BatchNorm,
parameter-free shortcuts that average-pool and zero-pad the channels when the shape changes, a final
norm + ReLU, 8x8 average pooling and a linear classifier ``fc``. Module names follow the published
checkpoint (``conv1, layer1..3.<i>.{bn1, conv1, bn2, conv2}, bn, fc``) so that its ``net`` state_dict loads
as is. Input normalisation is not part of this module (the zoo wraps it with mean = std = 0.5).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

__all__ = ["ResNet26GN", "resnet26_gn"]


def _conv3x3(in_ch: int, out_ch: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_ch, out_ch, 3, stride=stride, padding=1, bias=False)


class PadShortcut(nn.Module):
    """Average-pool by ``stride`` and append zero channels up to ``out_ch`` (no parameters)."""

    def __init__(self, in_ch: int, out_ch: int, stride: int):
        super().__init__()
        if out_ch % in_ch:
            raise ValueError(f"out_ch={out_ch} is not a multiple of in_ch={in_ch}")
        self.pool = nn.AvgPool2d(stride)
        self.extra = out_ch - in_ch

    def forward(self, x: Tensor) -> Tensor:
        x = self.pool(x)
        return torch.cat([x, x.new_zeros(x.shape[0], self.extra, *x.shape[2:])], dim=1)


class PreActBlock(nn.Module):
    """norm-ReLU-conv3x3-norm-ReLU-conv3x3 on the residual branch, plus the (pooled, padded) input."""

    def __init__(self, in_ch: int, out_ch: int, stride: int, groups: int):
        super().__init__()
        self.bn1 = nn.GroupNorm(groups, in_ch)
        self.conv1 = _conv3x3(in_ch, out_ch, stride)
        self.bn2 = nn.GroupNorm(groups, out_ch)
        self.conv2 = _conv3x3(out_ch, out_ch)
        self.relu = nn.ReLU()
        self.downsample = PadShortcut(in_ch, out_ch, stride) if stride != 1 or in_ch != out_ch else None

    def forward(self, x: Tensor) -> Tensor:
        residual = self.conv1(self.relu(self.bn1(x)))
        residual = self.conv2(self.relu(self.bn2(residual)))
        return (x if self.downsample is None else self.downsample(x)) + residual


class ResNet26GN(nn.Module):
    """Pre-activation ResNet-(6n+2) with GroupNorm for 32x32 inputs (module docstring)."""

    def __init__(self, depth: int = 26, num_classes: int = 10, groups: int = 8):
        super().__init__()
        if depth < 8 or (depth - 2) % 6:
            raise ValueError(f"depth={depth}: expected 6n+2 with n >= 1")
        n = (depth - 2) // 6
        self.conv1 = nn.Conv2d(3, 16, 3, padding=1, bias=False)
        stages, in_ch = [], 16
        for stage, out_ch in enumerate((16, 32, 64)):
            blocks = []
            for i in range(n):
                blocks.append(PreActBlock(in_ch, out_ch, 2 if stage and not i else 1, groups))
                in_ch = out_ch
            stages.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3 = stages
        self.bn = nn.GroupNorm(groups, 64)
        self.relu = nn.ReLU()
        self.avgpool = nn.AvgPool2d(8)
        self.fc = nn.Linear(64, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):  # He init with fan-out, as the published model
                nn.init.normal_(m.weight, 0.0, math.sqrt(2.0 / (m.kernel_size[0] * m.kernel_size[1] * m.out_channels)))

    def forward(self, x: Tensor) -> Tensor:
        out = self.layer3(self.layer2(self.layer1(self.conv1(x))))
        return self.fc(torch.flatten(self.avgpool(self.relu(self.bn(out))), 1))


def resnet26_gn(num_classes: int = 10) -> ResNet26GN:
    """ResNet-26 (n = 4) with GroupNorm(8), the mariodoebler benchmark's ``resnet26_gn``."""
    return ResNet26GN(26, num_classes, groups=8)

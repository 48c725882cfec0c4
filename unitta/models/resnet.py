"""The embedded model: a CIFAR-style ResNet-(6n+2) with BatchNorm, for Fashion-MNIST-C.

Architecture of He et al. 2016, section 4.2 (the CIFAR-10 ResNets): a 3x3 stem conv with 16 channels,
three stages of ``n`` BasicBlocks with widths 16/32/64 (stride 2 at the start of stages 2 and 3),
global average pooling and a linear classifier named ``fc``. Shortcuts that change shape use a 1x1
conv + BatchNorm (option B). ResNet-20 is n=3 (He et al., CVPR'16, sec. 4.2).

Input normalisation lives inside the model (like robustbench's models), so every method feeds images
in [0, 1] and the normalisation statistics travel with the checkpoint.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

# Fashion-MNIST training-set pixel mean/std after zero-padding 28 -> 32 (docs/models.md).
FMNIST_MEAN = 0.2860
FMNIST_STD = 0.3530


class Normalize(nn.Module):
    """(x - mean) / std per channel, with mean/std as buffers so they are saved in the state_dict."""

    def __init__(self, mean: tuple[float, ...], std: tuple[float, ...]):
        super().__init__()
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, -1, 1, 1))
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, -1, 1, 1))

    def forward(self, x: Tensor) -> Tensor:
        return (x - self.mean) / self.std


class BasicBlock(nn.Module):
    """conv3x3-BN-ReLU-conv3x3-BN plus shortcut, then ReLU."""

    def __init__(self, in_ch: int, out_ch: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(in_ch, out_ch, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_ch)
        self.conv2 = nn.Conv2d(out_ch, out_ch, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_ch)
        self.relu = nn.ReLU(inplace=True)
        self.shortcut: nn.Module = nn.Identity()
        if stride != 1 or in_ch != out_ch:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_ch, out_ch, 1, stride=stride, bias=False), nn.BatchNorm2d(out_ch)
            )

    def forward(self, x: Tensor) -> Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + self.shortcut(x))


class CifarResNet(nn.Module):
    """ResNet-(6n+2) for 32x32 inputs in [0, 1]; layers ``norm, conv1, bn1, layer1..3, fc``."""

    def __init__(
        self,
        depth: int = 20,
        num_classes: int = 10,
        width: int = 16,
        in_channels: int = 3,
        mean: tuple[float, ...] = (FMNIST_MEAN,) * 3,
        std: tuple[float, ...] = (FMNIST_STD,) * 3,
    ):
        super().__init__()
        if depth < 8 or (depth - 2) % 6 != 0:
            raise ValueError(f"depth={depth}: expected 6n+2 with n >= 1 (8, 14, 20, 32, ...)")
        if num_classes < 2:
            raise ValueError(f"num_classes={num_classes}: expected >= 2")
        if width < 1:
            raise ValueError(f"width={width}: expected >= 1")
        if len(mean) != in_channels or len(std) != in_channels:
            raise ValueError(f"mean/std need {in_channels} entries (in_channels), got {len(mean)}/{len(std)}")
        n = (depth - 2) // 6
        self.norm = Normalize(mean, std)
        self.conv1 = nn.Conv2d(in_channels, width, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        widths = (width, 2 * width, 4 * width)
        in_ch = width
        stages = []
        for stage, out_ch in enumerate(widths):
            blocks = []
            for i in range(n):
                blocks.append(BasicBlock(in_ch, out_ch, stride=2 if (stage > 0 and i == 0) else 1))
                in_ch = out_ch
            stages.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3 = stages
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(in_ch, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x: Tensor) -> Tensor:
        out = self.relu(self.bn1(self.conv1(self.norm(x))))
        out = self.layer3(self.layer2(self.layer1(out)))
        return self.fc(torch.flatten(self.pool(out), 1))


def resnet20(num_classes: int = 10) -> CifarResNet:
    """ResNet-20, width 16 (272k parameters; docs/models.md)."""
    return CifarResNet(depth=20, num_classes=num_classes, width=16)

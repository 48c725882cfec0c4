"""The tiny CNN of ``shared/reference/adapters`` rebuilt from its README, plus loaders for its data.

Architecture (README "Model"): conv1 3->8 (3x3, pad 1, no bias), bn1, ReLU, conv2 8->16 (3x3,
stride 2, pad 1), bn2 (the BDN prediction layer), ReLU, conv3 16->16 (stride 2), bn3, ReLU, global
average pooling, fc 16->5.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from unitta.models.info import ModelInfo

REFERENCE_DIR = Path(__file__).resolve().parents[3] / "shared" / "reference" / "adapters"
if not REFERENCE_DIR.is_dir():  # the checkout may live elsewhere; /work/shared is the canonical place
    REFERENCE_DIR = Path("/work/shared/reference/adapters")

BATCH_SIZE = 64  # README: 30 batches of 64


class TinyReferenceNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, stride=2, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(16)
        self.conv3 = nn.Conv2d(16, 16, 3, stride=2, padding=1, bias=False)
        self.bn3 = nn.BatchNorm2d(16)
        self.fc = nn.Linear(16, 5)

    def forward(self, x: Tensor) -> Tensor:
        x = torch.relu(self.bn1(self.conv1(x)))
        x = torch.relu(self.bn2(self.conv2(x)))
        x = torch.relu(self.bn3(self.conv3(x)))
        return self.fc(x.mean(dim=(2, 3)))


def reference_available() -> bool:
    return (REFERENCE_DIR / "model_weights.npz").is_file()


def load_reference_model() -> tuple[nn.Module, ModelInfo]:
    weights = np.load(REFERENCE_DIR / "model_weights.npz")
    model = TinyReferenceNet()
    state = {key: torch.from_numpy(np.array(weights[key])) for key in weights.files}
    model.load_state_dict(state)
    model.eval()
    info = ModelInfo(
        name="tiny-reference",
        dataset="cifar10",
        classifier="fc",
        bn_layers=("bn1", "bn2", "bn3"),
        bdn_layer="bn2",
        num_classes=5,
        input_size=16,
    )
    return model, info


def load_stream() -> dict[str, np.ndarray]:
    data = np.load(REFERENCE_DIR / "stream.npz")
    return {key: data[key] for key in data.files}


def load_outputs(method: str) -> dict[str, np.ndarray]:
    data = np.load(REFERENCE_DIR / f"outputs_{method}.npz")
    return {key: data[key] for key in data.files}

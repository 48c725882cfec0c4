"""The dataset type shared by the stream samplers, the evaluation loop and the methods."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np
import torch

__all__ = ["CorruptedDataset", "float_images"]


def float_images(batch: torch.Tensor) -> torch.Tensor:
    """uint8 images (B, H, W, 3) as contiguous float32 (B, 3, H, W) in [0, 1] (x / 255 is exact IEEE division), on
    the device they are on."""
    return batch.permute(0, 3, 1, 2).float().div_(255.0).contiguous()

@dataclass
class CorruptedDataset(ABC):
    """A multi-domain test set: one domain per (corruption, severity), items in domain-major order.

    labels, domains: int64 arrays over all items (dataset order, domain-major like the reference).
    domain_names: one name per domain id, e.g. 'motion_blur_5'.
    """

    name: str
    labels: np.ndarray
    domains: np.ndarray
    domain_names: list[str]
    num_classes: int
    meta: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def num_domains(self) -> int:
        return len(self.domain_names)

    @abstractmethod
    def get_batch(self, indices: np.ndarray) -> torch.Tensor:
        """Images at ``indices`` as a float32 tensor (B, C, H, W) with values in [0, 1]."""

"""Batches of labelled source images for the methods that need them (EATA, RMT, SANTA, GTTA).

``SourceBatches(dataset, batch_size, generator, device)`` yields (images, labels) forever, in a fresh
random order per pass drawn from the method's own ``torch.Generator`` (so ``reset()`` replays it exactly).
A source held as arrays (``unitta.data.source.ArraySource``: uint8 images, int64 labels) or as a
``TensorDataset`` of at most ``DEVICE_SOURCE_BYTES`` goes to the device once, on the first batch, with each
pass's order: a batch is then one gather on the device, no tensor made from host data per batch (docs/benchmarks.md
"Device paths"), the same values as ``take_batch``. Any other source, or a larger one, is
gathered on the host by ``unitta.data.source.take_batch`` and copied per batch.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset, TensorDataset

from unitta.data.base import float_images
from unitta.data.source import ArraySource, take_batch

__all__ = ["DEVICE_SOURCE_BYTES", "SourceBatches"]

DEVICE_SOURCE_BYTES = 2 << 30  # a source up to 2 GiB (Fashion-MNIST's 184 MB, CIFAR's 154 MB) lives on the device


class SourceBatches:
    """An endless iterator of shuffled source batches (each pass a new permutation; the last partial batch kept)."""

    def __init__(self, dataset: Dataset, batch_size: int, generator: torch.Generator, device: torch.device):
        if len(dataset) == 0:
            raise ValueError("source dataset is empty")
        self.dataset = dataset
        self.batch_size = batch_size
        self.generator = generator
        self.device = device
        self._order = torch.empty(0, dtype=torch.int64)
        self._position = 0
        self._on_device: tuple[Tensor, Tensor, bool] | None = None  # images, labels, whether uint8 (N, H, W, 3)
        self._resident = _size(dataset) <= DEVICE_SOURCE_BYTES

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        return self

    def __next__(self) -> tuple[Tensor, Tensor]:
        if self._position >= len(self._order):
            self._order = torch.randperm(len(self.dataset), generator=self.generator)
            if self._resident:
                self._order = self._order.to(self.device, non_blocking=True)  # once per pass
            self._position = 0
        indices = self._order[self._position : self._position + self.batch_size]
        self._position += len(indices)
        if self._resident:
            return self._gather(indices)
        images, labels = take_batch(self.dataset, indices)
        return images.to(self.device, non_blocking=True), labels.to(self.device, non_blocking=True)

    def _gather(self, indices: Tensor) -> tuple[Tensor, Tensor]:
        """``take_batch``'s values, gathered on the device (the source copied there on the first call)."""
        if self._on_device is None:
            if isinstance(self.dataset, ArraySource):
                images, labels, raw = torch.from_numpy(self.dataset.images), torch.from_numpy(self.dataset.labels), True
            else:
                assert isinstance(self.dataset, TensorDataset)
                images, labels, raw = self.dataset.tensors[0].float(), self.dataset.tensors[1].long(), False
            self._on_device = (images.to(self.device), labels.to(self.device), raw)
        images, labels, raw = self._on_device
        batch = images.index_select(0, indices)
        if raw:  # ArraySource.get_batch: (B, H, W, 3) uint8 -> (B, 3, H, W) float32 in [0, 1]
            batch = float_images(batch)
        return batch, labels.index_select(0, indices)


def _size(dataset: Dataset) -> float:
    """Bytes of a source that can live on the device; infinite for any other kind."""
    if isinstance(dataset, ArraySource):
        return dataset.images.nbytes + dataset.labels.nbytes
    if isinstance(dataset, TensorDataset) and len(dataset.tensors) >= 2:
        return sum(t.numel() * 4 if t.is_floating_point() else t.numel() * 8 for t in dataset.tensors[:2])
    return np.inf

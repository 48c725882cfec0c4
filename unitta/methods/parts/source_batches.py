"""Batches of labelled source images for the methods that need them (EATA, RMT, SANTA, GTTA).

``SourceBatches(dataset, batch_size, generator, device)`` yields (images, labels) forever, in a fresh
random order per pass drawn from the method's own ``torch.Generator`` (so ``reset()`` replays it exactly).
Each batch is gathered by ``unitta.data.source.take_batch``.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor
from torch.utils.data import Dataset

from unitta.data.source import take_batch

__all__ = ["SourceBatches"]


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

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        return self

    def __next__(self) -> tuple[Tensor, Tensor]:
        if self._position >= len(self._order):
            self._order = torch.randperm(len(self.dataset), generator=self.generator)
            self._position = 0
        indices = self._order[self._position : self._position + self.batch_size]
        self._position += len(indices)
        images, labels = take_batch(self.dataset, indices)
        return images.to(self.device, non_blocking=True), labels.to(self.device, non_blocking=True)

"""In-memory datasets: every image of every domain in one uint8 NHWC array (CIFAR-sized sets).

One contiguous array makes ``get_batch`` a single fancy-indexing gather plus one conversion, and it
pickles as one buffer, so Ray's object store holds it zero-copy, once per node (README, "What is inside").
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from unitta.data.base import CorruptedDataset


@dataclass
class ArrayDataset(CorruptedDataset):
    """A multi-domain dataset whose images live in ``images``: uint8 (N, H, W, 3), item order."""

    images: np.ndarray = field(kw_only=True, repr=False)

    def __post_init__(self) -> None:
        if self.images.dtype != np.uint8 or self.images.ndim != 4 or self.images.shape[-1] != 3:
            raise ValueError(f"images: expected uint8 (N, H, W, 3), got {self.images.dtype} {self.images.shape}")
        if not (len(self.images) == len(self.labels) == len(self.domains)):
            raise ValueError(
                f"images, labels, domains: lengths differ ({len(self.images)}, {len(self.labels)}, {len(self.domains)})"
            )

    def get_batch_uint8(self, indices: np.ndarray) -> np.ndarray:
        """Images at ``indices`` as stored: uint8 (B, H, W, 3) (a GPU converts them itself: 4x fewer bytes)."""
        return self.images[np.asarray(indices, dtype=np.int64)]

    def get_batch(self, indices: np.ndarray) -> torch.Tensor:
        """Images at ``indices`` as float32 (B, 3, H, W) in [0, 1] (contiguous NCHW)."""
        batch = torch.from_numpy(self.images[np.asarray(indices, dtype=np.int64)])  # (B, H, W, 3) copy
        out = torch.empty((batch.shape[0], 3, batch.shape[1], batch.shape[2]), dtype=torch.float32)
        out.copy_(batch.permute(0, 3, 1, 2))
        return out.div_(255.0)


def balanced_subset(labels: np.ndarray, n: int, num_classes: int) -> np.ndarray:
    """Positions of the first ``n / num_classes`` items of each class, in the original order.

    The class-balanced ``n_per_domain`` subset of ``load_dataset``: the same positions are taken
    from every domain, so the subset keeps the domain-major layout and the same images everywhere.
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n <= 0 or n % num_classes:
        raise ValueError(f"n_per_domain={n!r}: expected a positive multiple of the number of classes ({num_classes})")
    per_class = n // num_classes
    labels = np.asarray(labels)
    counts = np.bincount(labels, minlength=num_classes)
    if counts.min() < per_class:
        raise ValueError(
            f"n_per_domain={n}: needs {per_class} images of every class, but class {int(counts.argmin())} "
            f"has {int(counts.min())}; the largest balanced subset is {int(counts.min()) * num_classes}"
        )
    order = np.argsort(labels, kind="stable")
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    rank = np.empty(len(labels), dtype=np.int64)
    rank[order] = np.arange(len(labels)) - np.repeat(starts, counts)
    return np.flatnonzero(rank < per_class)


def domain_major(per_domain_labels: np.ndarray, num_domains: int) -> tuple[np.ndarray, np.ndarray]:
    """(labels, domains) over items for ``num_domains`` domains holding the same labelled images."""
    n = len(per_domain_labels)
    labels = np.tile(np.asarray(per_domain_labels, dtype=np.int64), num_domains)
    domains = np.repeat(np.arange(num_domains, dtype=np.int64), n)
    return labels, domains

"""Corrupted test sets: CIFAR-10-C, CIFAR-100-C, ImageNet-C and the embedded Fashion-MNIST-C.

``load_dataset`` is the one front door (README, "What is inside"); the result is a ``CorruptedDataset``
whose items are domain-major (item i = d * N + j), one domain per (corruption, severity).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from unitta.data.records import (
    ALL_CORRUPTIONS,
    CORRUPTIONS,
    DATASETS,
    FOLDER_LOADERS,
    HELD_OUT_CORRUPTIONS,
    NATURAL_LOADERS,
    RECORDS,
    DatasetRecord,
    dataset_record,
)

if TYPE_CHECKING:
    from unitta.data.base import CorruptedDataset

__all__ = [
    "ALL_CORRUPTIONS",
    "ArrayDataset",
    "CORRUPTIONS",
    "CorruptedDataset",
    "DATASETS",
    "RECORDS",
    "DatasetRecord",
    "HELD_OUT_CORRUPTIONS",
    "dataset_record",
    "default_data_dir",
    "load_dataset",
    "load_source",
    "prepare_fmnist_c",
]

# torch-backed names load on first use, so that the records (and unitta.cell) import without torch
_LAZY = {
    "ArrayDataset": "unitta.data.arrays",
    "CorruptedDataset": "unitta.data.base",
    "prepare_fmnist_c": "unitta.data.fmnist_c",
    "load_source": "unitta.data.source",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def default_data_dir() -> Path:
    """``$UNITTA_DATA``, else ``~/.cache/unitta``."""
    return Path(os.environ.get("UNITTA_DATA") or Path.home() / ".cache" / "unitta")


def _severities(severity: int | Sequence[int]) -> list[int]:
    try:
        values = [severity] if isinstance(severity, (int, np.integer)) else list(severity)
    except TypeError:
        values = []
    valid = all(not isinstance(s, bool) and s in (1, 2, 3, 4, 5) for s in values)
    if not values or not valid or len(set(values)) < len(values):
        raise ValueError(f"severity={severity!r}: expected an integer in 1..5 or a list of distinct ones")
    return [int(s) for s in values]


def _corruptions(corruptions: Sequence[str] | None) -> list[str]:
    if corruptions is None:
        return list(CORRUPTIONS)
    values = [corruptions] if isinstance(corruptions, str) else list(corruptions)
    unknown = [c for c in values if c not in ALL_CORRUPTIONS]
    if not values or unknown or len(set(values)) < len(values):
        raise ValueError(
            f"corruptions={corruptions!r}: expected distinct names among the 15 test corruptions "
            f"({', '.join(CORRUPTIONS)}) and the held-out ones ({', '.join(HELD_OUT_CORRUPTIONS)})"
            + (f" (unknown: {', '.join(map(str, unknown))})" if unknown else "")
        )
    return values


def load_dataset(
    name: str,
    data_dir: str | Path | None = None,
    severity: int | Sequence[int] = 5,
    corruptions: Sequence[str] | None = None,
    n_per_domain: int | None = None,
    *,
    image_size: int | None = None,
    domains: Sequence[str] | None = None,
    classes: Sequence[str] | None = None,
    num_workers: int | None = None,
    members: Sequence[str] | None = None,
) -> CorruptedDataset:
    """A corrupted test set, one domain per (corruption, severity), corruption-major.

    name: 'fmnist-c' | 'cifar10-c' | 'cifar100-c' | 'imagenet-c'.
    data_dir: folder holding ``CIFAR-10-C/``, ``CIFAR-100-C/``, ``ImageNet-C/`` (robustbench's layout),
        and for fmnist-c the cache root holding ``FashionMNIST-C/``; default ``$UNITTA_DATA``, else
        ``~/.cache/unitta``. Nothing is downloaded; fmnist-c is prepared on first use.
    severity: 1..5 or a list of them (default 5, the paper's setting).
    corruptions: a subset / order of ``CORRUPTIONS`` (default: all 15 in the reference order, the reference's
        dataset config), or of ``HELD_OUT_CORRUPTIONS`` (Hendrycks' four validation corruptions, e.g.
        ``corruptions=HELD_OUT_CORRUPTIONS`` for a held-out validation set); domain id = position in this list
        (x severities).
    n_per_domain: a class-balanced subset, the first n/K images of each class in test-set order,
        the same images in every domain (tests, debugging). Must be a multiple of the class count.
    image_size, domains, classes, num_workers: for an image folder (``name='folder'``, ``data_dir`` its root)
        and the natural-shift sets (``unitta.data.natural``): the model's input side (images are resized and
        centre-cropped to it when decoded), the domain / class folders to use (default: all, sorted), the
        decoding threads. members: with ``name='mixture'``, the natural-shift sets whose domains form the pool
        (``unitta.data.mixture``).
    """
    if name not in DATASETS:
        raise ValueError(f"name={name!r}: expected one of {', '.join(DATASETS)}")
    record = RECORDS[name]
    severities = _severities(severity)
    chosen = _corruptions(corruptions)
    if n_per_domain is not None:
        if isinstance(n_per_domain, bool) or not isinstance(n_per_domain, (int, np.integer)) or n_per_domain <= 0:
            raise ValueError(f"n_per_domain={n_per_domain!r}: expected None or a positive integer")
        n_per_domain = int(n_per_domain)
    if record.loader in {*FOLDER_LOADERS, *NATURAL_LOADERS}:
        return _load_natural(record, data_dir, n_per_domain, image_size, domains, classes, num_workers, members)
    if record.loader == "fmnist":
        from unitta.data.fmnist_c import load_fmnist_c

        return load_fmnist_c(data_dir, severities, chosen, n_per_domain)
    root = default_data_dir() if data_dir is None else Path(data_dir)
    if record.loader == "imagenet":
        from unitta.data.imagenet_c import load_imagenet_c

        return load_imagenet_c(root, severities, chosen, n_per_domain)
    from unitta.data.cifar_c import load_cifar_c

    return load_cifar_c(name, root, severities, chosen, n_per_domain)


def _load_natural(
    record: DatasetRecord,
    data_dir: str | Path | None,
    n_per_domain: int | None,
    image_size: int | None,
    domains: Sequence[str] | None,
    classes: Sequence[str] | None,
    num_workers: int | None,
    members: Sequence[str] | None,
) -> CorruptedDataset:
    from unitta.data.folder import load_folder
    from unitta.data.mixture import index_any
    from unitta.data.natural import data_root, load_cifar101

    if record.loader == "cifar101":
        return load_cifar101(data_root(record, data_dir, default_data_dir()), n_per_domain)
    index = index_any(record.name, data_dir, default_data_dir(), domains, classes, members)
    size = image_size or record.image_shape[1] or 224
    return load_folder(index, record.name, n_per_domain, size, num_workers)

"""CIFAR-10-C / CIFAR-100-C from robustbench's layout: ``<data_dir>/CIFAR-10-C/<corruption>.npy``.

Each ``<corruption>.npy`` is uint8 (50000, 32, 32, 3): severities 1..5 stacked, 10,000 rows each
(severity s = rows (s-1)*10000 : s*10000); ``labels.npy`` holds the labels (the same 10,000 per
severity). The reader is shared with the Fashion-MNIST-C cache, which uses the same layout.
Nothing is ever downloaded: a missing or short file is an error that says what to fetch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from unitta.data.arrays import ArrayDataset, balanced_subset, domain_major

ROWS_PER_SEVERITY = 10_000  # CIFAR-10-C / CIFAR-100-C: one test set (10,000 images) per severity
IMAGE_SHAPE = (32, 32, 3)

# name -> (folder, classes, where to get it)
SOURCES = {
    "cifar10-c": ("CIFAR-10-C", 10, "https://zenodo.org/record/2535967 (CIFAR-10-C.tar)"),
    "cifar100-c": ("CIFAR-100-C", 100, "https://zenodo.org/record/3555552 (CIFAR-100-C.tar)"),
}


def read_npy_domains(
    folder: Path,
    name: str,
    corruptions: Sequence[str],
    severities: Sequence[int],
    rows_per_slot: int,
    slot_of: Callable[[str, int], int],
    num_classes: int,
    n_per_domain: int | None,
    hint: str,
) -> ArrayDataset:
    """Read domains (corruption, severity), corruption-major, from ``<folder>/<corruption>.npy``.

    slot_of(corruption, severity): which block of ``rows_per_slot`` rows holds that severity.
    hint: where to get the data, appended to every error message.
    """
    labels_path = folder / "labels.npy"
    if not labels_path.is_file():
        raise FileNotFoundError(f"{labels_path} not found (expected int labels, >= {rows_per_slot} rows). {hint}")
    all_labels = np.load(labels_path, mmap_mode="r")
    if all_labels.ndim != 1 or len(all_labels) < rows_per_slot:
        raise ValueError(
            f"{labels_path}: shape {all_labels.shape}, expected ({rows_per_slot},) or more rows "
            f"(the file is short or not a label file). {hint}"
        )
    labels = np.asarray(all_labels[:rows_per_slot], dtype=np.int64)
    if labels.min() < 0 or labels.max() >= num_classes:
        raise ValueError(f"{labels_path}: labels span {labels.min()}..{labels.max()}, expected 0..{num_classes - 1}")
    positions = None if n_per_domain is None else balanced_subset(labels, n_per_domain, num_classes)
    n = rows_per_slot if positions is None else len(positions)

    domain_keys = [(c, s) for c in corruptions for s in severities]
    images = np.empty((len(domain_keys) * n,) + IMAGE_SHAPE, dtype=np.uint8)
    for d, (corruption, severity) in enumerate(domain_keys):
        path = folder / f"{corruption}.npy"
        slot = slot_of(corruption, severity)
        needed = (slot + 1) * rows_per_slot
        expected = f"uint8 ({needed} or more, {', '.join(map(str, IMAGE_SHAPE))})"
        if not path.is_file():
            raise FileNotFoundError(f"{path} not found (expected {expected}). {hint}")
        try:
            array = np.load(path, mmap_mode="r")
        except ValueError as err:  # truncated header or data
            raise ValueError(f"{path}: unreadable .npy ({err}); expected {expected}. {hint}") from err
        if array.dtype != np.uint8 or array.shape[1:] != IMAGE_SHAPE or len(array) < needed:
            raise ValueError(
                f"{path}: {array.dtype} {array.shape}, expected {expected} to read severity {severity} "
                f"(rows {slot * rows_per_slot}:{needed}); the file is short or of another dataset. {hint}"
            )
        block = array[slot * rows_per_slot : needed]
        images[d * n : (d + 1) * n] = block if positions is None else block[positions]
    item_labels, domains = domain_major(labels if positions is None else labels[positions], len(domain_keys))
    return ArrayDataset(
        name=name,
        labels=item_labels,
        domains=domains,
        domain_names=[f"{c}_{s}" for c, s in domain_keys],
        num_classes=num_classes,
        meta={"folder": str(folder), "n_per_domain": n},
        images=images,
    )


def load_cifar_c(
    name: str,
    data_dir: Path,
    severities: Sequence[int],
    corruptions: Sequence[str],
    n_per_domain: int | None,
) -> ArrayDataset:
    """CIFAR-10-C (``name='cifar10-c'``) or CIFAR-100-C from ``<data_dir>/<CIFAR-xx-C>/``."""
    folder_name, num_classes, source = SOURCES[name]
    folder = Path(data_dir) / folder_name
    hint = (
        f"{name} needs {folder}/<corruption>.npy (uint8 50000 x 32 x 32 x 3, severities 1-5 stacked) and "
        f"labels.npy. Get {source} and extract it into {Path(data_dir)} (unitta never downloads data; the archive "
        "also holds the held-out corruptions speckle_noise, gaussian_blur, spatter, saturate)."
    )
    if not folder.is_dir():
        raise FileNotFoundError(f"{folder} not found. {hint}")
    return read_npy_domains(
        folder, name, corruptions, severities, ROWS_PER_SEVERITY, lambda c, s: s - 1, num_classes, n_per_domain, hint
    )

"""Labelled source (training) images: what EATA's Fisher, RMT's warm-up and replay, SANTA and GTTA need.

``load_source(dataset)`` returns the split the dataset's default model was trained on, as a
``torch.utils.data.Dataset`` of (image float32 (3, H, W) in [0, 1], label int) pairs:
- fmnist-c: Fashion-MNIST's 60,000 training images (Debian package ``dataset-fashion-mnist``, no download),
  zero-padded to 32x32 and grey in 3 channels exactly like the test images of Fashion-MNIST-C;
- cifar10-c / cifar100-c: CIFAR-10/100's training set from ``<data_dir>/cifar-10-batches-py`` /
  ``cifar-100-python`` (torchvision's layout, read by ``torchvision.datasets.CIFAR10/100`` without download);
- imagenet-c: an ImageNet training subset from ``<data_dir>/ImageNet/train/<wnid>/*.JPEG`` (torchvision's
  ``ImageFolder`` layout), resized to 256 and centre-cropped to 224 like the test images.
Methods get it through ``get_method(..., source=...)``; any Dataset of (image, label) pairs works, a
``TensorDataset`` included (docs/methods.md, "Source data").
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset, TensorDataset, default_collate

from unitta.data.records import RECORDS

__all__ = ["ArraySource", "load_clean_test", "load_source", "source_problem", "take_batch", "SOURCE_DATASETS"]

# dataset -> what its source split is (for messages and docs)
SOURCE_DATASETS = {name: record.source_split for name, record in RECORDS.items()}


def take_batch(dataset: Dataset, indices: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The items at ``indices`` of a source split (or any Dataset of (image, label) pairs) as one (images, labels)
    batch on the CPU: ``get_batch`` (``ArraySource``) gathers them in one call, a ``TensorDataset`` one gather per
    tensor, any other Dataset item by item."""
    if hasattr(dataset, "get_batch"):
        images, labels = dataset.get_batch(indices.numpy())
    elif isinstance(dataset, TensorDataset):
        images, labels = (tensor[indices] for tensor in dataset.tensors[:2])
    else:
        images, labels = default_collate([dataset[int(i)] for i in indices])
    return torch.as_tensor(images, dtype=torch.float32), torch.as_tensor(labels, dtype=torch.int64)


class ArraySource(Dataset):
    """Source images held as one uint8 (N, H, W, 3) array with int64 labels; ``get_batch`` gathers many at once."""

    def __init__(self, images: np.ndarray, labels: np.ndarray):
        if images.dtype != np.uint8 or images.ndim != 4 or images.shape[-1] != 3:
            raise ValueError(f"images: expected uint8 (N, H, W, 3), got {images.dtype} {images.shape}")
        if len(images) != len(labels):
            raise ValueError(f"images, labels: lengths differ ({len(images)}, {len(labels)})")
        self.images = images
        self.labels = np.asarray(labels, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        image = torch.from_numpy(self.images[index]).permute(2, 0, 1).float().div_(255.0)
        return image, int(self.labels[index])

    def get_batch(self, indices: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """Images (B, 3, H, W) float32 in [0, 1] and labels (B,) int64 at ``indices``."""
        indices = np.asarray(indices, dtype=np.int64)
        images = torch.from_numpy(self.images[indices]).permute(0, 3, 1, 2).float().div_(255.0)
        return images.contiguous(), torch.from_numpy(self.labels[indices])


def _fmnist_train() -> ArraySource:
    from unitta.data.fashion_mnist import read_fashion_mnist

    images, labels = read_fashion_mnist("train")
    padded = np.zeros((len(images), 32, 32, 3), dtype=np.uint8)
    padded[:, 2:30, 2:30, :] = images[:, :, :, None]  # the same padding as the test set (fmnist_c.padded_test_set)
    return ArraySource(padded, labels)


def _cifar_split(dataset: str, root: Path, train: bool) -> ArraySource:
    """CIFAR-10/100's training (source) or test (clean held-out) split from torchvision's layout under ``root``."""
    from torchvision.datasets import CIFAR10, CIFAR100

    cls, folder = (CIFAR10, "cifar-10-batches-py") if dataset == "cifar10-c" else (CIFAR100, "cifar-100-python")
    if not (root / folder).is_dir():
        what = "source data" if train else "clean test images"
        raise FileNotFoundError(
            f"{what} for {dataset} not found: expected {root / folder} (torchvision's layout; "
            f"`torchvision.datasets.{cls.__name__}('{root}', train={train}, download=True)` on a machine with "
            "internet, then copy it)"
        )
    split = cls(str(root), train=train, download=False)
    return ArraySource(np.ascontiguousarray(split.data), np.asarray(split.targets))


class _ImageFolderSource(Dataset):
    """An ImageNet training subset in ImageFolder layout, decoded on demand (resize 256, centre crop 224)."""

    def __init__(self, folder: Path):
        from torchvision import transforms
        from torchvision.datasets import ImageFolder

        preprocess = transforms.Compose(
            [transforms.Resize(256), transforms.CenterCrop(224), transforms.ToTensor()]
        )
        self.inner = ImageFolder(str(folder), transform=preprocess)

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.inner[index]


def source_problem(dataset: str, data_dir: str | Path | None = None) -> str | None:
    """Why ``load_source(dataset, data_dir)`` would fail for want of files, in one line, or None; reads nothing.

    For preflight and ``--dry-run`` (docs/results.md, "Before the first cell"): only checks that the files
    or folders are there.
    """
    from unitta.data import default_data_dir
    from unitta.data.fashion_mnist import find_split, not_found_message

    if dataset not in SOURCE_DATASETS:
        return f"{dataset}: no source split is known; methods that need source data run on {', '.join(SOURCE_DATASETS)}"
    if dataset == "fmnist-c":
        if find_split("train") is None:
            return f"source data for fmnist-c (the Fashion-MNIST train files): {not_found_message()}"
        return None
    root = default_data_dir() if data_dir is None else Path(data_dir)
    folder = root / _SOURCE_FOLDERS[dataset]
    if not folder.is_dir():
        return (f"source data for {dataset} not found: expected {folder} ({SOURCE_DATASETS[dataset]}); "
                "put it there or set data_dir")
    return None


# dataset -> the folder under data_dir that holds its source split (torchvision's layouts)
_SOURCE_FOLDERS = {"cifar10-c": "cifar-10-batches-py", "cifar100-c": "cifar-100-python", "imagenet-c": "ImageNet/train"}


def load_source(dataset: str, data_dir: str | Path | None = None) -> Dataset:
    """The labelled source split of ``dataset`` (module docstring); a missing one is a clear error."""
    from unitta.data import default_data_dir

    if dataset not in SOURCE_DATASETS:
        raise ValueError(f"dataset={dataset!r} has no source split; known: {', '.join(SOURCE_DATASETS)}")
    if dataset == "fmnist-c":
        return _fmnist_train()
    root = default_data_dir() if data_dir is None else Path(data_dir)
    if dataset == "imagenet-c":
        folder = root / "ImageNet" / "train"
        if not folder.is_dir():
            raise FileNotFoundError(
                f"source data for imagenet-c not found: expected {folder}/<wnid>/*.JPEG (an ImageNet train subset)"
            )
        return _ImageFolderSource(folder)
    return _cifar_split(dataset, root, train=True)


def clean_test_problem(dataset: str, data_dir: str | Path | None = None) -> str | None:
    """Why ``load_clean_test`` (the forgetting check's images) would fail for want of files, in one line, or None;
    reads nothing (preflight and ``--dry-run``)."""
    from unitta.data import default_data_dir
    from unitta.data.fashion_mnist import find_split, not_found_message

    if dataset not in SOURCE_DATASETS:
        return f"forgetting: {dataset} has no clean test split; known: {', '.join(SOURCE_DATASETS)}"
    if dataset == "fmnist-c":
        return None if find_split("test") else f"forgetting: the Fashion-MNIST test files: {not_found_message()}"
    root = default_data_dir() if data_dir is None else Path(data_dir)
    folder = root / ("ImageNet/val" if dataset == "imagenet-c" else _SOURCE_FOLDERS[dataset])
    if not folder.is_dir():
        return f"forgetting: the clean test images of {dataset} are not at {folder}; put them there or set data_dir"
    return None


def load_clean_test(dataset: str, data_dir: str | Path | None = None, n: int | None = None) -> Dataset:
    """Held-out clean images of the source distribution (the test split the model was not trained on), for the
    forgetting check (docs/results.md, "Forgetting"): Fashion-MNIST test (padded like the corrupted set),
    CIFAR-10/100 test (``<data_dir>/cifar-10-batches-py`` / ``cifar-100-python``), an ImageNet validation subset
    (``<data_dir>/ImageNet/val/<wnid>/*.JPEG``). ``n``: a class-balanced subset of n images (the first n/K of
    each class, as ``load_dataset``'s ``n_per_domain``)."""
    from unitta.data import default_data_dir
    from unitta.data.arrays import balanced_subset

    if dataset not in SOURCE_DATASETS:
        raise ValueError(f"dataset={dataset!r} has no clean test split; known: {', '.join(SOURCE_DATASETS)}")
    root = default_data_dir() if data_dir is None else Path(data_dir)
    if dataset == "imagenet-c":
        folder = root / "ImageNet" / "val"
        if not folder.is_dir():
            raise FileNotFoundError(f"clean ImageNet validation images not found: expected {folder}/<wnid>/*.JPEG")
        clean: Dataset = _ImageFolderSource(folder)
        if n is not None:
            clean = torch.utils.data.Subset(clean, range(min(n, len(clean))))
        return clean
    if dataset == "fmnist-c":
        from unitta.data.fmnist_c import padded_test_set

        images, labels = padded_test_set()
        test = ArraySource(images, labels)
    else:
        test = _cifar_split(dataset, root, train=False)
    if n is None:
        return test
    keep = balanced_subset(test.labels, n, int(test.labels.max()) + 1)
    return ArraySource(test.images[keep], test.labels[keep])

"""The natural-shift datasets and image folders behind their records (``unitta.data.records``; docs/own_data.md).

ImageNet-R, -A, -Sketch, -V2 and CIFAR-10.1 are one domain each; ImageNet-D109 and DomainNet-126 are domains of
DomainNet; ``folder`` is any ``ROOT/<domain>/<class>/<image>`` tree. All but CIFAR-10.1 (two ``.npy`` files, held
in memory like CIFAR-10-C) are image folders read lazily through ``unitta.data.folder``. The 200-class output masks
of ImageNet-R and -A are read from the lists timm ships (``timm/data/_info/imagenet_{r,a}_synsets.txt`` against
``imagenet_synsets.txt``, ImageNet's 1000 wnids in class-index order); nothing here downloads.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from pathlib import Path

import numpy as np

from unitta.data.folder import FolderIndex, FolderProblem, index_folder
from unitta.data.records import RECORDS, DatasetRecord

__all__ = ["CIFAR101_FILES", "data_root", "fetch_steps", "imagenet_outputs", "imagenet_wnids", "index_dataset",
           "load_cifar101",
           "natural_problem", "output_mask"]

CIFAR101_FILES = ("cifar10.1_v6_data.npy", "cifar10.1_v6_labels.npy")  # the v6 release (Recht et al. 2018)


def data_root(record: DatasetRecord, data_dir: str | Path | None, default_dir: Path) -> Path:
    """Where ``record``'s files are: ``data_dir`` itself for a folder, else ``<data_dir>/<record.folder>``."""
    if record.loader == "folder":
        if not data_dir:
            raise FileNotFoundError("folder: set data_dir: ROOT, a folder laid out ROOT/<domain>/<class>/<image> "
                                    "(docs/own_data.md)")
        return Path(data_dir)
    assert record.folder is not None
    return (Path(data_dir) if data_dir else default_dir) / record.folder


def fetch_steps(record: DatasetRecord, data_dir: str | Path | None, default_dir: Path) -> str:
    """How to get ``record``'s files into place, one line."""
    where = data_root(record, data_dir, default_dir)
    if record.loader == "cifar101":
        return f"run `unitta data fetch {record.name} --dir {where.parent}` (downloads {', '.join(CIFAR101_FILES)})"
    if record.fetch.startswith("https://"):
        return f"download {record.fetch} and extract it as {where} ({record.layout})"
    return f"{record.fetch}; lay it out as {where.parent}/{record.layout}"


def natural_problem(record: DatasetRecord, data_dir: str | Path | None, default_dir: Path) -> str | None:
    """One line if ``record``'s files are missing or unusable (cheap: names only), else None."""
    try:
        root = data_root(record, data_dir, default_dir)
    except FileNotFoundError as err:
        return str(err)
    if record.loader == "cifar101":
        missing = [name for name in CIFAR101_FILES if not (root / name).is_file()]
        if missing:
            return f"{record.name}: {root / missing[0]} not found; {fetch_steps(record, data_dir, default_dir)}"
        return None
    if not root.is_dir():
        return f"{record.name}: {root} not found; {fetch_steps(record, data_dir, default_dir)}, or set data_dir"
    if record.loader == "folder":
        return None  # a folder's index problems are checked per cell (its domains / classes lists)
    try:
        problems = index_dataset(record.name, data_dir, default_dir).problems
    except (FolderProblem, FileNotFoundError) as err:
        return f"{record.name}: {err}"
    return f"{record.name}: {problems[0]}" if problems else None


def _classes(record: DatasetRecord) -> list[str] | None:
    if record.name == "imagenet-v2":
        return [str(k) for k in range(1000)]  # its folders are class indices: numeric order, not name order
    return None


def index_dataset(
    name: str,
    data_dir: str | Path | None,
    default_dir: Path,
    domains: Sequence[str] | None = None,
    classes: Sequence[str] | None = None,
) -> FolderIndex:
    """The ``FolderIndex`` of a folder or an image-folder natural-shift dataset (names only, nothing decoded)."""
    record = RECORDS[name]
    root = data_root(record, data_dir, default_dir)
    if not root.is_dir():
        raise FileNotFoundError(f"{name}: {root} not found; {fetch_steps(record, data_dir, default_dir)}")
    classes = classes if classes is not None else _classes(record)
    if record.loader == "natural" and not record.domains:
        return index_folder(root, classes=classes, single_domain=name)
    return index_folder(root, domains=domains if domains is not None else (record.domains or None), classes=classes)


@cache
def imagenet_wnids() -> tuple[str, ...]:
    """ImageNet's 1000 wnids in class-index order (timm ships the list)."""
    return tuple(_timm_list("imagenet_synsets.txt"))


def _timm_list(name: str) -> list[str]:
    import importlib.resources

    text = importlib.resources.files("timm.data").joinpath("_info", name).read_text()
    return [line.strip() for line in text.splitlines() if line.strip()]


def output_mask(name: str, classes: Sequence[str]) -> list[int]:
    """The ImageNet output indices of ``classes`` (wnids), checked against the dataset's published mask."""
    mask = set(_timm_list(f"{name.replace('-', '_')}_synsets.txt"))
    outside = [c for c in classes if c not in mask]
    if outside:
        raise FolderProblem([f"{name}: class folder {outside[0]!r} is not one of the {len(mask)} wnids of its "
                             "output mask (timm's list); remove it or list classes:"])
    position = {w: k for k, w in enumerate(imagenet_wnids())}
    return [position[c] for c in classes]


def imagenet_outputs(record: DatasetRecord, classes: Sequence[str]) -> list[int] | None:
    """The ImageNet outputs an ImageNet model keeps for ``classes``: the output mask of ImageNet-R/-A, or for any
    other ImageNet set (a mixture of them) whose classes are fewer wnids than 1000, their class indices; else None."""
    if record.output_mask is not None:
        return output_mask(record.output_mask, classes)
    if record.preset_family != "imagenet" or len(classes) == 1000:
        return None
    position = {w: k for k, w in enumerate(imagenet_wnids())}
    return [position[c] for c in classes] if classes and all(c in position for c in classes) else None


def load_cifar101(root: Path, n_per_domain: int | None):
    """CIFAR-10.1 v6 (2,000 images, CIFAR-10's labels) as one in-memory domain."""
    from unitta.data.arrays import ArrayDataset, balanced_subset

    images = np.load(root / CIFAR101_FILES[0])
    labels = np.load(root / CIFAR101_FILES[1]).astype(np.int64)
    if images.dtype != np.uint8 or images.shape[1:] != (32, 32, 3) or len(images) != len(labels):
        raise FolderProblem([f"{root / CIFAR101_FILES[0]}: {images.dtype} {images.shape}, expected uint8 "
                             f"(N, 32, 32, 3) with {len(labels)} labels; fetch it again"])
    if n_per_domain is not None:
        keep = balanced_subset(labels, n_per_domain, 10)
        images, labels = images[keep], labels[keep]
    return ArrayDataset(name="cifar10.1", labels=labels, domains=np.zeros(len(labels), dtype=np.int64),
                        domain_names=["cifar10.1"], num_classes=10, meta={"root": str(root)}, images=images)

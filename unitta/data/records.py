"""One record per dataset: every fact the rest of unitta asks about a dataset, in one place (as timm keeps
one ``pretrained_cfg`` per model). No torch: ``unitta.cell`` and the config schemas read it.

A record says the dataset's name and aliases, the shape of one image, its class and domain counts, the
default model, the preset family (whose method hyper-parameters and stream defaults apply), its loader and
source split, the cheap presence check run before a sweep's first cell, and the paper table's name.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "CORRUPTIONS", "HELD_OUT_CORRUPTIONS", "ALL_CORRUPTIONS", "DatasetRecord", "RECORDS", "DATASETS", "dataset_record",
]

# The reference's corruption order (the reference's configs/order/*.yaml; docs/streams.md): it defines domain ids,
# the continual order and the head -> tail order of domain imbalance. Same list for every dataset config.
CORRUPTIONS: tuple[str, ...] = (
    "motion_blur",
    "snow",
    "fog",
    "shot_noise",
    "defocus_blur",
    "contrast",
    "zoom_blur",
    "brightness",
    "frost",
    "elastic_transform",
    "glass_blur",
    "gaussian_noise",
    "pixelate",
    "jpeg_compression",
    "impulse_noise",
)
# Hendrycks & Dietterich's four extra corruptions (ICLR'19, sec. 3: "for validation"), disjoint from the 15: the
# held-out validation domains of hyper-parameter selection. CIFAR-10-C / CIFAR-100-C ship them as <name>.npy beside
# the 15, ImageNet-C in its extra.tar; Fashion-MNIST-C generates them (unitta/data/held_out_corruptions.py).
HELD_OUT_CORRUPTIONS: tuple[str, ...] = ("speckle_noise", "gaussian_blur", "spatter", "saturate")
ALL_CORRUPTIONS: tuple[str, ...] = CORRUPTIONS + HELD_OUT_CORRUPTIONS
_EXTRA_TAR = " (the held-out corruptions are in its extra.tar)"


@dataclass(frozen=True)
class DatasetRecord:
    """The facts of one corrupted test set (docs/results.md; the paper's section 5.1 for its three)."""

    name: str
    aliases: tuple[str, ...]  # other names make_stream accepts for it (the clean set's name)
    image_shape: tuple[int, int, int]  # (channels, height, width) of a model input
    num_classes: int
    images_per_domain: int  # the test set's size: one domain is the whole test set under one corruption
    default_model: str  # the paper's model (RobustBench / torchvision name) or the embedded one
    preset_family: str  # 'cifar10' | 'cifar100' | 'imagenet': whose method presets and stream defaults apply
    loader: str  # 'fmnist' (built and cached locally) | 'cifar' (robustbench's .npy files) | 'imagenet' (JPEGs)
    folder: str | None  # under the data directory (None: the embedded set, built on first use)
    source_split: str  # the labelled training split methods that need source data get
    paper_table: str | None = None  # the paper's table: its label (the model it ran), None if not in the paper
    num_domains: int = len(CORRUPTIONS)  # domains at one severity: CIFAR-10-C's 15 corruptions

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)

    def data_problem(
        self, data_dir: str | Path | None, severity: int, default_dir: Path, corruptions: tuple[str, ...] = CORRUPTIONS
    ) -> str | None:
        """One line if the dataset's files at ``severity`` are missing under ``data_dir``, else None (cheap).

        corruptions: the ones to look for (default the 15; ``HELD_OUT_CORRUPTIONS`` for a held-out validation set).
        """
        if self.folder is None:
            return None  # built from Debian's Fashion-MNIST on first use; its loader names the package if missing
        root = Path(data_dir) if data_dir else default_dir
        folder = root / self.folder
        if self.loader == "imagenet":
            missing = [c for c in corruptions if not (folder / c / str(severity)).is_dir()]
            if missing and not (root / f"{self.folder}-prepared").is_dir():
                return (
                    f"{self.name}: {folder} lacks {len(missing)} corruption folder(s) at severity "
                    f"{severity} (e.g. {missing[0]}/{severity}); see `python -m unitta.data fetch {self.name}` "
                    f"for how to obtain ImageNet-C{_EXTRA_TAR if set(missing) & set(HELD_OUT_CORRUPTIONS) else ''}, "
                    "or set data_dir"
                )
            return None
        missing = [f"{c}.npy" for c in corruptions if not (folder / f"{c}.npy").is_file()]
        if not (folder / "labels.npy").is_file():
            missing.append("labels.npy")
        if missing:
            return (
                f"{self.name}: {folder} lacks {len(missing)} file(s) (e.g. {missing[0]}); run "
                f"`python -m unitta.data fetch {self.name} --dir {root}` or set data_dir"
            )
        return None


# The paper's three (UniTTA paper, section 5.1: RobustBench's WRN-28-10, ResNeXt-29 and ResNet-50) and the
# embedded default; test-set sizes: CIFAR-10/100 and Fashion-MNIST 10,000, ImageNet's validation set 50,000.
RECORDS: dict[str, DatasetRecord] = {
    r.name: r
    for r in (
        DatasetRecord(
            "fmnist-c",
            ("fmnist",),
            (3, 32, 32),
            10,
            10_000,
            "resnet20",
            # exactly 1,000 images per (domain, class) like CIFAR-10-C, so CIFAR-10's values apply
            preset_family="cifar10",
            loader="fmnist",
            folder=None,
            source_split="Fashion-MNIST train (60,000 images, Debian package dataset-fashion-mnist)",
        ),
        DatasetRecord(
            "cifar10-c",
            ("cifar10",),
            (3, 32, 32),
            10,
            10_000,
            "Standard",
            preset_family="cifar10",
            loader="cifar",
            folder="CIFAR-10-C",
            source_split="CIFAR-10 train (50,000 images, <data_dir>/cifar-10-batches-py)",
            paper_table="Standard (WRN-28-10)",
        ),
        DatasetRecord(
            "cifar100-c",
            ("cifar100",),
            (3, 32, 32),
            100,
            10_000,
            "Hendrycks2020AugMix_ResNeXt",
            preset_family="cifar100",
            loader="cifar",
            folder="CIFAR-100-C",
            source_split="CIFAR-100 train (50,000 images, <data_dir>/cifar-100-python)",
            paper_table="Hendrycks2020AugMix_ResNeXt (ResNeXt-29)",
        ),
        DatasetRecord(
            "imagenet-c",
            ("imagenet",),
            (3, 224, 224),
            1000,
            50_000,
            "Standard_R50",
            preset_family="imagenet",
            loader="imagenet",
            folder="ImageNet-C",
            source_split="an ImageNet train subset (<data_dir>/ImageNet/train/<wnid>/*.JPEG)",
            paper_table="Standard_R50 (ResNet-50)",
        ),
    )
}

DATASETS: tuple[str, ...] = tuple(RECORDS)


def dataset_record(name: str) -> DatasetRecord:
    """The record of ``name`` (a dataset name or alias); ValueError naming the known ones."""
    for record in RECORDS.values():
        if name in record.names:
            return record
    raise ValueError(f"dataset={name!r}: expected one of {', '.join(DATASETS)}")

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
    "CORRUPTIONS", "HELD_OUT_CORRUPTIONS", "ALL_CORRUPTIONS", "NUM_SEVERITIES", "DatasetRecord", "RECORDS", "DATASETS",
    "NATURAL_SHIFT", "FOLDER_LOADERS", "NATURAL_LOADERS", "dataset_record",
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
# Every corruption comes at severities 1..5 (Hendrycks & Dietterich, ICLR'19; CIFAR-10-C stacks them in one file).
NUM_SEVERITIES = 5
_EXTRA_TAR = " (the held-out corruptions are in its extra.tar)"

# The loaders of image folders (a user's own folder, a natural-shift set, a mixture of natural-shift sets): their
# domain and class counts are read from disk, and the digest of their file index enters a cell's identity.
FOLDER_LOADERS: tuple[str, ...] = ("folder", "natural", "mixture")
# The loaders of the sets ``unitta.data.natural`` reads and checks one by one: the image folders but the mixture
# (checked through its members) and CIFAR-10.1 (two .npy files, no index).
NATURAL_LOADERS: tuple[str, ...] = ("folder", "natural", "cifar101")


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
    # 'fmnist' (built, cached) | 'cifar' (.npy files) | 'imagenet' (JPEGs) | 'folder' | 'natural' | 'cifar101'
    loader: str
    folder: str | None  # under the data directory (None: the embedded set, built on first use)
    source_split: str  # the labelled training split methods that need source data get
    paper_table: str | None = None  # the paper's table: its label (the model it ran), None if not in the paper
    num_domains: int = len(CORRUPTIONS)  # domains at one severity: CIFAR-10-C's 15 corruptions
    class_major: bool = False  # a domain's images sorted by class (ImageNet-C), else label j mod num_classes
    # the natural-shift sets and image folders (unitta.data.natural, docs/own_data.md); 0 counts: read from disk
    layout: str = ""  # what lies under the data directory, e.g. 'imagenet-r/<wnid>/*.jpg'
    fetch: str = ""  # where the files come from: a public URL or the steps
    class_list: str = ""  # where the class list (and the output mask, if any) comes from
    domains: tuple[str, ...] = ()  # the domain folders of a multi-domain natural set ((): one domain, the set)
    output_mask: str | None = None  # 'imagenet-r' | 'imagenet-a': 200 of an ImageNet model's 1000 outputs
    source_from: str | None = None  # the dataset whose source split its model was trained on (None: its own)

    @property
    def names(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)

    @property
    def has_corruptions(self) -> bool:
        """Whether the dataset's domains are corruptions (``corruptions:`` picks them, Hendrycks' held-out four exist);
        an image folder's or a natural-shift set's domains are folders (``domains:``)."""
        return self.loader in ("fmnist", "cifar", "imagenet")

    def data_problem(
        self, data_dir: str | Path | None, severity: int, default_dir: Path, corruptions: tuple[str, ...] = CORRUPTIONS
    ) -> str | None:
        """One line if the dataset's files at ``severity`` are missing under ``data_dir``, else None (cheap).

        corruptions: the ones to look for (default the 15; ``HELD_OUT_CORRUPTIONS`` for a held-out validation set).
        """
        if self.loader in NATURAL_LOADERS:
            raise ValueError(f"{self.name}: ask unitta.data.natural.natural_problem (image folders are indexed there)")
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
            class_major=True,
        ),
    )
}

_IMAGENET_SETS = dict(image_shape=(3, 224, 224), default_model="Standard_R50", preset_family="imagenet",
                      loader="natural", source_split=RECORDS["imagenet-c"].source_split, num_domains=1,
                      source_from="imagenet-c")
_IMAGENET_1000 = "ImageNet's 1000 wnids in sorted order (timm.data's imagenet_synsets.txt), the model's outputs"
_MASK = ("the {n} wnids of its paper's output mask (timm.data's {name}_synsets.txt); an ImageNet model's 1000 "
         "outputs are masked to them")
# Natural distribution shifts (the other benchmark, mariodoebler/test-time-adaptation, and TTAB): one record
# each; sizes are the public releases' (each dataset's paper).
RECORDS.update({
    r.name: r
    for r in (
        DatasetRecord("folder", (), (3, 0, 0), 0, 0, "resnet20", preset_family="cifar10", loader="folder", folder=None,
                      source_from="folder",
                      source_split="source_dir: ROOT/<class>/<image> or ROOT/<domain>/<class>/<image>",
                      num_domains=0, layout="data_dir: ROOT/<domain>/<class>/<image> (.png .jpg .jpeg .webp)",
                      fetch="your own images (docs/own_data.md)", class_list="the class folders, sorted by name"),
        DatasetRecord("mixture", (), (3, 224, 224), 0, 0, "Standard_R50", preset_family="imagenet", loader="mixture",
                      folder=None, source_split=RECORDS["imagenet-c"].source_split, num_domains=0,
                      source_from="imagenet-c", layout="the members' folders under data_dir",
                      fetch="datasets_as_domains: [imagenet-r, imagenet-sketch, ...] (each member's own files)",
                      class_list="the classes every member has (wnids: in ImageNet's class-index order)"),
        DatasetRecord("imagenet-r", (), num_classes=200, images_per_domain=30_000, folder="imagenet-r",
                      layout="imagenet-r/<wnid>/*.jpg", fetch="https://people.eecs.berkeley.edu/~hendrycks/imagenet-r.tar",
                      class_list=_MASK.format(n=200, name="imagenet_r"), output_mask="imagenet-r", **_IMAGENET_SETS),
        DatasetRecord("imagenet-a", (), num_classes=200, images_per_domain=7_500, folder="imagenet-a",
                      layout="imagenet-a/<wnid>/*.jpg", fetch="https://people.eecs.berkeley.edu/~hendrycks/imagenet-a.tar",
                      class_list=_MASK.format(n=200, name="imagenet_a"), output_mask="imagenet-a", **_IMAGENET_SETS),
        DatasetRecord("imagenet-sketch", (), num_classes=1000, images_per_domain=50_889, folder="imagenet-sketch",
                      layout="imagenet-sketch/<wnid>/*.JPEG (the release's sketch/ folder, renamed)",
                      fetch="https://github.com/HaohanWang/ImageNet-Sketch (Google Drive / Kaggle / Hugging Face "
                      "'imagenet_sketch'); no single stable URL, so fetch prints the steps",
                      class_list=_IMAGENET_1000, **_IMAGENET_SETS),
        DatasetRecord("imagenet-v2", (), num_classes=1000, images_per_domain=10_000, folder="imagenet-v2",
                      layout="imagenet-v2/<0..999>/*.jpeg (imagenetv2-matched-frequency-format-val, renamed)",
                      fetch="https://huggingface.co/datasets/vaishaal/ImageNetV2/resolve/main/"
                      "imagenetv2-matched-frequency.tar.gz",
                      class_list="folders 0..999 are ImageNet's class indices (in numeric order)", **_IMAGENET_SETS),
        DatasetRecord("imagenet-d109", (), (3, 224, 224), 109, 0, "Standard_R50", preset_family="imagenet",
                      loader="natural", folder="imagenet-d109", source_split=RECORDS["imagenet-c"].source_split,
                      source_from="imagenet-c",
                      num_domains=5, domains=("clipart", "infograph", "painting", "real", "sketch"),
                      layout="imagenet-d109/<domain>/<class>/*.jpg (DomainNet images of the 109 classes shared with "
                      "ImageNet)", fetch="DomainNet (https://ai.bu.edu/M3SDA/) sorted into the 109 classes by the "
                      "other benchmark's image lists (mariodoebler/test-time-adaptation); not fetched",
                      class_list="the class folders present (sorted); unitta ships no 109-class list or its mapping "
                      "to ImageNet outputs: use a 109-class model"),
        DatasetRecord("domainnet126", ("domainnet-126",), (3, 224, 224), 126, 0, "Standard_R50",
                      preset_family="imagenet", loader="natural", folder="domainnet126",
                      source_split="source_dir: one DomainNet domain, <class>/<image>", num_domains=4,
                      source_from="folder",
                      domains=("clipart", "painting", "real", "sketch"),
                      layout="domainnet126/<domain>/<class>/*.jpg (DomainNet's folders, only the 126 classes)",
                      fetch="DomainNet (https://ai.bu.edu/M3SDA/), the 126-class subset of Saito et al. (ICCV'19) "
                      "by its image lists (e.g. AdaContrast's clipart_list.txt); not fetched",
                      class_list="the class folders present (sorted); unitta ships no 126-name list: keep only "
                      "the 126 classes' folders or list them under classes:"),
        DatasetRecord("cifar10.1", ("cifar10-1",), (3, 32, 32), 10, 2_000, "Standard", preset_family="cifar10",
                      loader="cifar101", folder="CIFAR-10.1", source_split=RECORDS["cifar10-c"].source_split,
                      source_from="cifar10-c",
                      num_domains=1, layout="CIFAR-10.1/cifar10.1_v6_data.npy + cifar10.1_v6_labels.npy",
                      fetch="https://github.com/modestyachts/CIFAR-10.1/raw/master/datasets/",
                      class_list="CIFAR-10's 10 classes (the same label ids)"),
    )
})

DATASETS: tuple[str, ...] = tuple(RECORDS)
# the seven natural-shift datasets (docs/own_data.md)
NATURAL_SHIFT: tuple[str, ...] = tuple(n for n, r in RECORDS.items() if r.loader in ("natural", "cifar101"))


def dataset_record(name: str) -> DatasetRecord:
    """The record of ``name`` (a dataset name or alias); ValueError naming the known ones."""
    for record in RECORDS.values():
        if name in record.names:
            return record
    raise ValueError(f"dataset={name!r}: expected one of {', '.join(DATASETS)}")

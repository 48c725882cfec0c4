"""``unitta data list``: every dataset record, one block each (domains, classes, size, where the files go), and
``unitta data check`` for image folders and the natural-shift sets (``unitta.data.natural``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from unitta.data.records import RECORDS, DatasetRecord

__all__ = ["check_folder_dataset", "describe_records"]


def _where(record: DatasetRecord, data_dir: Path) -> str:
    if record.loader == "folder":
        return record.layout
    if record.folder is None:
        return f"built on first use in {data_dir}/FashionMNIST-C (from Debian's Fashion-MNIST)"
    return f"{data_dir}/{record.layout or record.folder}"


def describe_records(data_dir: Path) -> list[str]:
    """Lines describing every dataset record (``unitta data list``)."""
    lines = []
    for record in RECORDS.values():
        domains = (", ".join(record.domains) if record.domains else "one (the set itself)") \
            if record.loader in ("natural", "cifar101") else \
            ("the domain folders" if record.loader == "folder" else f"{record.num_domains} corruptions x 5 severities")
        classes = record.num_classes or "the class folders"
        size = f"{record.images_per_domain:,} images per domain" if record.images_per_domain else "as on disk"
        lines.append(f"{record.name}{' (' + ', '.join(record.aliases) + ')' if record.aliases else ''}")
        lines.append(f"  domains: {domains}; classes: {classes}; size: {size}; model: {record.default_model}")
        lines.append(f"  files: {_where(record, data_dir)}")
        if record.class_list:
            lines.append(f"  class list: {record.class_list}")
        if record.fetch:
            lines.append(f"  get it: {record.fetch}")
    return lines


def check_folder_dataset(name: str, data_dir: Path, domains: Sequence[str] | None = None,
                         classes: Sequence[str] | None = None, notes: list[str] | None = None) -> list[str]:
    """Every problem of an image folder or a natural-shift set: missing folders, a class folder missing from a
    domain, empty classes, and every image Pillow cannot read (each file is opened, not decoded). ``notes`` (when
    given) gets the decoded range of a sample, the first image of every (domain, class): the pixel values a cell
    sees (0..255, 16-bit images scaled) and the files' Pillow modes; a sample decoding to one value is a problem."""
    from unitta.data import default_data_dir
    from unitta.data.folder import FolderProblem, decoded_range, verify_images
    from unitta.data.mixture import one_domain_problem
    from unitta.data.natural import index_dataset, natural_problem

    record = RECORDS[name]
    missing = natural_problem(record, data_dir, default_data_dir())
    if missing or record.loader == "cifar101":
        return [missing] if missing else []
    try:
        index = index_dataset(name, data_dir, default_data_dir(), domains, classes)
    except (FileNotFoundError, FolderProblem) as err:
        return list(getattr(err, "problems", [str(err)]))
    problems = index.problems + _release_problems(record, index) + verify_images(index)
    if record.loader == "folder" and (one := one_domain_problem(name, index.domain_names)):
        problems.append(one)  # the sweep's preflight says the same (a natural-shift set is a mixture's member)
    if problems or notes is None:
        return problems
    n, lo, hi, modes = decoded_range(index)
    notes.append(f"{n} images sampled (the first of every domain and class) decoded to {lo}..{hi} of 0..255 "
                 f"(Pillow modes: {', '.join(modes)})")
    if n and lo == hi:
        problems.append(f"{index.root}: every sampled image decodes to the single value {lo} (modes "
                        f"{', '.join(modes)}); check the images' bit depth and colour mode")
    return problems


def _release_problems(record: DatasetRecord, index) -> list[str]:
    """A natural-shift set's class and image counts against its public release (the record's)."""
    problems = []
    if record.loader != "natural":
        return problems
    if record.num_classes and len(index.classes) != record.num_classes:
        problems.append(f"{index.root}: {len(index.classes)} class folders, the release has {record.num_classes}; "
                        f"{record.class_list}")
    if record.images_per_domain and len(index.labels) != record.images_per_domain * max(1, len(record.domains)):
        problems.append(f"{index.root}: {len(index.labels):,} images, the release has "
                        f"{record.images_per_domain:,} (an incomplete or altered copy; {record.fetch})")
    return problems

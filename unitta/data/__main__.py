"""Command line for the datasets.

    python -m unitta.data prepare fmnist-c [--severity 1..5|all] [--n-per-domain N] [--data-dir DIR] [--corruptions C]
    python -m unitta.data prepare imagenet-c --dir DATA_DIR [--severity 5] [--workers N] [--force] [--verify]
    python -m unitta.data show fmnist-c --out grid.png [--severity S] [--data-dir DIR]
    python -m unitta.data fetch cifar10-c|cifar100-c|imagenet-c --dir DIR [--keep-archive] [--quiet]
    python -m unitta.data check cifar10-c|cifar100-c|imagenet-c|fmnist-c --dir DIR [--md5] [--corruptions held_out]
    python -m unitta.data check folder --dir ROOT [--domains a,b] [--classes x,y]   (and the natural-shift sets)
    python -m unitta.data fetch cifar10.1 --dir DIR   (the other natural-shift sets: prints the steps)
    python -m unitta.data list
    python -m unitta.data export-folder OUT [--corruptions fog,snow,contrast] [--n-per-domain 100]

``prepare`` builds the Fashion-MNIST-C cache (progress bar; severity 5 by default, all 5 on request),
or decodes ImageNet-C's JPEGs once into memory-mapped arrays (``unitta.data.prepared``).
``show`` draws one row per corruption and one column per class (the first test image of each class).
``fetch`` downloads CIFAR-10-C / CIFAR-100-C from robustbench's Zenodo records (resumable, verified;
``unitta.data.fetch``) and prints the steps for ImageNet-C. ``check`` validates a data directory
(``unitta.data.check``): exit 0 when ready, else one line per problem and exit 1. ``list`` prints every dataset
record; ``export-folder`` writes Fashion-MNIST-C images as an image folder (docs/own_data.md).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from unitta.data import load_dataset
from unitta.data.fmnist_c import prepare_fmnist_c
from unitta.data.records import DATASETS, NATURAL_LOADERS, NATURAL_SHIFT, RECORDS


def _severities(text: str) -> list[int]:
    if text == "all":
        return [1, 2, 3, 4, 5]
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        values = []
    if not values or any(v not in (1, 2, 3, 4, 5) for v in values):
        raise argparse.ArgumentTypeError(f"--severity {text!r}: expected 1..5, a comma list of them, or 'all'")
    return values


def _corruption_list(text: str | None) -> list[str]:
    """--corruptions: a comma list, 'held_out' (the four held-out ones), or None (the 15)."""
    from unitta.data.records import ALL_CORRUPTIONS, CORRUPTIONS, HELD_OUT_CORRUPTIONS

    if text == "held_out":
        return list(HELD_OUT_CORRUPTIONS)
    corruptions = text.split(",") if text else list(CORRUPTIONS)
    unknown = [c for c in corruptions if c not in ALL_CORRUPTIONS]
    if unknown:
        raise ValueError(f"--corruptions: unknown {', '.join(unknown)}; expected among {', '.join(ALL_CORRUPTIONS)} "
                         "or 'held_out'")
    return corruptions


def _prepare(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    corruptions = _corruption_list(args.corruptions)
    if args.dataset == "imagenet-c":
        from unitta.data import default_data_dir
        from unitta.data.prepared import prepare_imagenet_c

        data_dir = args.data_dir or default_data_dir()
        for line in prepare_imagenet_c(data_dir, args.severity, corruptions, args.workers, args.force, args.verify):
            print(line)
        print(f"ImageNet-C cache in {data_dir}: {time.perf_counter() - started:.1f} s")
        return 0
    folder = prepare_fmnist_c(args.data_dir, args.severity, corruptions, n_per_domain=args.n_per_domain, progress=True)
    print(f"Fashion-MNIST-C (severities {args.severity}) in {folder}: {time.perf_counter() - started:.1f} s")
    return 0


def _show(args: argparse.Namespace) -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dataset = load_dataset(
        args.dataset, data_dir=args.data_dir, severity=args.severity[0], n_per_domain=args.n_per_domain
    )
    n = len(dataset) // dataset.num_domains
    first = dataset.labels[:n]
    classes = [k for k in range(dataset.num_classes) if (first == k).any()][: args.columns]
    columns = [int(np.flatnonzero(first == k)[0]) for k in classes]
    fig, axes = plt.subplots(
        dataset.num_domains, len(columns), figsize=(0.9 * len(columns) + 1.6, 0.9 * dataset.num_domains), squeeze=False
    )
    for d, name in enumerate(dataset.domain_names):
        batch = dataset.get_batch(np.array(columns) + d * n).permute(0, 2, 3, 1).numpy()
        for j, image in enumerate(batch):
            ax = axes[d, j]
            ax.imshow(image, interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
        axes[d, 0].set_ylabel(name, rotation=0, ha="right", va="center", fontsize=8)
    fig.suptitle(f"{dataset.name}, severity {args.severity[0]}", fontsize=9)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m unitta.data", description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    prepare = commands.add_parser("prepare", help="build the Fashion-MNIST-C cache or the decoded ImageNet-C cache")
    prepare.add_argument("dataset", choices=["fmnist-c", "imagenet-c"])
    prepare.add_argument("--severity", type=_severities, default=[5], help="1..5, a comma list, or 'all' (default 5)")
    prepare.add_argument("--n-per-domain", type=int, default=None, help="only a class-balanced subset")
    prepare.add_argument(
        "--data-dir", "--dir", default=None, help="data / cache root (default $UNITTA_DATA or ~/.cache/unitta)"
    )
    prepare.add_argument("--workers", type=int, default=None, help="imagenet-c: decoding processes (default: cores)")
    prepare.add_argument("--corruptions", default=None,
                         help="a comma list (default: all 15), or 'held_out' (the four held-out ones)")
    prepare.add_argument("--force", action="store_true", help="imagenet-c: rebuild caches that exist")
    prepare.add_argument("--verify", action="store_true", help="imagenet-c: re-hash the caches that are kept")
    show = commands.add_parser("show", help="draw a grid of corrupted images (PNG)")
    show.add_argument("dataset", choices=DATASETS)
    show.add_argument("--out", required=True)
    show.add_argument("--severity", type=_severities, default=[5])
    show.add_argument("--n-per-domain", type=int, default=None, help="read a subset (fmnist-c: prepares only it)")
    show.add_argument("--columns", type=int, default=10, help="at most this many classes (default 10)")
    show.add_argument("--data-dir", default=None)
    fetch = commands.add_parser("fetch", help="download CIFAR-10-C / CIFAR-100-C (ImageNet-C: print the steps)")
    fetch.add_argument("dataset", choices=["cifar10-c", "cifar100-c", "imagenet-c", *NATURAL_SHIFT])
    fetch.add_argument("--dir", "--data-dir", dest="data_dir", default=None, help="data root (default $UNITTA_DATA)")
    fetch.add_argument("--keep-archive", action="store_true", help="keep the verified .tar after extracting it")
    fetch.add_argument("--quiet", action="store_true", help="no progress bar")
    check = commands.add_parser("check", help="check a data directory: layout, sizes, labels, stored checksums")
    check.add_argument("dataset", choices=DATASETS)
    check.add_argument("--dir", "--data-dir", dest="data_dir", default=None, help="data root (default $UNITTA_DATA)")
    check.add_argument("--md5", action="store_true",
                       help="also hash every downloaded file against its fetch manifest (MD5SUMS); stored "
                       "checksums (Fashion-MNIST-C's sha256) and sizes are always checked")
    check.add_argument("--corruptions", default=None,
                       help="a comma list to check (default: all 15), or 'held_out' (the four held-out ones)")
    check.add_argument("--n-per-domain", type=int, default=None, help="fmnist-c: check this subset cache")
    check.add_argument("--severity", type=_severities, default=[5], help="imagenet-c: severity folders (default 5)")
    check.add_argument("--domains", default=None, help="folder: a comma list of domain folders (default: all)")
    check.add_argument("--classes", default=None, help="folder: a comma list of class folders (default: all)")
    commands.add_parser("list", help="every dataset: domains, classes, size, where its files go")
    export = commands.add_parser("export-folder", help="write Fashion-MNIST-C images as PNG folders (docs/own_data.md)")
    export.add_argument("out", help="a new folder: OUT/<corruption>/<class>/<n>.png")
    export.add_argument("--corruptions", default="fog,snow,contrast", help="a comma list (default fog,snow,contrast)")
    export.add_argument("--n-per-domain", type=int, default=100, help="images per corruption, a multiple of 10")
    export.add_argument("--severity", type=int, default=5)
    args = parser.parse_args(argv)
    if args.command in ("list", "export-folder"):
        return _list(args) if args.command == "list" else _export(args)
    if args.command in ("fetch", "check"):
        return _fetch(args) if args.command == "fetch" else _check(args)
    try:
        return _prepare(args) if args.command == "prepare" else _show(args)
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


def _fetch(args: argparse.Namespace) -> int:
    from unitta.data import default_data_dir
    from unitta.data.download import DownloadError
    from unitta.data.fetch import fetch_cifar_c, imagenet_c_steps

    data_dir = args.data_dir or default_data_dir()
    if args.dataset == "imagenet-c":
        print(imagenet_c_steps(data_dir))
        return 0
    if args.dataset in NATURAL_SHIFT:
        from unitta.data.natural_fetch import fetch_natural

        try:
            print(fetch_natural(args.dataset, data_dir, progress=not args.quiet))
        except DownloadError as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
        return 0
    try:
        folder = fetch_cifar_c(args.dataset, data_dir, progress=not args.quiet, keep_archive=args.keep_archive)
    except DownloadError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"{args.dataset} in {folder}; check it with `python -m unitta.data check {args.dataset} --dir {data_dir}`")
    return 0


def _check(args: argparse.Namespace) -> int:
    from unitta.data import default_data_dir
    from unitta.data.check import check_dataset

    data_dir = args.data_dir or default_data_dir()
    if RECORDS[args.dataset].loader in NATURAL_LOADERS:
        from unitta.data.listing import check_folder_dataset

        if args.dataset == "folder" and not args.data_dir:
            print("error: check folder needs --dir ROOT (ROOT/<domain>/<class>/<image>)", file=sys.stderr)
            return 2
        split = lambda text: text.split(",") if text else None  # noqa: E731
        notes: list[str] = []
        problems = check_folder_dataset(args.dataset, data_dir, split(args.domains), split(args.classes), notes)
        for problem in problems:
            print(problem, file=sys.stderr)
        verdict = f"{len(problems)} problem(s)" if problems else "ok"
        print(f"{args.dataset} in {data_dir}: {verdict}" + "".join(f"; {note}" for note in notes))
        return 1 if problems else 0
    try:
        corruptions = _corruption_list(args.corruptions) if args.corruptions else None
        problems = check_dataset(args.dataset, data_dir, args.md5, corruptions, args.n_per_domain, args.severity)
    except (ValueError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        return 1
    print(f"{args.dataset} in {data_dir}: ok" + (" (md5 checked)" if args.md5 else "")
          + (" (sha256 checked)" if args.dataset == "fmnist-c" else ""))
    return 0



def _list(args: argparse.Namespace) -> int:
    from unitta.data import default_data_dir
    from unitta.data.listing import describe_records

    print("\n".join(describe_records(default_data_dir())))
    return 0


def _export(args: argparse.Namespace) -> int:
    from unitta.data.export import export_fmnist_c

    try:
        folder, written = export_fmnist_c(args.out, args.corruptions.split(","), args.n_per_domain, args.severity)
    except (ValueError, FileNotFoundError, FileExistsError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {written} PNG images to {folder} (<corruption>/<class>/<n>.png)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

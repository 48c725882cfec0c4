"""Command line for the datasets.

    python -m unitta.data prepare fmnist-c [--severity 1..5|all] [--n-per-domain N] [--data-dir DIR]
    python -m unitta.data show fmnist-c --out grid.png [--severity S] [--data-dir DIR]

``prepare`` builds the Fashion-MNIST-C cache (progress bar; severity 5 by default, all 5 on request).
``show`` draws one row per corruption and one column per class (the first test image of each class).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from unitta.data import DATASETS, load_dataset, prepare_fmnist_c


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


def _prepare(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    folder = prepare_fmnist_c(args.data_dir, args.severity, n_per_domain=args.n_per_domain, progress=True)
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
    prepare = commands.add_parser("prepare", help="build the Fashion-MNIST-C cache")
    prepare.add_argument("dataset", choices=["fmnist-c"])
    prepare.add_argument("--severity", type=_severities, default=[5], help="1..5, a comma list, or 'all' (default 5)")
    prepare.add_argument("--n-per-domain", type=int, default=None, help="only a class-balanced subset")
    prepare.add_argument("--data-dir", default=None, help="cache root (default $UNITTA_DATA or ~/.cache/unitta)")
    show = commands.add_parser("show", help="draw a grid of corrupted images (PNG)")
    show.add_argument("dataset", choices=DATASETS)
    show.add_argument("--out", required=True)
    show.add_argument("--severity", type=_severities, default=[5])
    show.add_argument("--n-per-domain", type=int, default=None, help="read a subset (fmnist-c: prepares only it)")
    show.add_argument("--columns", type=int, default=10, help="at most this many classes (default 10)")
    show.add_argument("--data-dir", default=None)
    args = parser.parse_args(argv)
    try:
        return _prepare(args) if args.command == "prepare" else _show(args)
    except (ValueError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

"""Command line for the models.

    python -m unitta.models train fmnist [--arch resnet20|vit_tiny] [--epochs N] [--out PATH] [--seed S]
    python -m unitta.models fetch DATASET [--name NAME] [--dir DIR] [--trust-checkpoints] [--quiet]
    python -m unitta.models list

``train`` retrains an embedded model (the ResNet-20, or the LayerNorm ViT with ``--arch vit_tiny``); ``fetch``
downloads a paper model's checkpoint into the layout ``load_model`` reads (``unitta.models.fetch``); ``list``
prints every model per dataset with its normalisation kind.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields

from unitta.models.train import RECIPES, TrainConfig, default_checkpoint, train_fmnist


def main(argv: list[str] | None = None) -> int:
    defaults = TrainConfig()
    parser = argparse.ArgumentParser(prog="python -m unitta.models", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train an embedded model and write its checkpoint")
    train.add_argument("dataset", choices=["fmnist"], help="training set (only Fashion-MNIST is embedded)")
    train.add_argument("--arch", choices=list(RECIPES), default=defaults.arch, help="architecture (default resnet20)")
    train.add_argument("--epochs", type=int, default=None, help="default: the recipe of --arch")
    train.add_argument("--batch-size", type=int, default=defaults.batch_size)
    train.add_argument("--max-lr", type=float, default=None, help="default: the recipe of --arch")
    train.add_argument("--seed", type=int, default=defaults.seed)
    train.add_argument("--threads", type=int, default=defaults.threads, help="torch CPU threads")
    train.add_argument("--limit", type=int, default=None, help="train and test on the first N images only (smoke test)")
    train.add_argument(
        "--out", default=None, help=f"checkpoint path (default {default_checkpoint('ARCH')}, the packaged one)"
    )
    fetch = sub.add_parser("fetch", help="download a paper model's checkpoint (robustbench / torchvision)")
    fetch.add_argument("dataset", choices=["cifar10-c", "cifar100-c", "imagenet-c", "fmnist-c"])
    fetch.add_argument("--name", default=None, help="model name (default: the paper's model for the dataset)")
    fetch.add_argument("--dir", default="ckpt", help="checkpoint directory, robustbench's layout (default ./ckpt)")
    fetch.add_argument("--trust-checkpoints", action="store_true", help="accept checkpoints that need full unpickling")
    fetch.add_argument("--quiet", action="store_true", help="no progress bar")
    sub.add_parser("list", help="every model per dataset, with its normalisation kind (the first is the default)")
    args = parser.parse_args(argv)
    if args.command == "fetch":
        return _fetch(args)
    if args.command == "list":
        return _list()

    known = {f.name for f in fields(TrainConfig)}
    try:
        cfg = TrainConfig(**{k: v for k, v in vars(args).items() if k in known})
    except ValueError as err:
        parser.error(str(err))
    result = train_fmnist(cfg, args.out)
    print(
        f"wrote {result.path}: {result.epochs} epochs in {result.train_seconds:.0f} s, "
        f"clean Fashion-MNIST test error {100 * result.test_error:.2f} % ({result.test_images:,} images)"
    )
    return 0


def _list() -> int:
    from unitta.models.zoo import list_models, model_norm_kind

    for dataset, names in list_models().items():
        for i, name in enumerate(names):
            print(f"{dataset:11s} {name:28s} {model_norm_kind(dataset, name):5s}{'  (default)' if i == 0 else ''}")
    return 0


def _fetch(args: argparse.Namespace) -> int:
    from unitta.data.download import DownloadError
    from unitta.models.fetch import fetch_checkpoint
    from unitta.models.zoo import CheckpointError

    try:
        path = fetch_checkpoint(args.dataset, args.name, args.dir, not args.quiet, args.trust_checkpoints)
    except (DownloadError, CheckpointError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except ValueError as err:  # unknown model name
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"{args.dataset} checkpoint: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

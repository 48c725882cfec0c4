"""``python -m unitta.models train fmnist [--epochs N] [--out PATH] [--seed S]``: retrain the embedded model."""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields

from unitta.models.train import DEFAULT_CHECKPOINT, TrainConfig, train_fmnist


def main(argv: list[str] | None = None) -> int:
    defaults = TrainConfig()
    parser = argparse.ArgumentParser(prog="python -m unitta.models", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train the embedded ResNet-20 and write its checkpoint")
    train.add_argument("dataset", choices=["fmnist"], help="training set (only Fashion-MNIST is embedded)")
    train.add_argument("--epochs", type=int, default=defaults.epochs)
    train.add_argument("--batch-size", type=int, default=defaults.batch_size)
    train.add_argument("--max-lr", type=float, default=defaults.max_lr)
    train.add_argument("--seed", type=int, default=defaults.seed)
    train.add_argument("--threads", type=int, default=defaults.threads, help="torch CPU threads")
    train.add_argument("--limit", type=int, default=None, help="train and test on the first N images only (smoke test)")
    train.add_argument("--out", default=str(DEFAULT_CHECKPOINT), help=f"checkpoint path (default {DEFAULT_CHECKPOINT})")
    args = parser.parse_args(argv)

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


if __name__ == "__main__":
    sys.exit(main())

"""Per-corruption error of an embedded model on Fashion-MNIST-C: source model vs BN re-estimation.

The figure of docs/models.md (the per-corruption table):
- source: the model in eval mode (training-set BatchNorm statistics);
- BN-64: every BatchNorm layer normalises with the statistics of the current test batch of 64
  (train-mode BN, no parameter update), i.e. Nado et al. 2020 / Schneider et al. 2020 "BN adapt".
Each domain is shuffled with a fixed seed so that batches mix classes; the last batch may be smaller.
Prints a Markdown table (error %, one row per corruption, plus clean test data and the mean of 15).
``--held-out``: the four held-out validation corruptions (``unitta.data.HELD_OUT_CORRUPTIONS``) instead of the 15.

    .venv/bin/python bench/model_table.py [--n-per-domain 1000] [--batch-size 64] [--threads 2] [--held-out]
    .venv/bin/python bench/model_table.py --model vit_tiny --checkpoint my_vit.pt   # a checkpoint of `train --out`
"""

from __future__ import annotations

import argparse
import copy
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn
from tqdm import tqdm

from unitta.data import HELD_OUT_CORRUPTIONS, load_dataset
from unitta.data.fashion_mnist import read_fashion_mnist
from unitta.models import load_model
from unitta.models.train import pad_to_32, to_input
from unitta.models.zoo import read_checkpoint


def bn_adapt(model: nn.Module) -> nn.Module:
    """A copy of ``model`` whose BatchNorm layers normalise with each batch's own statistics."""
    adapted = copy.deepcopy(model).eval()
    for module in adapted.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            module.train()
    return adapted


@torch.no_grad()
def error(model: nn.Module, batches) -> float:
    wrong = total = 0
    for x, y in batches:
        wrong += int((model(x).argmax(1) != y).sum())
        total += len(y)
    return 100.0 * wrong / total


def domain_batches(dataset, order: np.ndarray, batch_size: int):
    """Batches of (images, labels) in the given index order."""
    labels = torch.as_tensor(dataset.labels)
    for s in range(0, len(order), batch_size):
        idx = order[s : s + batch_size]
        yield dataset.get_batch(idx), labels[idx]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n-per-domain", type=int, default=None,
                        help="class-balanced subset per domain (default: all)")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--severity", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0, help="shuffles each domain so batches mix classes")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--model", default=None, help="fmnist-c model (default resnet20; vit_tiny)")
    parser.add_argument("--checkpoint", default=None,
                        help="weights to evaluate instead of the packaged ones (e.g. python -m unitta.models train "
                             "fmnist --out PATH), read through the safe loader")
    parser.add_argument("--held-out", action="store_true",
                        help="the four held-out corruptions (speckle_noise, gaussian_blur, spatter, saturate)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(args.seed)

    model, info = load_model("fmnist-c", args.model)
    if args.checkpoint is not None:
        model.load_state_dict(read_checkpoint(Path(args.checkpoint))[0])
    # a LayerNorm model (vit_tiny) has no BatchNorm to re-estimate: its BN-64 column is n/a
    adapted = bn_adapt(model) if info.norm_kind == "batch" else None

    def bn_error(batches) -> float:
        return error(adapted, batches) if adapted is not None else float("nan")

    start = time.perf_counter()
    dataset = load_dataset("fmnist-c", data_dir=args.data_dir, severity=args.severity, n_per_domain=args.n_per_domain,
                           corruptions=HELD_OUT_CORRUPTIONS if args.held_out else None)
    load_seconds = time.perf_counter() - start

    test_x, test_y = read_fashion_mnist("test")
    n_clean = len(test_y) if args.n_per_domain is None else args.n_per_domain
    clean_idx = rng.permutation(len(test_y))[:n_clean]
    clean_x, clean_y = to_input(pad_to_32(test_x[clean_idx])).contiguous(), torch.as_tensor(test_y[clean_idx])

    def clean_batches():
        for s in range(0, n_clean, args.batch_size):
            yield clean_x[s : s + args.batch_size], clean_y[s : s + args.batch_size]

    start = time.perf_counter()
    rows = [("none (clean)", error(model, clean_batches()), bn_error(clean_batches()), n_clean)]
    for d, domain in enumerate(tqdm(dataset.domain_names, desc="corruptions")):
        indices = np.flatnonzero(dataset.domains == d)
        order = rng.permutation(indices)  # the same order for both models
        source = error(model, domain_batches(dataset, order, args.batch_size))
        bn = bn_error(domain_batches(dataset, order, args.batch_size))
        rows.append((domain, source, bn, len(indices)))
    eval_seconds = time.perf_counter() - start

    weights = f", weights {args.checkpoint}" if args.checkpoint else ""
    print(f"Fashion-MNIST-C, severity {args.severity}, {info.name}{weights} ({info.norm_kind} norm), "
          f"batch {args.batch_size}, {rows[1][3]:,} images per corruption, seed {args.seed}\n")
    columns = ["source"] + (["BN-64"] if adapted is not None else [])  # no BN-64 column for a LayerNorm model
    print("| corruption | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for name, source, bn, _ in rows:
        print(f"| {name} | " + " | ".join(f"{v:.1f}" for v in (source, bn)[: len(columns)]) + " |")
    means = [float(np.mean([r[1 + c] for r in rows[1:]])) for c in range(len(columns))]
    print(f"| **mean of {len(rows) - 1}** | " + " | ".join(f"**{m:.1f}**" for m in means) + " |")
    print(f"\ndataset load {load_seconds:.1f} s, evaluation {eval_seconds:.1f} s, torch threads: {args.threads}")


if __name__ == "__main__":
    main()

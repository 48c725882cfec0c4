"""Peak memory of one MEMO batch, sequential (CPU) path against batched (CUDA) path (docs/benchmarks.md, MEMO).

    python bench/memo_memory.py auto|cuda BATCH CHUNK_MEMORY [--model resnet20|Standard_R50] [--views 32]

``auto``: the CPU's sequential episodes; ``cuda``: the batched episodes of ``UNITTA_DEVICE_PATHS=cuda``, chunked by
MEMO's ``chunk_memory``. Prints the episodes per chunk and the peak resident set size above the warmed-up method
(``PeakRSS``, sampled every millisecond) during one ``memo(x)`` on random images (one process per measurement).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from methods import PeakRSS  # noqa: E402

from unitta.methods import get_method  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mode", choices=["auto", "cuda"])
    parser.add_argument("batch", type=int)
    parser.add_argument("chunk_memory", type=float)
    parser.add_argument("--model", choices=["resnet20", "Standard_R50"], default="resnet20")
    parser.add_argument("--views", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    if args.batch < 1 or args.views < 1 or args.chunk_memory < 1:
        print("error: batch and --views must be >= 1, chunk_memory >= 1", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    if args.model == "resnet20":
        from unitta.models import load_model

        model, info = load_model("fmnist-c")
    else:
        from unitta.models.zoo import build_model

        model, info = build_model("imagenet-c", "Standard_R50")  # random weights: memory does not depend on them
    model.eval()
    x = torch.rand(args.batch, 3, info.input_size, info.input_size, generator=torch.Generator().manual_seed(0))
    os.environ["UNITTA_DEVICE_PATHS"] = args.mode  # read once, when the method is built
    memo = get_method("memo", model, info, chunk_memory=args.chunk_memory, n_augmentations=args.views)
    memo(x[:1])
    with PeakRSS() as rss:
        memo(x)
    print(f"{args.model} {args.mode} batch {args.batch} views {args.views} chunk_memory {args.chunk_memory:g}: "
          f"{memo.episodes_per_chunk(x)} episodes per chunk, +{(rss.peak - rss.base) / 2**20:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())

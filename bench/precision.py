"""What ``precision: bf16`` (or tf32) costs in error: the same cells at fp32 and at another precision.

    python bench/precision.py [--methods test bn unitta ...] [--settings i111 n111 nu11]
                              [--precisions bf16] [--S 20] [--n-per-domain 200] [--markdown]

Every (method, setting) cell of the embedded Fashion-MNIST-C default runs once per precision on the
same stream (official sampler, seed 425), through ``unitta.evaluate.evaluate`` as a sweep runs it: on
a GPU bf16 means autocast + channels_last, on the CPU autocast alone (slower than fp32 there: the
CPU has no fast bf16 convolutions; only the error is meaningful). Prints each cell's error per
precision and the difference from fp32 in points, then the mean absolute difference per precision.
The binomial noise of an error on n images is about 100 sqrt(e (1 - e) / n) points; a difference
well inside it is rounding flipping borderline predictions, not a change of method behaviour.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

os.environ.setdefault("KINETO_LOG_LEVEL", "5")

from unitta.cell import Cell  # noqa: E402
from unitta.cell.fields import PRECISIONS  # noqa: E402
from unitta.evaluate import evaluate  # noqa: E402

DEFAULT_METHODS = (
    "test", "bn", "tent", "lame", "note", "roid", "robust_bn", "rotta", "tribe", "balanced_bn", "unmixtns",
    "cofa", "bdn", "unitta",
)  # fmt: skip  (cotta: 34 forwards per batch, add it with --methods)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--methods", nargs="*", default=list(DEFAULT_METHODS))
    parser.add_argument("--settings", nargs="*", default=["i111", "n111", "nu11"])
    parser.add_argument("--precisions", nargs="*", default=["bf16"], help="compared with fp32")
    parser.add_argument("--S", type=int, default=20)
    parser.add_argument("--n-per-domain", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    bad = [p for p in args.precisions if p not in PRECISIONS or p == "fp32"]
    if bad:
        print(f"error: --precisions {bad}: expected some of {[p for p in PRECISIONS if p != 'fp32']}", file=sys.stderr)
        return 2
    precisions = ["fp32", *args.precisions]
    rows, diffs = [], {p: [] for p in args.precisions}
    start = time.perf_counter()
    for method in args.methods:
        for setting in args.settings:
            errors, n = {}, 0
            for precision in precisions:
                cell = Cell(method=method, setting=setting, S=args.S, n_per_domain=args.n_per_domain,
                            precision=precision, num_threads=args.threads)
                row = evaluate(cell)
                errors[precision], n = row["error"], row["n_samples"]  # percent
            for p in args.precisions:
                diffs[p].append(errors[p] - errors["fp32"])
            e = errors["fp32"] / 100.0
            noise = 100.0 * math.sqrt(max(e * (1 - e), 1e-12) / n)
            rows.append((method, setting, n, errors, noise))
            cells = " ".join(f"{errors[p]:6.2f}" for p in precisions)
            gaps = " ".join(f"{errors[p] - errors['fp32']:+6.2f}" for p in args.precisions)
            print(f"{method:14s} {setting:5s} n={n:5d} {cells}  diff {gaps}  (binomial sd {noise:.2f})", flush=True)
    for p, d in diffs.items():
        mean_abs = sum(abs(v) for v in d) / len(d)
        print(f"{p}: mean |error - fp32 error| {mean_abs:.2f} points over {len(d)} cells, max {max(map(abs, d)):.2f}")
    print(f"{time.perf_counter() - start:.0f} s")
    if args.markdown:
        head = " | ".join(["method", "setting", "images", *[f"{p} error %" for p in precisions],
                           *[f"{p} - fp32" for p in args.precisions]])
        print(f"| {head} |\n|" + "---|" * (3 + len(precisions) + len(args.precisions)))
        for method, setting, n, errors, _ in rows:
            values = [f"{errors[p]:.2f}" for p in precisions]
            values += [f"{errors[p] - errors['fp32']:+.2f}" for p in args.precisions]
            print(f"| {method} | {setting} | {n} | " + " | ".join(values) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

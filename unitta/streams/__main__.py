"""Inspect a benchmark stream without images: ``python -m unitta.streams --dataset cifar10 --setting nunu``.

Uses synthetic labels with the paper datasets' real pool sizes (``synthetic_labels``), prints a summary
(length, per-domain and per-class counts, run lengths, realised imbalance, reuse, drift per quarter)
and optionally draws the stream (``--plot stream.png``).
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from unitta.data.records import NUM_SEVERITIES
from unitta.files import os_error_text
from unitta.streams import SAMPLERS, make_stream, synthetic_labels
from unitta.streams.protocols import GRADUAL_SAMPLERS, PROTOCOL_SETTINGS
from unitta.streams.settings import DATASET_ALIASES, MAX_STREAM_LENGTH, SETTINGS_36


def _fmt_counts(counts: list[int], limit: int = 20) -> str:
    if len(counts) <= limit:
        return " ".join(str(c) for c in counts)
    arr = np.asarray(counts)
    head = " ".join(str(c) for c in counts[:5])
    tail = " ".join(str(c) for c in counts[-5:])
    return f"{head} ... {tail}  (min {arr.min()}, max {arr.max()}, {len(counts)} values)"


def format_summary(summary: dict, elapsed: float | None = None) -> str:
    """Readable multi-line text for ``Stream.summary()``."""
    f = summary["factors"]
    lines = [
        f"setting   {summary['setting']}: {summary['name']}",
        f"sampler   {summary['sampler']} (seed {summary['seed']}, dataset {summary['dataset']}"
        + (f", S={summary['S']}" if summary["S"] is not None else "")
        + ")",
        (f"factors   domain alpha={f['domain_alpha']:.4g} beta={f['domain_beta']:g} | "
         f"class alpha={f['class_alpha']:.4g} beta={f['class_beta']:g}") if f else
        ("factors   none (every corruption at severities 1..5..1)" if summary["sampler"] in GRADUAL_SAMPLERS else
         "factors   none (an order of every image once" + (f", delta={summary['delta']:g})" if summary.get("delta")
                                                          else ")")),
        f"length    {summary['length']:,}" + (f"  (sampled in {elapsed:.3f} s)" if elapsed is not None else ""),
        f"reused    {summary['images_reused']:,} positions re-used an image already drawn",
    ]
    for attr in ("domain", "class"):
        q = np.asarray(summary[f"{attr}_counts_per_quarter"])
        lines += [
            f"{attr:<6}    counts: {_fmt_counts(summary[f'{attr}_counts'])}",
            f"          states visited {summary[f'{attr}_states_visited']}, mean run length "
            f"{summary[f'{attr}_mean_run_length']:.2f}, head/tail ratio {summary[f'{attr}_head_tail_ratio']:.2f}, "
            f"max/min ratio {summary[f'{attr}_max_min_ratio']:.2f}",
            f"          drift: max total-variation distance of a quarter's marginal from the whole "
            f"stream's = {summary[f'{attr}_quarter_drift_tv']:.3f}",
        ]
        for i, row in enumerate(q):
            lines.append(f"          Q{i + 1}: {_fmt_counts(row.tolist())}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m unitta.streams", description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="cifar10", choices=sorted(DATASET_ALIASES))
    parser.add_argument("--setting", help="4-character code, e.g. nui1 (36 codes exist); default nunu, or the "
                        "sorted / dirichlet / gradual / gradual_correlated sampler's own code (1111 / n1i1 / i111 / "
                        "1111)")
    parser.add_argument("--sampler", default="official", choices=SAMPLERS)
    parser.add_argument("--seed", type=int, default=425)
    parser.add_argument("--domain-alpha", type=float)
    parser.add_argument("--domain-beta", type=float)
    parser.add_argument("--class-alpha", type=float)
    parser.add_argument("--class-beta", type=float)
    parser.add_argument("--S", type=int, help="official: per-state cap (default per dataset)")
    parser.add_argument("--length", type=int, help="exact: stream length (default: number of images)")
    parser.add_argument("--delta", type=float, help="dirichlet: the Dirichlet concentration (default 0.01)")
    parser.add_argument("--plot", help="write a PNG of the stream here")
    args = parser.parse_args(argv)
    if args.setting is None:
        args.setting = PROTOCOL_SETTINGS.get(args.sampler, "nunu")
    if args.setting not in {s.code for s in SETTINGS_36}:
        parser.error(f"--setting {args.setting!r}: expected one of {[s.code for s in SETTINGS_36]}")
    labels, domains = synthetic_labels(args.dataset)
    if args.sampler in GRADUAL_SAMPLERS:  # every corruption at every severity: domain = corruption * 5 + severity - 1
        labels, domains = synthetic_labels(args.dataset, int(domains.max() + 1) * NUM_SEVERITIES)
    problem = _size_problem(args, int(labels.max()) + 1, int(domains.max()) + 1)
    if problem:
        parser.error(problem)
    t0 = time.perf_counter()
    try:
        stream = make_stream(
            labels, domains, args.setting, dataset=args.dataset, sampler=args.sampler, seed=args.seed,
            domain_alpha=args.domain_alpha, domain_beta=args.domain_beta, class_alpha=args.class_alpha,
            class_beta=args.class_beta, S=args.S, length=args.length, delta=args.delta,
        )
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    elapsed = time.perf_counter() - t0
    print(f"synthetic {args.dataset} labels: {len(labels):,} images, real pool sizes")
    print(format_summary(stream.summary(), elapsed))
    if args.plot:
        from unitta.data import CORRUPTIONS  # lazy: torch; the synthetic datasets' 15 domains are the corruptions
        from unitta.streams.plot import plot_stream

        names = list(CORRUPTIONS) if stream.num_domains == len(CORRUPTIONS) else None
        if stream.num_domains == len(CORRUPTIONS) * NUM_SEVERITIES:  # a gradual stream's (corruption, severity)
            names = [f"{c}_{v}" for c in CORRUPTIONS for v in range(1, NUM_SEVERITIES + 1)]
        try:
            print(f"plot      {plot_stream(stream, args.plot, domain_names=names)}")
        except OSError as err:
            print(f"error: --plot {args.plot}: {os_error_text(err)}", file=sys.stderr)
            return 2
    return 0


def _size_problem(args, num_classes: int, num_domains: int) -> str | None:
    """One line when the seed or the stream asked for is out of range (before any memory is allocated)."""
    if not 0 <= args.seed <= 2**32 - 1:
        return f"--seed {args.seed}: must be in 0 .. {2**32 - 1} (numpy's seed range)"
    for flag, value in (("--S", args.S), ("--length", args.length)):
        if value is not None and value < 1:
            return f"{flag} {value}: must be >= 1"
    states = num_classes * num_domains
    if args.S is not None and args.S * states > MAX_STREAM_LENGTH:
        return (f"--S {args.S}: {states} (domain, class) states make a stream of up to {args.S * states:,} images, "
                f"more than {MAX_STREAM_LENGTH:,}; use --S <= {MAX_STREAM_LENGTH // states}")
    if args.length is not None and args.length > MAX_STREAM_LENGTH:
        return f"--length {args.length}: more than {MAX_STREAM_LENGTH:,} positions; use a shorter stream"
    return None


if __name__ == "__main__":
    raise SystemExit(main())

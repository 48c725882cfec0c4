"""Operator calls and host syncs per adapted batch, a CPU proxy for a method's GPU kernel launches.

    python bench/opcount.py [--methods test bn unitta ...] [--batch 64] [--batches 3] [--all-ops]

On a GPU each aten operator is (at least) one kernel launch, and a host sync (``.item()``, ``nonzero``,
boolean-mask indexing, ``torch.unique``, ``if tensor:``) stalls the launch queue until the device has
caught up. Counting both on the CPU, with ``torch.profiler``, tells how launch-bound a method's forward
is without a GPU. ``count_ops`` returns per-batch averages over ``batches`` batches after ``warmup``
batches (so that one-off state building is not counted).

Counting: ``aten_ops`` is the number of *top-level* ``aten::`` events, i.e. operators called from Python
(an operator that calls others, like ``aten::batch_norm`` -> ``aten::native_batch_norm``, counts once),
which is what a GPU launches kernels for; ``--all-ops`` counts every nested ``aten::`` event instead.
``syncs`` counts the operators that force a device-to-host copy (``SYNC_OPS``) at any nesting depth,
once per outermost one (``aten::item`` calls ``aten::_local_scalar_dense``: one sync).

The table prints each method's figures and their ratio to TEST's (the source model, one plain forward).
The model is the embedded Fashion-MNIST-C ResNet-20 (random weights if its checkpoint is missing: the
counts do not depend on the weights, but data-dependent decisions such as BDN's domain expansion do).
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile

from unitta.methods import get_method

# operators that copy a device value to the host (or whose output shape depends on device values)
SYNC_OPS = frozenset(
    {
        "aten::item",
        "aten::_local_scalar_dense",
        "aten::nonzero",
        "aten::nonzero_static",
        "aten::is_nonzero",
        "aten::equal",
        "aten::unique",
        "aten::_unique",
        "aten::_unique2",
        "aten::unique_dim",
        "aten::unique_consecutive",
        "aten::masked_select",
        "aten::tolist",
    }
)

DEFAULT_METHODS = (
    "test", "bn", "unitta", "bdn", "balanced_bn", "robust_bn", "unmixtns", "roid_unmixtns", "cofa", "note",
)  # fmt: skip


def _is_sync(name: str) -> bool:
    return name in SYNC_OPS or name.startswith("aten::unique")


def _top_level(events) -> list:
    """The events not nested inside another of ``events`` (by CPU time interval, same thread)."""
    ordered = sorted(events, key=lambda e: (e.thread, e.time_range.start, -e.time_range.end))
    top, end, thread = [], -1, None
    for e in ordered:
        if e.thread != thread:
            thread, end = e.thread, -1
        if e.time_range.start >= end:
            top.append(e)
            end = e.time_range.end
    return top


def count_ops(method: str, model, info, x: torch.Tensor, warmup: int = 2, batches: int = 3, all_ops: bool = False,
              **overrides) -> dict:
    """Per-batch averages of aten operator calls (``aten_ops``) and host syncs (``syncs``) of ``method``.

    ``model``/``info`` as from ``unitta.models.load_model``; ``x`` is one batch (B, C, H, W), fed
    ``warmup + batches`` times (the method adapts on every one; only the last ``batches`` are counted).
    ``aten_ops`` counts top-level operators unless ``all_ops``. Also returns ``sync_names``: the sync
    operators seen, with their per-batch counts.
    """
    m = get_method(method, model, info, dataset=info.dataset, **overrides)
    for _ in range(warmup):
        m(x)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(batches):
            m(x)
    events = list(prof.events())
    aten = [e for e in events if e.name.startswith("aten::")]
    counted = aten if all_ops else _top_level(aten)
    syncs: dict[str, int] = {}
    # one sync per outermost sync operator (``item`` calls ``_local_scalar_dense``: one sync, not two)
    for e in _top_level([e for e in aten if _is_sync(e.name)]):
        syncs[e.name] = syncs.get(e.name, 0) + 1
    return {
        "aten_ops": len(counted) / batches,
        "syncs": sum(syncs.values()) / batches,
        "sync_names": {k: v / batches for k, v in sorted(syncs.items())},
    }


def count_test_baseline(model, info, x: torch.Tensor, warmup: int = 2, batches: int = 3, all_ops: bool = False) -> dict:
    """``count_ops`` of TEST (the source model), the reference point of the ratios."""
    return count_ops("test", model, info, x, warmup, batches, all_ops)


def _load(batch: int, seed: int):
    from unitta.models import load_model

    try:
        model, info = load_model("fmnist-c")
        note = ""
    except FileNotFoundError:
        from unitta.models.zoo import build_model

        model, info = build_model("fmnist-c")
        note = "note: embedded checkpoint missing, random weights"
    try:
        from unitta.data import load_dataset

        data = load_dataset("fmnist-c", n_per_domain=10 * max(1, -(-batch // 150)))  # a multiple of 10 classes
        # spread over the dataset (which is stored domain by domain) so that the batch mixes domains
        x = data.get_batch(np.linspace(0, len(data.labels) - 1, batch).astype(np.int64))
    except Exception as exc:  # noqa: BLE001 - counts do not need real images; say so
        x = torch.rand(batch, 3, info.input_size, info.input_size, generator=torch.Generator().manual_seed(seed))
        note += f" random images ({type(exc).__name__})"
    return model.eval(), info, x, note


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--methods", nargs="*", default=list(DEFAULT_METHODS))
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--all-ops", action="store_true", help="count nested aten ops too (default: top-level only)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.batch < 1 or args.batches < 1 or args.warmup < 0:
        print("error: --batch and --batches must be >= 1, --warmup >= 0", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    model, info, x, note = _load(args.batch, args.seed)
    kind = "all aten ops" if args.all_ops else "top-level aten ops"
    print(f"{info.name}, batch {x.shape[0]}, {args.batches} counted batches after {args.warmup} warm-up; "
          f"{kind} per batch")
    if note:
        print(note)
    base = count_ops("test", model, info, x, args.warmup, args.batches, args.all_ops)
    print(f"{'method':16s} {'aten ops':>9s} {'x TEST':>7s} {'syncs':>6s}  sync ops")
    for name in args.methods:
        try:
            r = base if name == "test" else count_ops(name, model, info, x, args.warmup, args.batches, args.all_ops)
        except Exception as exc:  # noqa: BLE001 - one failing method must not end the table
            print(f"{name:16s} error: {type(exc).__name__}: {exc}"[:120])
            continue
        detail = ", ".join(f"{k.removeprefix('aten::')} {v:g}" for k, v in r["sync_names"].items())
        print(f"{name:16s} {r['aten_ops']:9.1f} {r['aten_ops'] / base['aten_ops']:7.2f} {r['syncs']:6.1f}  {detail}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

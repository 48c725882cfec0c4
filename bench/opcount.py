"""Operator calls and host syncs per adapted batch, a CPU proxy for a method's GPU kernel launches.

    UNITTA_DEVICE_PATHS=cuda python bench/opcount.py [--methods ...] [--batch 64] [--warmup 4] [--batches 20]
    python bench/opcount.py --repeat [--methods test bn unitta ...] [--batches 3] [--all-ops]

By default (``steady_counts``) every registered method runs on the embedded ResNet-20 over warmup + batches
consecutive batches of a real Fashion-MNIST-C stream (``--setting``, default nui1), the methods that need source
images with the embedded source split, and the table gives, after the warm-up: the batches that convolve a shape
no earlier batch did (a cuDNN algorithm search each under ``cudnn.benchmark``), host synchronisations per batch
(``unitta.contract.host_sync.HostSyncRecorder``: ``.tolist()`` and ``.cpu()`` included, which leave no profiler
event on the CPU), host-to-device copies a GPU run would make, and top-level aten operators per batch. Under
``UNITTA_DEVICE_PATHS=cuda`` a CPU run takes the branches a CUDA run takes (docs/benchmarks.md "Device paths").
``--repeat``: the earlier count below, one batch fed again and again.

On a GPU each aten operator is (at least) one kernel launch, and a host sync (``.item()``, ``nonzero``,
boolean-mask indexing, ``torch.unique``, ``if tensor:``) stalls the launch queue until the device has
caught up. Counting both on the CPU, with ``torch.profiler``, tells how launch-bound a method's forward
is without a GPU. ``count_ops`` returns per-batch averages over ``batches`` batches after ``warmup``
batches (so that one-off state building is not counted).

Counting: ``aten_ops`` is the number of *top-level* ``aten::`` events, i.e. operators called from Python
(an operator that calls others, like ``aten::batch_norm`` -> ``aten::native_batch_norm``, counts once),
which is what a GPU launches kernels for; ``--all-ops`` counts every nested ``aten::`` event instead.
``kernels`` counts the operators that compute something themselves: leave out the ones that only
allocate or re-describe a tensor (``METADATA_OPS``: views, ``empty``, ``resize_``, ``detach``, ...; no
GPU kernel), then count the events that call no other of the rest (``aten::conv2d`` ->
``aten::mkldnn_convolution`` counts once, as the one kernel it launches).
``syncs`` counts the operators that force a device-to-host copy (``SYNC_OPS``) at any nesting depth,
once per outermost one (``aten::item`` calls ``aten::_local_scalar_dense``: one sync).

Multi-tensor operators (``aten::_foreach_*``, ``aten::_fused_*``: multi-tensor EMA updates, fused and
foreach optimisers) count as one operator in every column, and what they call is not counted: on CUDA
each is one multi-tensor kernel (step counts stay on the device), while the CPU runs them as a loop of
per-tensor operators (and the fused CPU Adam reads each parameter's step count on the host), which is
not what a GPU pays. ``count_ops(..., collapse_multi_tensor=False)`` counts that loop too (the counting
of the tables in docs/benchmarks.md before this rule).
"""

from __future__ import annotations

import argparse
import contextlib
import sys

import numpy as np
import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils._python_dispatch import TorchDispatchMode

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


MULTI_TENSOR_PREFIXES = ("aten::_foreach_", "aten::_fused_")

# operators that only allocate or re-describe a tensor: no kernel on a GPU
METADATA_OPS = frozenset(
    "aten::" + name
    for name in (
        "empty", "empty_strided", "empty_like", "resize_", "as_strided", "as_strided_", "view", "_unsafe_view",
        "view_as", "reshape", "_reshape_alias", "expand", "expand_as", "transpose", "t", "permute", "unsqueeze",
        "squeeze", "select", "slice", "narrow", "detach", "alias", "unbind", "split", "split_with_sizes", "chunk",
        "lift_fresh", "resolve_conj", "resolve_neg", "numpy_T", "unflatten", "flatten", "_to_copy_meta",
    )
)  # fmt: skip


def _is_sync(name: str) -> bool:
    return name in SYNC_OPS or name.startswith("aten::unique")


def _ordered(events) -> list:
    return sorted(events, key=lambda e: (e.thread, e.time_range.start, -e.time_range.end))


def _top_level(events) -> list:
    """The events not nested inside another of ``events`` (by CPU time interval, same thread)."""
    top, end, thread = [], -1, None
    for e in _ordered(events):
        if e.thread != thread:
            thread, end = e.thread, -1
        if e.time_range.start >= end:
            top.append(e)
            end = e.time_range.end
    return top


def _leaves(events) -> list:
    """The events that contain no other of ``events`` (the operators that do the work themselves)."""
    ordered = _ordered(events)
    leaves = []
    for e, following in zip(ordered, ordered[1:] + [None]):
        has_child = (
            following is not None
            and following.thread == e.thread
            and following.time_range.start < e.time_range.end
        )
        if not has_child:
            leaves.append(e)
    return leaves


def _without_multi_tensor_internals(events) -> list:
    """``events`` minus those nested inside a multi-tensor operator (which itself stays)."""
    multi = [e for e in events if e.name.startswith(MULTI_TENSOR_PREFIXES)]
    if not multi:
        return list(events)
    inside: set[int] = set()
    outer = _top_level(multi)
    ordered = _ordered(events)
    for m in outer:
        for e in ordered:
            if e is not m and e.thread == m.thread and m.time_range.start <= e.time_range.start < m.time_range.end:
                inside.add(id(e))
    return [e for e in events if id(e) not in inside]


def count_ops(method: str, model, info, x: torch.Tensor, warmup: int = 2, batches: int = 3, all_ops: bool = False,
              collapse_multi_tensor: bool = True, **overrides) -> dict:
    """Per-batch averages of aten operator calls (``aten_ops``), leaf compute operators (``kernels``) and
    host syncs (``syncs``) of ``method``.

    ``model``/``info`` as from ``unitta.models.load_model``; ``x`` is one batch (B, C, H, W), fed
    ``warmup + 2 * batches`` times (the method adapts on every one; ``batches`` are profiled after the warm-up, the
    next ``batches`` recorded by ``HostSyncRecorder``, never both at once: its dispatch mode doubles the events).
    ``aten_ops`` counts top-level operators unless ``all_ops``. Multi-tensor operators count once unless
    ``collapse_multi_tensor`` is False (module docstring). Also returns ``sync_names``: the sync
    operators seen, with their per-batch counts; ``recorded_syncs`` and ``host_data``: the host synchronisations and
    tensors made from host data per batch that ``HostSyncRecorder`` sees (as ``steady_counts``).
    """
    from unitta.contract.host_sync import HostSyncRecorder

    m = get_method(method, model, info, dataset=info.dataset, **overrides)
    for _ in range(warmup):
        m(x)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(batches):
            m(x)
    # recorded in batches of their own: under the recorder's dispatch mode every operator that reaches it runs again
    # inside its call (two profiler events for one launch) and autograd runs a few differently (add for add_)
    recorder = HostSyncRecorder()
    with recorder:
        for _ in range(batches):
            m(x)
    aten = [e for e in prof.events() if e.name.startswith("aten::")]
    if collapse_multi_tensor:
        aten = _without_multi_tensor_internals(aten)
    counted = aten if all_ops else _top_level(aten)
    kernels = _leaves([e for e in aten if e.name not in METADATA_OPS])
    syncs: dict[str, int] = {}
    # one sync per outermost sync operator (``item`` calls ``_local_scalar_dense``: one sync, not two)
    for e in _top_level([e for e in aten if _is_sync(e.name)]):
        syncs[e.name] = syncs.get(e.name, 0) + 1
    return {
        "aten_ops": len(counted) / batches,
        "kernels": len(kernels) / batches,
        "syncs": sum(syncs.values()) / batches,
        "sync_names": {k: v / batches for k, v in sorted(syncs.items())},
        # the recorder of ``steady_counts``: ``.tolist()``, ``.cpu()`` and reads the profiler misses included
        "recorded_syncs": sum(recorder.counts.values()) / batches,
        "host_data": sum(recorder.host_data.values()) / batches,
    }


def count_test_baseline(model, info, x: torch.Tensor, warmup: int = 2, batches: int = 3, all_ops: bool = False) -> dict:
    """``count_ops`` of TEST (the source model), the reference point of the ratios."""
    return count_ops("test", model, info, x, warmup, batches, all_ops)


def _conv_shapes(prof) -> set[tuple]:
    """The (input, weight) shapes of every convolution in ``prof`` (its ``aten::convolution`` events, module or
    functional): under cuDNN's benchmark mode each new one costs an algorithm search."""
    return {tuple(map(tuple, e.input_shapes[:2])) for e in prof.events() if e.name == "aten::convolution"}


class ConvShapes(TorchDispatchMode):
    """The (input, weight) shapes of the convolutions run inside it, as ``_conv_shapes``, without a profiler."""

    def __init__(self) -> None:
        super().__init__()
        self.shapes: set[tuple] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.convolution.default:
            self.shapes.add((tuple(args[0].shape), tuple(args[1].shape)))
        return func(*args, **(kwargs or {}))


def steady_counts(method: str, model, info, batches: list[torch.Tensor], warmup: int = 4, source=None,
                  all_ops: bool = False, collapse_multi_tensor: bool = True, count_ops: bool = True,
                  **overrides) -> dict:
    """What ``method`` costs per batch in its steady state, over ``batches`` (distinct stream batches) after the
    first ``warmup`` of them: ``new_shape_batches`` (batches that convolve a shape no earlier batch did) and
    ``new_shapes`` (how many such shapes), ``aten_ops`` and ``kernels`` (as ``count_ops``), ``syncs`` and
    ``copies`` (host synchronisations and host-to-device copies per batch, ``HostSyncRecorder``: ``.tolist()``
    and ``.cpu()`` included, on the branches this process takes: run under ``UNITTA_DEVICE_PATHS=cuda`` for a
    GPU's), and ``sync_sites`` (operation and line, per batch). ``source``: the labelled source set of the
    methods that need one (``unitta.data.load_source``). ``count_ops=False``: no profiler (it costs 4-25x the
    batches on a CPU), shapes and host synchronisations only; ``aten_ops`` and ``kernels`` are then None."""
    from unitta.contract.host_sync import HostSyncRecorder

    if len(batches) <= warmup:
        raise ValueError(f"steady_counts needs more than warmup={warmup} batches, got {len(batches)}")
    m = get_method(method, model, info, dataset=info.dataset, source=source, **overrides)
    seen: set[tuple] = set()
    new_batches, new_shapes, ops, kernels = 0, 0, 0, 0
    recorder = HostSyncRecorder()
    for i, x in enumerate(batches):
        steady = i >= warmup
        convs = ConvShapes()
        with (profile(activities=[ProfilerActivity.CPU], record_shapes=True) if count_ops else convs) as prof:
            with recorder if steady else contextlib.nullcontext():
                m(x)
        shapes = _conv_shapes(prof) if count_ops else convs.shapes
        if steady:
            fresh = shapes - seen
            new_batches += bool(fresh)
            new_shapes += len(fresh)
        if steady and count_ops:
            aten = [e for e in prof.events() if e.name.startswith("aten::")]
            if collapse_multi_tensor:
                aten = _without_multi_tensor_internals(aten)
            ops += len(aten if all_ops else _top_level(aten))
            kernels += len(_leaves([e for e in aten if e.name not in METADATA_OPS]))
        seen |= shapes
    n = len(batches) - warmup
    return {
        "new_shape_batches": new_batches,
        "new_shapes": new_shapes,
        "steady_batches": n,
        "aten_ops": ops / n if count_ops else None,
        "kernels": kernels / n if count_ops else None,
        "syncs": sum(recorder.counts.values()) / n,
        "copies": sum(recorder.copies.values()) / n,
        "host_data": sum(recorder.host_data.values()) / n,
        "host_data_sites": {f"{what} at {where}": c / n for (what, where), c in recorder.host_data.most_common()},
        "sync_sites": {f"{what} at {where}": c / n for (what, where), c in recorder.counts.most_common()},
    }


def stream_batches(count: int, batch: int, setting: str = "nui1", seed: int = 425,
                   n_per_domain: int | None = None) -> tuple:
    """``count`` consecutive batches of a real Fashion-MNIST-C stream (``setting``, the official sampler), with
    the embedded ResNet-20: (model, info, batches). ``n_per_domain``: a subset of the images per corruption (the
    per-state cap S then at most a (domain, class) pool, as a cell does). Raises FileNotFoundError where the
    embedded data is missing."""
    from unitta.data import load_dataset
    from unitta.models import load_model
    from unitta.streams import make_stream
    from unitta.streams.settings import default_state_cap

    model, info = load_model("fmnist-c")
    data = load_dataset("fmnist-c", n_per_domain=n_per_domain)
    cap = {} if n_per_domain is None else {
        "S": min(default_state_cap(setting, "fmnist-c"), max(1, n_per_domain // data.num_classes))
    }
    stream = make_stream(data.labels, data.domains, setting, dataset="fmnist-c", seed=seed, **cap)
    if len(stream.indices) < count * batch:
        raise ValueError(f"the {setting} stream has {len(stream.indices)} images, fewer than {count} x {batch}")
    batches = [data.get_batch(stream.indices[i * batch : (i + 1) * batch]) for i in range(count)]
    return model.eval(), info, batches


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


def _repeated(args) -> int:
    """The earlier table: one batch fed ``warmup + batches`` times, default methods (``--repeat``)."""
    model, info, x, note = _load(args.batch, args.seed)
    kind = "all aten ops" if args.all_ops else "top-level aten ops"
    print(f"{info.name}, batch {x.shape[0]}, {args.batches} counted batches after {args.warmup} warm-up; "
          f"{kind} per batch")
    if note:
        print(note)
    collapse = not args.no_collapse
    base = count_ops("test", model, info, x, args.warmup, args.batches, args.all_ops, collapse)
    print(f"{'method':16s} {'aten ops':>9s} {'x TEST':>7s} {'kernels':>8s} {'x TEST':>7s} {'syncs':>6s}  sync ops")
    for name in args.methods or DEFAULT_METHODS:
        try:
            r = base if name == "test" else count_ops(
                name, model, info, x, args.warmup, args.batches, args.all_ops, collapse
            )
        except Exception as exc:  # noqa: BLE001 - one failing method must not end the table
            print(f"{name:16s} error: {type(exc).__name__}: {exc}"[:120])
            continue
        detail = ", ".join(f"{k.removeprefix('aten::')} {v:g}" for k, v in r["sync_names"].items())
        print(f"{name:16s} {r['aten_ops']:9.1f} {r['aten_ops'] / base['aten_ops']:7.2f} {r['kernels']:8.1f} "
              f"{r['kernels'] / base['kernels']:7.2f} {r['syncs']:6.1f}  {detail}")
    return 0


def _steady(args) -> int:
    """Every registered method (or ``--methods``) over distinct stream batches (module docstring)."""
    from unitta.methods.parts.device import DevicePaths
    from unitta.methods.parts.registry import list_methods, method_class

    names = args.methods or list_methods()
    unknown = sorted(set(names) - set(list_methods()))
    if unknown:
        print(f"error: unknown method(s) {unknown}; `python -m unitta methods` lists them", file=sys.stderr)
        return 2
    model, info, batches = stream_batches(args.warmup + args.batches, args.batch, args.setting, args.seed)
    source = None
    if any(method_class(n).needs_source for n in names):
        from unitta.data import load_source

        source = load_source("fmnist-c")
    kind = "all aten ops" if args.all_ops else "top-level aten ops"
    paths = DevicePaths.from_environment().mode  # what every method built below reads
    print(f"{info.name}, Fashion-MNIST-C stream {args.setting} (seed {args.seed}), batch {args.batch}: "
          f"{args.batches} distinct batches after {args.warmup} warm-up; device paths: {paths}; {kind}")
    collapse = not args.no_collapse
    base = None
    print(f"{'method':16s} {'new-shape batches':>17s} {'new shapes':>10s} {'syncs':>6s} {'H2D':>5s} {'host data':>9s} "
          f"{'aten ops':>9s} {'x TEST':>7s}  sync and host-data sites (per batch)")
    for name in (["test"] if "test" not in names else []) + list(names):
        try:
            r = steady_counts(name, model, info, batches, args.warmup,
                              source if method_class(name).needs_source else None, args.all_ops, collapse)
        except Exception as exc:  # noqa: BLE001 - one failing method must not end the table
            print(f"{name:16s} error: {type(exc).__name__}: {exc}"[:120])
            continue
        base = base or r
        if name == "test" and "test" not in names:
            continue
        sites = ", ".join(f"{k} {v:g}" for k, v in [*r["sync_sites"].items(), *r["host_data_sites"].items()][:4])
        print(f"{name:16s} {r['new_shape_batches']:>11d} of {r['steady_batches']:<3d} {r['new_shapes']:10d} "
              f"{r['syncs']:6.2f} {r['copies']:5.1f} {r['host_data']:9.1f} {r['aten_ops']:9.1f} "
              f"{r['aten_ops'] / base['aten_ops']:7.2f}  "
              f"{sites}")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--methods", nargs="*", default=None,
                        help="default: every registered method (--repeat: the normalisation methods)")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--warmup", type=int, default=None, help="warm-up batches (default 4; --repeat 2)")
    parser.add_argument("--batches", type=int, default=None, help="counted batches (default 20; --repeat 3)")
    parser.add_argument("--setting", default="nui1", help="the stream's setting (default nui1)")
    parser.add_argument("--repeat", action="store_true",
                        help="the earlier count: one fixed batch fed again and again (no shapes, no .tolist())")
    parser.add_argument("--all-ops", action="store_true", help="count nested aten ops too (default: top-level only)")
    parser.add_argument("--no-collapse", action="store_true",
                        help="count what multi-tensor operators call on the CPU too (module docstring)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=None, help="stream seed (default 425; --repeat: 0)")
    args = parser.parse_args(argv)
    args.warmup = args.warmup if args.warmup is not None else (2 if args.repeat else 4)
    args.batches = args.batches if args.batches is not None else (3 if args.repeat else 20)
    args.seed = args.seed if args.seed is not None else (0 if args.repeat else 425)
    if args.batch < 1 or args.batches < 1 or args.warmup < 0:
        print("error: --batch and --batches must be >= 1, --warmup >= 0", file=sys.stderr)
        return 2
    torch.set_num_threads(args.threads)
    return _repeated(args) if args.repeat else _steady(args)


if __name__ == "__main__":
    sys.exit(main())

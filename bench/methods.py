"""Speed and memory of every registered TTA method on the same batches.

    python bench/methods.py [--batches 16] [--single 64] [--methods unitta bdn ...] [--threads 1]
    python bench/methods.py --table [--S 100]      # Fashion-MNIST-C error table via evaluate()

For every method in ``list_methods()`` (so methods added later are picked up automatically) it runs
the same batches of the embedded Fashion-MNIST-C model at batch size 64 and at batch size 1, and
prints: time per image divided by TEST's (all methods timed round-robin, one batch each per round,
fastest round counted, so that the load of other processes on a shared machine hits all alike),
forwards and backwards per batch, and the peak memory the method needed on top of what was allocated
before it started (CUDA: max_memory_allocated; CPU: peak resident set size sampled every millisecond,
minus the level before the method was built).
Target : UniTTA at most 3.5x TEST (three forwards are inherent).

If the embedded checkpoint or the dataset is not there yet, the same architecture with random
weights and random images are used: the timings are the same, the adaptation is not meaningful.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import threading
import time

import numpy as np
import torch

from unitta.contract import check_source
from unitta.methods import get_method, list_methods, method_class

TARGET_UNITTA_RATIO = 3.5  # UniTTA may cost at most 3.5x TEST on the CPU (docs/benchmarks.md)


def load_model_and_batches(n_images: int, seed: int):
    from unitta.models import load_model

    note = []
    try:
        model, info = load_model("fmnist-c")
    except FileNotFoundError as exc:
        from unitta.models.zoo import build_model

        model, info = build_model("fmnist-c")
        note.append(f"untrained ResNet-20 (checkpoint missing: {str(exc).splitlines()[0][:80]}...)")
    try:
        from unitta.data import load_dataset

        data = load_dataset("fmnist-c", n_per_domain=100)
        rng = np.random.default_rng(seed)
        # a domain-block stream (continual-like) so that BDN meets several domains
        order = np.argsort(data.domains, kind="stable")
        idx = np.concatenate([rng.permutation(order[data.domains[order] == d]) for d in np.unique(data.domains)])
        images = data.get_batch(idx[np.linspace(0, len(idx) - 1, n_images).astype(int)])
    except Exception as exc:  # noqa: BLE001 - a benchmark falls back to random images, and says so
        gen = torch.Generator().manual_seed(seed)
        images = torch.rand(n_images, 3, info.input_size, info.input_size, generator=gen)
        note.append(f"random images ({type(exc).__name__}: {str(exc)[:60]})")
    return model.eval(), info, images, note


class PeakRSS:
    """Peak resident set size (MiB) of this process while the block runs, sampled every millisecond."""

    def __init__(self) -> None:
        self.page = os.sysconf("SC_PAGE_SIZE")
        self.peak = 0
        self._stop = threading.Event()

    def rss(self) -> int:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * self.page

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.rss())
            time.sleep(0.001)

    def __enter__(self):
        gc.collect()
        self.base = self.rss()
        self.peak = self.base
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.rss())

    @property
    def extra_mib(self) -> float:
        return (self.peak - self.base) / 2**20


def build_method(name, model, info, images, device):
    """``get_method`` on the Fashion-MNIST-C presets; a method that needs source images (EATA) gets the contract's
    stand-in source set (these images labelled by the model), so its one-time source pass runs in the warm-up."""
    source = check_source(model, images[:256].to(device)) if method_class(name).needs_source else None
    return get_method(name, model, info, dataset="fmnist-c", source=source)


def _memory_child(queue, name, model, info, images, batch_size, n_batches, device) -> None:
    try:
        batches = [images[i * batch_size : (i + 1) * batch_size].to(device) for i in range(n_batches)]
        if device.type == "cuda":
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
            before = torch.cuda.memory_allocated(device)
        with PeakRSS() as rss:
            method = build_method(name, model, info, images, device)
            for x in batches:
                out = method(x)
                if not torch.isfinite(out).all():
                    raise FloatingPointError("non-finite output")
        if device.type == "cuda":
            peak = (torch.cuda.max_memory_allocated(device) - before) / 2**20
        else:
            peak = rss.extra_mib
        cost = method.cost
        queue.put({
            "peak_mib": peak,
            "forwards": cost.forwards / cost.batches,
            "backwards": cost.backwards / cost.batches,
        })
    except Exception as exc:  # noqa: BLE001 - reported in the table
        queue.put({"error": f"{type(exc).__name__}: {exc}"[:60]})


def measure_memory(name, model, info, images, batch_size, n_batches, device):
    """Peak memory (MiB) that building ``name`` and running ``n_batches`` batches needed, and its cost.

    CPU: run in a forked child, so that memory another method freed (and the allocator kept) cannot
    hide this method's needs; the peak resident size above the child's starting level is reported.
    """
    import multiprocessing as mp

    if device.type == "cuda":
        queue: list = []
        _memory_child(type("Q", (), {"put": queue.append})(), name, model, info, images, batch_size, n_batches, device)
        return queue[0]
    ctx = mp.get_context("fork")
    queue = ctx.Queue()
    child = ctx.Process(target=_memory_child, args=(queue, name, model, info, images, batch_size, n_batches, device))
    child.start()
    result = queue.get()
    child.join()
    return result


def measure_speed(names, model, info, images, batch_size, n_batches, device):
    """Seconds per image of every method, timed round-robin (one batch of each method per round) so that
    load changes on a shared machine hit all methods alike; the fastest round of each method counts."""
    methods, best = {}, {}
    for name in names:
        try:
            methods[name] = build_method(name, model, info, images, device)
            methods[name](images[:batch_size].to(device))  # warm-up, not timed
            best[name] = float("inf")
        except Exception as exc:  # noqa: BLE001 - one failing method must not end the benchmark
            best[name] = f"{type(exc).__name__}: {exc}"[:60]
    for i in range(1, n_batches + 1):
        x = images[i * batch_size : (i + 1) * batch_size].to(device)
        for name, method in methods.items():
            if isinstance(best[name], str):
                continue
            try:
                before = method.cost.seconds
                method(x)
                best[name] = min(best[name], method.cost.seconds - before)
            except Exception as exc:  # noqa: BLE001
                best[name] = f"{type(exc).__name__}: {exc}"[:60]
    return {n: (v / batch_size if not isinstance(v, str) else v) for n, v in best.items()}


def speed_table(args) -> None:
    torch.set_num_threads(args.threads)
    device = torch.device(args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu"))
    n_images = max(64 * (args.batches + 1), args.single + 1)
    model, info, images, note = load_model_and_batches(n_images, args.seed)
    model = model.to(device)
    names = args.methods or list_methods()
    if "test" not in names:
        names = ["test", *names]
    print(f"model {info.name} ({info.dataset}), device {device}, {torch.get_num_threads()} thread(s)")
    for line in note:
        print(f"note: {line}")
    print(f"B=64: {args.batches} timed rounds; B=1: {args.single} timed rounds; "
          "one warm-up batch each; memory from 2 batches")
    header = (
        f"{'method':16s} | {'x TEST B=64':>11s} {'ms/img':>7s} {'fw/b':>5s} {'bw/b':>5s} {'MiB':>7s} | "
        f"{'x TEST B=1':>10s} {'ms/img':>7s} {'MiB':>7s}"
    )
    print(header)
    print("-" * len(header))
    memory = {(name, bs): measure_memory(name, model, info, images, bs, 2, device) for name in names for bs in (64, 1)}
    speed = {
        bs: measure_speed(names, model, info, images, bs, nb, device)
        for bs, nb in ((64, args.batches), (1, args.single))
    }
    results = {}
    for name in names:
        results[name] = {}
        for bs in (64, 1):
            mem = dict(memory[(name, bs)])
            if isinstance(speed[bs][name], str):
                mem = {"error": speed[bs][name]}
            else:
                mem["s_per_image"] = speed[bs][name]
            results[name][bs] = mem
    for name in names:
        row = results[name]
        cells = []
        for bs in (64, 1):
            r, base = row[bs], results["test"][bs]
            if "error" in r:
                cells.append(f"{r['error']}")
                continue
            ratio = r["s_per_image"] / base["s_per_image"] if "s_per_image" in base else float("nan")
            if bs == 64:
                cells.append(
                    f"{ratio:11.2f} {1e3 * r['s_per_image']:7.3f} {r['forwards']:5.1f} {r['backwards']:5.1f} "
                    f"{r['peak_mib']:7.1f}"
                )
            else:
                cells.append(f"{ratio:10.2f} {1e3 * r['s_per_image']:7.3f} {r['peak_mib']:7.1f}")
        print(f"{name:16s} | " + " | ".join(cells))
    if "unitta" in results and "s_per_image" in results["unitta"][64]:
        ratio = results["unitta"][64]["s_per_image"] / results["test"][64]["s_per_image"]
        verdict = "meets" if ratio <= TARGET_UNITTA_RATIO else "misses"
        print(f"UniTTA at B=64: {ratio:.2f}x TEST ({verdict} the {TARGET_UNITTA_RATIO}x target)")
        if "bdn" in results and "s_per_image" in results["bdn"][64]:
            bdn = results["bdn"][64]["s_per_image"] / results["test"][64]["s_per_image"]
            print(f"BDN alone: {bdn:.2f}x TEST -> bookkeeping beyond 3 plain forwards: {bdn - 3:+.2f}x TEST")


TABLE_METHODS = ("test", "bn", "balanced_bn", "bdn", "bdn_nofilter", "cofa", "cofa_nofilter", "unitta")
TABLE_SETTINGS = ("i111", "i1i1", "n111", "nu11", "n1n1", "nunu")


def error_table(args) -> None:
    """Fashion-MNIST-C error (%) per setting and method, official sampler, via evaluate(Cell(...))."""
    from unitta.cell import Cell
    from unitta.data import load_dataset
    from unitta.evaluate import evaluate
    from unitta.models import load_model

    torch.set_num_threads(args.threads)
    dataset = load_dataset("fmnist-c")
    model_and_info = load_model("fmnist-c", args.model)
    methods = args.methods or TABLE_METHODS
    settings = tuple(args.settings or TABLE_SETTINGS)
    errors: dict[str, dict[str, float]] = {m: {} for m in methods}
    lengths, domains = {}, {m: {} for m in methods}
    for setting in settings:
        for name in methods:
            t0 = time.perf_counter()
            cell = Cell(dataset="fmnist-c", model=args.model, method=name, setting=setting, S=args.S,
                        seed=args.seed_stream)
            row = evaluate(cell, dataset=dataset, model_and_info=model_and_info)
            errors[name][setting] = row["error"]
            domains[name][setting] = row["domains_discovered"]
            lengths[setting] = row["n_samples"]
            print(f"  {setting} {name:14s} error {row['error']:6.2f}  n={row['n_samples']}  "
                  f"domains={row['domains_discovered']}  {time.perf_counter() - t0:5.1f}s", file=sys.stderr, flush=True)
    print(f"Fashion-MNIST-C, {model_and_info[1].name}, official sampler, S={args.S}, seed {args.seed_stream}, "
          "batch 64: error (%)")
    print("| method | " + " | ".join(settings) + " | avg |")
    print("|---|" + "---|" * (len(settings) + 1))
    print("| stream length | " + " | ".join(str(lengths[s]) for s in settings) + " | |")
    for name in methods:
        vals = [errors[name][s] for s in settings]
        print(f"| {name} | " + " | ".join(f"{v:.2f}" for v in vals) + f" | {np.mean(vals):.2f} |")
    for name in methods:
        if any(v is not None for v in domains[name].values()):
            print(f"domains discovered by {name}: " + ", ".join(f"{s}={domains[name][s]}" for s in settings))


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--methods", nargs="*", default=None, help="default: every registered method")
    parser.add_argument("--batches", type=int, default=16, help="timed batches of 64")
    parser.add_argument("--single", type=int, default=64, help="timed batches of 1")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--table", action="store_true", help="Fashion-MNIST-C error table instead of speed")
    parser.add_argument("--S", type=int, default=100, help="official sampler's S for --table (1000 = paper)")
    parser.add_argument("--settings", nargs="*", default=None, help=f"for --table; default {' '.join(TABLE_SETTINGS)}")
    parser.add_argument("--seed-stream", dest="seed_stream", type=int, default=425)
    parser.add_argument("--model", default=None, help="for --table: a fmnist-c model (default resnet20; vit_tiny)")
    args = parser.parse_args(argv)
    if args.table:
        error_table(args)
    else:
        speed_table(args)


if __name__ == "__main__":
    main()

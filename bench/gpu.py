"""Speed, operator counts and memory of every TTA method on the paper's architectures, on a GPU if present.

    python bench/gpu.py [--methods test bn unitta ...] [--archs resnet20 Standard ...] [--quick] [--all]
                        [--precision fp32|tf32|bf16] [--channels-last] [--compile] [--pack N]
                        [--grid [sweeps/full_grid.yaml]] [--json OUT] [--markdown] [--time-budget SECONDS]
    python bench/gpu.py --equality          # cuda vs cpu: evaluate() of test, bn, unitta on Fashion-MNIST-C

For each architecture (random weights: the timings do not depend on them; the paper's WRN-28-10 "Standard"
for CIFAR-10-C, ResNeXt-29 "Hendrycks2020AugMix_ResNeXt" for CIFAR-100-C, ResNet-50 "Standard_R50" at
224 x 224 for ImageNet-C, UniTTA paper section 5.1, and the embedded ResNet-20) and each method of
``list_methods()``, the same random batches of 64 are fed: ``--warmup`` batches untimed, ``--batches``
timed (the device synchronised before and after). Columns (docs/benchmarks.md):

- images/s and x TEST: time per image over TEST's (the source model, measured first on the same batches);
- aten ops/batch, its ratio to TEST's, and host syncs/batch (``bench/opcount.py``'s ``count_ops``, eager);
- peak MiB: memory the method needs on top of the source model and the input batches (cuda:
  ``max_memory_allocated``; CPU: peak resident set size sampled during building and warm-up);
- with ``--pack N``: N instances of the method (N cells sharing one GPU) fed concurrently from N
  threads, each on its own CUDA stream, aggregate images/s and its gain over one instance.

``--data`` first measures batch assembly from the decoded ImageNet-C cache (``bench/data.py``): one
process, one per core at once, and the uint8 gather moved to the GPU and converted there.

``--grid`` estimates the GPU-hours of a sweep config (default ``sweeps/full_grid.yaml``): the official
sampler's stream length of every (dataset, setting) (computed on synthetic labels with the datasets'
real pool sizes, cached in ``bench/grid_lengths.json``) times each method's measured seconds per image
on the dataset's architecture, one cell per GPU at a time (divide by the ``--pack`` gain for packing).

Without a GPU everything runs on the CPU; ``--quick`` (ResNet-20 only, 1 + 2 batches) finishes in a
few minutes there. Rows are printed as soon as measured; ``--time-budget`` stops cleanly between rows.
cotta on ResNet-50 (34 forwards per batch) is skipped unless ``--all``.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import math
import os
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("KINETO_LOG_LEVEL", "5")  # the profiler behind count_ops: no per-run error lines on CPU

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/ siblings: opcount, methods

from methods import PeakRSS  # noqa: E402
from opcount import count_ops  # noqa: E402

from unitta.methods import get_method, list_methods  # noqa: E402

# (architecture, dataset whose model it is): the paper's three (section 5.1) and the embedded default
ARCHS = {
    "resnet20": "fmnist-c",
    "Standard": "cifar10-c",
    "Hendrycks2020AugMix_ResNeXt": "cifar100-c",
    "Standard_R50": "imagenet-c",
}
SKIPPED_BY_DEFAULT = {("cotta", "Standard_R50")}  # 34 forwards per batch at 224 x 224: minutes per row
GRID_LENGTHS = Path(__file__).resolve().parent / "grid_lengths.json"
BATCH = 64  # the paper's batch size (section 5.1)


@dataclass
class Row:
    arch: str
    dataset: str
    method: str
    images_per_s: float = math.nan
    x_test: float = math.nan
    aten_ops: float = math.nan
    aten_x_test: float = math.nan
    syncs: float = math.nan
    peak_mib: float = math.nan
    pack: int = 1
    pack_images_per_s: float = math.nan
    pack_gain: float = math.nan
    error: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


# ---------------------------------------------------------------------------- device and precision


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def set_precision(precision: str, device: torch.device) -> None:
    """As a cell's ``precision`` (unitta.evaluate): fp32 keeps PyTorch's defaults (cuDNN may use TF32 for
    convolutions, matmuls stay fp32: the project's fp32 since its first GPU runs); tf32 allows TF32 everywhere."""
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
        torch.backends.cudnn.allow_tf32 = True  # PyTorch's default
        torch.backends.cudnn.benchmark = True  # fixed shapes: pick the fastest kernels once


def autocast(precision: str, device: torch.device):
    """bf16: autocast to bfloat16 (thread-local: entered again inside every packing thread)."""
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def _malloc_trim() -> None:
    """Return freed heap pages to the OS (glibc), so that the next method's RSS growth is its own."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


class PeakMemory:
    """Peak memory (MiB) needed inside the block above the level at its start (cuda allocator, else RSS)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def __enter__(self) -> PeakMemory:
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(self.device)
            self.base = torch.cuda.memory_allocated(self.device)
        else:
            _malloc_trim()
            self.rss = PeakRSS().__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.device.type == "cuda":
            self.mib = (torch.cuda.max_memory_allocated(self.device) - self.base) / 2**20
        else:
            self.rss.__exit__(*exc)
            self.mib = self.rss.extra_mib


# ---------------------------------------------------------------------------- measuring


def make_batches(size: int, n: int, device: torch.device, channels_last: bool, seed: int = 0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    batches = [torch.rand(BATCH, 3, size, size, generator=gen).to(device) for _ in range(n)]
    if channels_last:
        batches = [x.contiguous(memory_format=torch.channels_last) for x in batches]
    return batches


def build(name: str, model, info, args) -> Any:
    method = get_method(name, model, info, dataset=info.dataset)
    if args.compile:
        method.model.compile()  # in place: module names (BN layers, classifier) stay what the method expects
    return method


def run_batches(method, batches: list[torch.Tensor], precision: str, device: torch.device) -> None:
    with autocast(precision, device):
        for x in batches:
            out = method(x)
    if not torch.isfinite(out).all():  # one sync, after the timed batches
        raise FloatingPointError("non-finite output")


def time_method(name: str, model, info, batches, args, device) -> tuple[float, float]:
    """(seconds per image over the timed batches, peak MiB of building + warm-up)."""
    warm, timed = batches[: args.warmup], batches[args.warmup :]
    with PeakMemory(device) as memory:
        method = build(name, model, info, args)
        run_batches(method, warm, args.precision, device)
        synchronize(device)
        if device.type == "cuda":
            start = time.perf_counter()
            run_batches(method, timed, args.precision, device)
            synchronize(device)
            seconds = time.perf_counter() - start
    if device.type != "cuda":  # CPU: time outside the memory sampler's thread
        start = time.perf_counter()
        run_batches(method, timed, args.precision, device)
        seconds = time.perf_counter() - start
    del method
    return seconds / (len(timed) * BATCH), memory.mib


def time_pack(name: str, model, info, batches, args, device) -> float:
    """Aggregate images/s of ``args.pack`` instances fed concurrently (threads; one CUDA stream each)."""
    n = args.pack
    methods = [build(name, model, info, args) for _ in range(n)]
    streams = [torch.cuda.Stream(device) if device.type == "cuda" else None for _ in range(n)]
    warm, timed = batches[: args.warmup], batches[args.warmup :]
    ready, done = threading.Barrier(n + 1), threading.Barrier(n + 1)
    errors: list[BaseException] = []

    def worker(k: int) -> None:
        context = torch.cuda.stream(streams[k]) if streams[k] is not None else contextlib.nullcontext()
        try:
            with context:
                run_batches(methods[k], warm, args.precision, device)
                if streams[k] is not None:
                    streams[k].synchronize()
                ready.wait()
                run_batches(methods[k], timed, args.precision, device)
                if streams[k] is not None:
                    streams[k].synchronize()
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)
            ready.abort()
        finally:
            with contextlib.suppress(threading.BrokenBarrierError):
                done.wait()

    synchronize(device)
    threads = [threading.Thread(target=worker, args=(k,), daemon=True) for k in range(n)]
    for t in threads:
        t.start()
    with contextlib.suppress(threading.BrokenBarrierError):
        ready.wait()
    start = time.perf_counter()
    with contextlib.suppress(threading.BrokenBarrierError):
        done.wait()
    seconds = time.perf_counter() - start
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return n * len(timed) * BATCH / seconds


def measure_arch(arch: str, methods: list[str], args, device, emit, deadline: float) -> list[Row]:
    """Every method on one architecture; ``emit(row)`` is called as soon as a row is measured."""
    from unitta.models import build_model

    dataset = ARCHS[arch]
    model, info = build_model(dataset, arch)
    channels_last = args.channels_last or args.precision == "bf16"
    model = model.to(device).eval()
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
    batches = make_batches(info.input_size, args.warmup + args.batches, device, channels_last)
    rows, test = [], None
    order = ["test"] + [m for m in methods if m != "test"]  # TEST first: every ratio needs it
    for name in order:
        if time.perf_counter() > deadline:
            print(f"time budget reached: stopped before {arch} / {name}", flush=True)
            break
        row = Row(arch, dataset, name)
        if (name, arch) in SKIPPED_BY_DEFAULT and not args.all:
            row.error = "skipped (--all runs it)"
        else:
            try:
                seconds, row.peak_mib = time_method(name, model, info, batches, args, device)
                row.images_per_s = 1.0 / seconds
                if not args.no_ops:
                    with autocast(args.precision, device):
                        ops = count_ops(name, model, info, batches[0], warmup=args.ops_warmup, batches=args.ops_batches)
                    row.aten_ops, row.syncs = ops["aten_ops"], ops["syncs"]
                    row.extra["sync_names"] = ops.get("sync_names", {})
                if args.pack > 1:
                    row.pack = args.pack
                    row.pack_images_per_s = time_pack(name, model, info, batches, args, device)
                    row.pack_gain = row.pack_images_per_s / row.images_per_s
            except Exception as exc:  # noqa: BLE001 - one failing method must not end the benchmark
                row.error = f"{type(exc).__name__}: {exc}".splitlines()[0][:100]
        if name == "test":
            test = row
        if test is not None and not test.error:
            row.x_test = test.images_per_s / row.images_per_s
            row.aten_x_test = row.aten_ops / test.aten_ops
        if name == "test" or name in methods:
            rows.append(row)
            emit(row)
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return rows


# ---------------------------------------------------------------------------- output


def _fmt(value: float | None, spec: str) -> str:
    """``format(value, spec)``, or '-' in the same width for a missing figure."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        width = spec.split(".")[0].strip(",")
        return "-".rjust(int(width)) if width.isdigit() else "-"
    return format(value, spec)


def header(pack: int) -> str:
    cols = f"{'arch':28s} {'method':14s} {'img/s':>9s} {'x TEST':>7s} {'ops/b':>7s} {'x TEST':>7s} {'syncs/b':>7s}"
    cols += f" {'MiB':>8s}"
    return cols + (f" {f'pack{pack} img/s':>12s} {'gain':>5s}" if pack > 1 else "")


def line(r: Row) -> str:
    if r.error:
        return f"{r.arch:28s} {r.method:14s} {r.error}"
    text = (
        f"{r.arch:28s} {r.method:14s} {_fmt(r.images_per_s, '9.1f')} {_fmt(r.x_test, '7.2f')} "
        f"{_fmt(r.aten_ops, '7.0f')} {_fmt(r.aten_x_test, '7.2f')} {_fmt(r.syncs, '7.1f')} {_fmt(r.peak_mib, '8.1f')}"
    )
    if r.pack > 1:
        text += f" {_fmt(r.pack_images_per_s, '12.1f')} {_fmt(r.pack_gain, '5.2f')}"
    return text


def markdown(rows: list[Row], pack: int) -> str:
    head = "| arch | method | images/s | x TEST | aten ops/batch | x TEST | syncs/batch | peak MiB |"
    rule = "|---|---|---|---|---|---|---|---|"
    if pack > 1:
        head += f" pack {pack} images/s | gain |"
        rule += "---|---|"
    out = [head, rule]
    for r in rows:
        if r.error:
            out.append(f"| {r.arch} | {r.method} | {r.error} |" + " |" * (5 + 2 * (pack > 1)))
            continue
        cells = [r.arch, r.method, _fmt(r.images_per_s, ",.0f"), _fmt(r.x_test, ".2f"), _fmt(r.aten_ops, ".0f"),
                 _fmt(r.aten_x_test, ".2f"), _fmt(r.syncs, ".1f"), _fmt(r.peak_mib, ".0f")]  # fmt: skip
        if pack > 1:
            cells += [_fmt(r.pack_images_per_s, ",.0f"), _fmt(r.pack_gain, ".2f")]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


# ---------------------------------------------------------------------------- grid estimate


def stream_lengths(datasets: list[str], settings: list[str], seeds: list[int]) -> dict[str, dict[str, int]]:
    """{dataset: {'setting/seed': official stream length}}, from bench/grid_lengths.json where cached."""
    from unitta.streams import make_stream, synthetic_labels

    cached = json.loads(GRID_LENGTHS.read_text()) if GRID_LENGTHS.is_file() else {}
    changed = False
    for ds in datasets:
        known = cached.setdefault(ds, {})
        todo = [(s, seed) for s in settings for seed in seeds if f"{s}/{seed}" not in known]
        if todo:
            labels, domains = synthetic_labels(ds)
            for setting, seed in todo:
                n = len(make_stream(labels, domains, setting, dataset=ds, sampler="official", seed=seed).indices)
                known[f"{setting}/{seed}"] = n
                changed = True
                print(f"   stream length {ds} {setting} seed {seed}: {n}", flush=True)
    if changed:
        tmp = GRID_LENGTHS.with_suffix(".tmp")
        tmp.write_text(json.dumps(cached, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, GRID_LENGTHS)
    return {ds: cached[ds] for ds in datasets}


def grid_estimate(config_path: str, rows: list[Row]) -> dict[str, Any]:
    """GPU-hours per (method, dataset) of a sweep config: stream images x measured seconds per image."""
    import yaml

    from unitta.cell import DEFAULT_MODELS
    from unitta.streams.settings import SETTING_CODES_24, SETTING_CODES_36

    config = yaml.safe_load(Path(config_path).read_text())
    datasets = list(config["datasets"])
    settings = config.get("settings", "all24")
    settings = {"all24": list(SETTING_CODES_24), "all36": list(SETTING_CODES_36)}.get(settings, settings)
    seeds = list(config.get("seeds", [425]))
    models = {**DEFAULT_MODELS, **(config.get("models") or {})}
    lengths = stream_lengths(datasets, settings, seeds)
    speed = {(r.arch, r.method): 1.0 / r.images_per_s for r in rows if not r.error}
    hours: dict[str, dict[str, float | None]] = {}
    for method in config["methods"]:
        name = method if isinstance(method, str) else next(iter(method))
        per = hours.setdefault(name, {})
        for ds in datasets:
            images = sum(lengths[ds][f"{s}/{seed}"] for s in settings for seed in seeds)
            spi = speed.get((models[ds], name))
            per[ds] = images * spi / 3600 if spi is not None else None
    images = {ds: sum(lengths[ds][f"{s}/{seed}"] for s in settings for seed in seeds) for ds in datasets}
    return {"config": config_path, "datasets": datasets, "models": {d: models[d] for d in datasets},
            "images_per_cell_sum": images, "hours": hours}  # fmt: skip


def print_grid(grid: dict[str, Any]) -> None:
    datasets = grid["datasets"]
    print(f"\n## estimated GPU-hours of {grid['config']} (one cell per GPU at a time; '-': not measured)")
    print(
        "stream images per method (all settings and seeds): "
        + ", ".join(f"{d} {n:,}" for d, n in grid["images_per_cell_sum"].items())
    )
    print("| method | " + " | ".join(f"{d} ({grid['models'][d]})" for d in datasets) + " | total |")
    print("|---|" + "---|" * (len(datasets) + 1))
    totals = dict.fromkeys(datasets, 0.0)
    complete = dict.fromkeys(datasets, True)
    for method, per in grid["hours"].items():
        known = [v for v in per.values() if v is not None]
        total = _fmt(sum(known), ".2f") if len(known) == len(per) else "-"
        print(f"| {method} | " + " | ".join(_fmt(per[d], ".2f") for d in datasets) + f" | {total} |")
        for d in datasets:
            if per[d] is None:
                complete[d] = False
            else:
                totals[d] += per[d]
    cells = [(_fmt(totals[d], ".1f") if complete[d] else f">{totals[d]:.1f}") for d in datasets]
    overall = sum(totals.values())
    print("| **all** | " + " | ".join(cells) + f" | {'' if all(complete.values()) else '>'}{overall:.1f} |")


# ---------------------------------------------------------------------------- cuda vs cpu


def equality(methods: list[str], n_per_domain: int = 100, setting: str = "n111") -> int:
    """evaluate() on cuda and on cpu (strict fp32): errors must agree up to a few near-tied predictions."""
    from unitta.cell import Cell
    from unitta.evaluate import evaluate

    if not torch.cuda.is_available():
        print("--equality needs a CUDA device", file=sys.stderr)
        return 2
    set_precision("fp32", torch.device("cuda"))
    print(f"{'method':10s} {'n':>6s} {'err cpu':>8s} {'err cuda':>9s} {'|d correct|':>12s} {'tol':>4s}  agree")
    failed = 0
    for name in methods:
        rows = {
            device: evaluate(
                Cell(dataset="fmnist-c", method=name, setting=setting, n_per_domain=n_per_domain, device=device)
            )
            for device in ("cpu", "cuda")
        }
        n = rows["cpu"]["n_samples"]
        diff = abs(rows["cpu"]["n_correct"] - rows["cuda"]["n_correct"])
        tol = equality_tolerance(n)
        failed += diff > tol
        print(f"{name:10s} {n:6d} {rows['cpu']['error']:8.2f} {rows['cuda']['error']:9.2f} {diff:12d} {tol:4d}  "
              f"{'yes' if diff <= tol else 'NO'}", flush=True)  # fmt: skip
    return 1 if failed else 0


def equality_tolerance(n: int) -> int:
    """Correct-count difference allowed between cuda and cpu over ``n`` predictions.

    Both devices compute in fp32 but sum in different orders (relative differences around 1e-6), which
    flips only predictions whose top two scores are nearly tied: 0.5 % of the stream, at least 2.
    """
    return max(2, math.ceil(0.005 * n))


# ---------------------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--methods", nargs="+", default=None, help="default: every registered method")
    parser.add_argument(
        "--archs", nargs="+", default=None, choices=list(ARCHS), help="default: all (--quick: resnet20)"
    )
    parser.add_argument("--quick", action="store_true", help="ResNet-20 only, 1 warm-up + 2 timed batches")
    parser.add_argument("--all", action="store_true", help="also run cotta on ResNet-50")
    parser.add_argument("--warmup", type=int, default=None, help="untimed batches (default 3, --quick 1)")
    parser.add_argument("--batches", type=int, default=None, help="timed batches (default 10, --quick 2)")
    parser.add_argument("--precision", choices=["fp32", "tf32", "bf16"], default="fp32")
    parser.add_argument("--channels-last", action="store_true")
    parser.add_argument("--compile", action="store_true", help="torch.compile each method's adapted model")
    parser.add_argument("--pack", type=int, default=1, help="N instances concurrently (N cells on one GPU)")
    parser.add_argument("--no-ops", action="store_true", help="skip the operator counts")
    parser.add_argument("--grid", nargs="?", const="sweeps/full_grid.yaml", default=None, metavar="CONFIG")
    parser.add_argument("--json", default=None, metavar="OUT", help="write the raw figures as JSON")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table at the end")
    parser.add_argument("--time-budget", type=float, default=None, metavar="SECONDS", help="stop between rows")
    parser.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: 1 on cpu, as a cell)")
    parser.add_argument("--equality", action="store_true", help="cuda vs cpu evaluate() of test, bn, unitta")
    parser.add_argument("--data", action="store_true", help="first: ImageNet-C cache batch assembly (bench/data.py)")
    args = parser.parse_args(argv)

    known = list_methods()
    methods = args.methods or (["test", "bn", "unitta"] if args.equality else known)
    unknown = [m for m in methods if m not in known]
    if unknown:
        print(f"error: unknown method(s) {', '.join(unknown)}; known: {', '.join(known)}", file=sys.stderr)
        return 2
    if args.equality:
        return equality(methods)
    args.warmup = args.warmup if args.warmup is not None else (1 if args.quick else 3)
    args.batches = args.batches if args.batches is not None else (2 if args.quick else 10)
    args.ops_warmup, args.ops_batches = (1, 1) if args.quick else (2, 3)
    if args.warmup < 1 or args.batches < 1 or args.pack < 1:
        print("error: --warmup, --batches and --pack must be >= 1", file=sys.stderr)
        return 2
    if args.grid and not Path(args.grid).is_file():
        print(f"error: --grid {args.grid}: no such file", file=sys.stderr)
        return 2
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    archs = args.archs or (["resnet20"] if args.quick else list(ARCHS))
    if args.threads or device.type == "cpu":
        torch.set_num_threads(args.threads or 1)  # oversubscribed OpenMP threads make shared-CPU figures erratic
    set_precision(args.precision, device)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu, {torch.get_num_threads()} threads"
    if device.type == "cpu":  # a shared CPU's figures depend on what else runs
        name += f" (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)"
    print(f"device: {name}; torch {torch.__version__}; precision {args.precision}"
          f"{', channels_last' if args.channels_last or args.precision == 'bf16' else ''}"
          f"{', compiled' if args.compile else ''}; batch {BATCH}, {args.warmup} warm-up + {args.batches} timed; "
          f"ops: {args.ops_warmup} + {args.ops_batches} batches", flush=True)  # fmt: skip
    started = time.perf_counter()
    if args.data:
        from data import bench_prepared

        bench_prepared(BATCH)
    print(header(args.pack), flush=True)
    deadline = started + args.time_budget if args.time_budget else math.inf
    rows: list[Row] = []
    for arch in archs:
        if time.perf_counter() > deadline:
            print(f"time budget reached: {arch} not measured", flush=True)
            continue
        rows += measure_arch(arch, methods, args, device, lambda r: print(line(r), flush=True), deadline)
    print(f"measured in {time.perf_counter() - started:.0f} s", flush=True)
    grid = grid_estimate(args.grid, rows) if args.grid else None
    if args.markdown:
        print("\n" + markdown(rows, args.pack))
    if grid is not None:
        print_grid(grid)
    if args.json:
        payload = {"device": name, "torch": torch.__version__, "args": vars(args), "rows": [asdict(r) for r in rows],
                   "grid": grid}  # fmt: skip
        Path(args.json).write_text(json.dumps(payload, indent=1, default=str) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

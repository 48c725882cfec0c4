"""Speed, operator counts and memory of every TTA method as a cell runs it, on a GPU if present.

    python bench/gpu.py --grid --budget-s 480          # on one GPU: the paper grid's GPU-hours (docs/benchmarks.md)
    python bench/gpu.py [--methods test bn unitta ...] [--models resnet20 Standard ...] [--warmup 20] [--batches 10]
                        [--precision fp32|tf32|bf16] [--cudnn-benchmark 0|1] [--compile [--compile-mode MODE]]
                        [--pack N] [--grid [CONFIG]] [--budget-s SECONDS] [--json OUT] [--markdown] [--device cpu|cuda]
    python bench/gpu.py --equality          # cuda vs cpu: evaluate() of test, bn, unitta on Fashion-MNIST-C

What a row times is what a cell runs (docs/benchmarks.md, "The GPU measurement"):
- the cell's backend settings: every method runs inside ``unitta.methods.parts.backend.backend_mode``, the context
  of the adaptation loop (precision, TF32, cuDNN's benchmark mode: ``UNITTA_CUDNN_BENCHMARK`` as for cells, or
  ``--cudnn-benchmark``), channels-last where a cell uses it;
- the cell's inputs: stream batches of 64 in stream order (the official sampler, ``--setting`` (default n111), seed
  425) from the dataset where its files are present (the embedded Fashion-MNIST-C always; CIFAR-10-C / CIFAR-100-C /
  ImageNet-C under ``--data-dir``), random images only where not; the checkpoint from ``--checkpoint-dir`` (random
  weights where it is missing, or the model is skipped with ``--weights checkpoint``); the labelled source split for
  the methods that need one (EATA, RMT, SANTA, GTTA: ``unitta.data.source.load_source``; random labelled images
  where it is missing). Each model's first lines say which inputs are real;
- steady state: ``--warmup`` batches (default 20: memory banks such as RoTTA's, NOTE's or TRIBE's are full, teachers
  and one-off set-ups done) before ``--batches`` timed ones (the device synchronised before and after);
- ``--pack N``: N cells sharing one device, as Ray's fractional ``num_gpus`` runs them: N separate processes, each
  with the method on its own inputs, timed together after a common warm-up; aggregate images/s and its gain over
  one instance.

Columns: images/s and x TEST (time per image over TEST's, measured first on the same batches); aten ops/batch, its
ratio to TEST's, host syncs and host-data tensors per batch (``bench/opcount.py``'s ``count_ops``, eager, on one
stream batch); peak MiB
that the method needs above the source model and the batches (cuda: ``max_memory_allocated``; CPU: peak resident set
size sampled during building and warm-up).

``--grid`` (default config ``sweeps/full_grid.yaml``) measures the config's methods on its models first (data and
checkpoints from its ``data_dir`` / ``checkpoint_dir``), then whatever ``--methods`` / ``--models`` add, and prints
the config's GPU-hours: each (dataset, setting, seed)'s official stream length (``bench/grid_lengths.json``) times
the method's seconds per image, with the config's packing (``num_gpus: 0.5``: two cells per GPU, measured with
``--pack 2`` unless ``--pack`` is given) and, beside it, one cell per GPU; the cells left unmeasured are listed.
``--budget-s`` holds in every step: no row starts after it, a row that reaches it stops warming up (not measured)
or timing (fewer timed batches, counted in the JSON), and the operator count and the packed timing run only when
their estimated time ends before it (else skipped and listed). Syncs and host-data tensors per batch come from
``HostSyncRecorder``, as in ``bench/opcount.py``; ``--with-inputs`` adds the per-batch input work (read, decode,
``device_batch``) where the data is present. Rows are printed as soon as measured.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import multiprocessing as mp
import os
import queue
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("KINETO_LOG_LEVEL", "5")  # the profiler behind count_ops: no per-run error lines on CPU

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/ siblings: opcount, methods

from methods import PeakRSS  # noqa: E402
from opcount import count_ops  # noqa: E402

from unitta.methods import get_method, list_methods, method_class  # noqa: E402
from unitta.methods.parts.backend import backend_mode, channels_last, cudnn_benchmark  # noqa: E402
from unitta.schema import ConfigError  # noqa: E402

# model -> the dataset it is the paper's model of (section 5.1), and the embedded default
MODELS = {
    "resnet20": "fmnist-c",
    "Standard": "cifar10-c",
    "Hendrycks2020AugMix_ResNeXt": "cifar100-c",
    "Standard_R50": "imagenet-c",
}
GRID_LENGTHS = Path(__file__).resolve().parent / "grid_lengths.json"
BATCH = 64  # the paper's batch size (section 5.1)
SEED = 425  # the grid's seed
STEADY_WARMUP = 20  # batches before timing: memory banks full, one-off set-ups done
# images per domain loaded from a dataset: enough stream for warm-up and timed batches without loading it all
N_PER_DOMAIN = {"fmnist-c": 200}
N_PER_DOMAIN_DEFAULT = 1000
RANDOM_SOURCE_IMAGES = 512  # a missing source split's stand-in: random images with random labels
PACK_TIMEOUT_S = 1800  # a packed worker that has not answered by then is reported as failed


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
    timed_batches: int = 0
    pack: int = 1
    host_data: float = math.nan  # tensors made from host data per batch (HostSyncRecorder)
    input_ms: float = math.nan  # --with-inputs: milliseconds of per-batch input work (load, decode, to device)
    skipped: list[str] = field(default_factory=list)  # steps left out so as not to overrun --budget-s
    pack_images_per_s: float = math.nan
    pack_gain: float = math.nan
    error: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


class OverBudget(Exception):  # noqa: N818 (a stop, not an error)
    """The time budget ran out while a row was warming up."""


# ---------------------------------------------------------------------------- inputs, as a cell builds them


@dataclass
class Inputs:
    """What one model's rows run on: the model, its stream batches on the device, its source split (if any method
    needs one), and one line per input saying whether it is real or random."""

    arch: str
    dataset: str
    model: torch.nn.Module
    info: Any
    batches: list[torch.Tensor]
    source: Any = None
    notes: list[str] = field(default_factory=list)
    input_ms: float = math.nan  # --with-inputs: per-batch input work (dataset read/decode + ``device_batch``)
    batch_s: float = 0.0  # the longest warm-up batch so far: whether the next fits in the budget


def _random_batches(size: int, n: int, seed: int = 0) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.rand(BATCH, 3, size, size, generator=gen) for _ in range(n)]


def _stream_batches(dataset: str, n: int, args, device: torch.device) -> tuple[list[torch.Tensor], str, float]:
    """``n`` batches of the official stream of ``args.setting`` over the dataset's files, in stream order, as the
    cell's loop moves them to the device (``device_batch``), and the milliseconds that took per batch;
    FileNotFoundError when the files are not there."""
    from unitta.cell import Cell
    from unitta.data import load_dataset
    from unitta.evaluate.adapt import device_batch
    from unitta.evaluate.inputs import build_stream

    n_per_domain = N_PER_DOMAIN.get(dataset, N_PER_DOMAIN_DEFAULT)
    data = load_dataset(dataset, data_dir=args.data_dir, severity=5, n_per_domain=n_per_domain)
    cell = Cell(dataset=dataset, method="test", setting=args.setting, seed=SEED, n_per_domain=n_per_domain,
                data_dir=args.data_dir)  # fmt: skip
    indices = build_stream(cell, data).indices
    need = n * BATCH
    cycled = len(indices) < need
    indices = np.resize(indices, need)  # repeats the stream when it is shorter than the bench needs
    batches = []
    synchronize(device)
    start = time.perf_counter()
    for i in range(n):  # what a cell's loop does per batch before the method sees it: read, decode, move
        batches.append(device_batch(data, indices[i * BATCH : (i + 1) * BATCH], device))
    synchronize(device)
    input_ms = (time.perf_counter() - start) * 1000 / n
    note = (f"stream: real {dataset} images, official stream {args.setting} seed {SEED} "
            f"({n_per_domain} images per domain{', cycled' if cycled else ''})")  # fmt: skip
    return batches, note, input_ms


def _model(arch: str, dataset: str, args) -> tuple[torch.nn.Module, Any, str] | str:
    """(model, info, what its weights are), or why the model is skipped (``--weights checkpoint``)."""
    from unitta.models import build_model, load_model
    from unitta.models.zoo import CheckpointError

    try:
        model, info = load_model(dataset, arch, checkpoint_dir=args.checkpoint_dir,
                                 trust_checkpoints=args.trust_checkpoints)  # fmt: skip
        return model, info, f"weights: {info.extra.get('checkpoint') or 'embedded'}"
    except (FileNotFoundError, CheckpointError) as exc:
        reason = str(exc).splitlines()[0]
        if args.weights == "checkpoint":
            return f"skipped: needs its checkpoint ({reason})"
        model, info = build_model(dataset, arch)
        return model, info, f"weights: random ({reason}; confidence filters may keep other numbers of samples)"


def _source(dataset: str, size: int, args) -> tuple[Any, str]:
    """The labelled source split (``load_source``, what a cell gets), or random labelled images if it is missing."""
    from unitta.data.source import load_source, source_problem

    problem = source_problem(dataset, args.data_dir)
    if problem is None:
        source = load_source(dataset, data_dir=args.data_dir)
        return source, f"source: {dataset}'s source split ({len(source):,} images)"
    from unitta.data.records import RECORDS

    gen = torch.Generator().manual_seed(1)
    images = torch.rand(RANDOM_SOURCE_IMAGES, 3, size, size, generator=gen)
    labels = torch.randint(RECORDS[dataset].num_classes, (RANDOM_SOURCE_IMAGES,), generator=gen)
    return torch.utils.data.TensorDataset(images, labels), f"source: {RANDOM_SOURCE_IMAGES} random images ({problem})"


def prepare(arch: str, dataset: str, methods: list[str], args, device: torch.device) -> Inputs | str:
    """The inputs of ``arch``'s rows (``Inputs``), or why they cannot be built (a one-line skip reason)."""
    built = _model(arch, dataset, args)
    if isinstance(built, str):
        return built
    model, info, weights = built
    model = model.to(device).eval()
    layout = channels_last(args.precision, device) or args.channels_last
    if layout:
        model = model.to(memory_format=torch.channels_last)
    n = args.warmup + args.batches
    input_ms = math.nan
    try:
        batches, stream, input_ms = _stream_batches(dataset, n, args, device)
    except FileNotFoundError as exc:
        batches = [x.to(device) for x in _random_batches(info.input_size, n)]
        stream = f"stream: random images ({str(exc).splitlines()[0]})"
    if layout:
        batches = [x.contiguous(memory_format=torch.channels_last) for x in batches]
    inputs = Inputs(arch, dataset, model, info, batches, notes=[stream, weights], input_ms=input_ms)
    if any(method_class(m).needs_source for m in methods):
        inputs.source, note = _source(dataset, info.input_size, args)
        inputs.notes.append(note)
    return inputs


# ---------------------------------------------------------------------------- device and memory


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


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


def build(name: str, inputs: Inputs, args) -> Any:
    """The method as a cell builds it: its dataset's presets, the cell's seed, the source split if it needs one."""
    method = get_method(name, inputs.model, inputs.info, dataset=inputs.dataset, seed=SEED, source=inputs.source)
    if args.compile:
        method.compile(**({"mode": args.compile_mode} if args.compile_mode else {}))
    return method


def warm_up(method, batches: list[torch.Tensor], deadline: float, inputs: Inputs | None = None) -> None:
    """``method`` on each of ``batches``; OverBudget before a batch that, as long as the longest so far
    (``inputs.batch_s``, kept there: an earlier row's too), would end after ``deadline`` (one batch of a big model
    on a CPU takes seconds)."""
    longest = inputs.batch_s if inputs is not None else 0.0
    for x in batches:
        if not fits(longest, deadline):
            raise OverBudget
        start = time.perf_counter()
        method(x)
        longest = max(longest, time.perf_counter() - start)
        if inputs is not None:
            inputs.batch_s = longest


def timed_run(method, batches: list[torch.Tensor], device: torch.device, deadline: float) -> tuple[float, int]:
    """(seconds, batches run) over ``batches`` (at least one; fewer where the next would end after ``deadline``)."""
    synchronize(device)
    start = time.perf_counter()
    done, longest = 0, 0.0
    for x in batches:
        before = time.perf_counter()
        out = method(x)
        done += 1
        longest = max(longest, time.perf_counter() - before)
        if not fits(longest, deadline):  # the next batch would end after the deadline
            break
    synchronize(device)
    seconds = time.perf_counter() - start
    if not torch.isfinite(out).all():  # one sync, after the timed batches
        raise FloatingPointError("non-finite output")
    return seconds, done


def time_method(name: str, inputs: Inputs, args, device: torch.device, deadline: float) -> tuple[float, float, int]:
    """(seconds per image over the timed batches, peak MiB of building + warm-up, timed batches)."""
    warm, timed = inputs.batches[: args.warmup], inputs.batches[args.warmup :]
    with backend_mode(args.precision, device, args.cudnn_benchmark):
        with PeakMemory(device) as memory:
            method = build(name, inputs, args)
            warm_up(method, warm, deadline, inputs)
            if device.type == "cuda":
                seconds, done = timed_run(method, timed, device, deadline)
        if device.type != "cuda":  # CPU: timed outside the memory sampler's thread
            seconds, done = timed_run(method, timed, device, deadline)
    del method
    return seconds / (done * BATCH), memory.mib, done


def count_method_ops(name: str, inputs: Inputs, args, device: torch.device) -> dict:
    with backend_mode(args.precision, device, args.cudnn_benchmark):
        return count_ops(name, inputs.model, inputs.info, inputs.batches[args.warmup], warmup=args.ops_warmup,
                         batches=args.ops_batches, seed=SEED, source=inputs.source)  # fmt: skip


# ---------------------------------------------------------------------------- packing: processes, as Ray runs cells


def _pack_worker(k: int, arch: str, dataset: str, methods: list[str], args, tasks, results, barrier) -> None:
    """One packed instance: its own process, inputs and method; times the batches the others time at once."""
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    inputs = prepare(arch, dataset, methods, args, device)
    results.put((k, "ready", None if isinstance(inputs, Inputs) else inputs))
    while (name := tasks.get()) is not None:
        error, span = "", (math.nan, math.nan)
        try:
            with backend_mode(args.precision, device, args.cudnn_benchmark):
                method = build(name, inputs, args)
                warm_up(method, inputs.batches[: args.warmup], math.inf)
                synchronize(device)
                barrier.wait(timeout=PACK_TIMEOUT_S)
                start = time.monotonic()  # CLOCK_MONOTONIC: one clock for every process of the machine
                timed_run(method, inputs.batches[args.warmup :], device, math.inf)
                span = (start, time.monotonic())
            del method
        except Exception as exc:  # noqa: BLE001 - reported by the parent
            error = f"{type(exc).__name__}: {exc}".splitlines()[0][:100]
            barrier.abort()
        gc.collect()
        results.put((k, name, (span, error)))


class Pack:
    """``n`` worker processes for one model (spawned: a fresh CUDA context each, as Ray's workers have)."""

    def __init__(self, n: int, arch: str, dataset: str, methods: list[str], args, deadline: float = math.inf) -> None:
        context = mp.get_context("spawn")
        self.n = n
        self.barrier = context.Barrier(n)
        self.results = context.Queue()
        self.tasks = [context.Queue() for _ in range(n)]
        self.workers = [
            context.Process(target=_pack_worker, args=(k, arch, dataset, methods, args, self.tasks[k], self.results,
                                                       self.barrier), daemon=True)  # fmt: skip
            for k in range(n)
        ]
        for w in self.workers:
            w.start()
        try:  # the workers build their inputs within the time budget, or the model is not packed
            self.problem = next((p for _, _, p in (self._get(deadline) for _ in range(n)) if p), None)
        except RuntimeError as exc:
            self.problem = str(exc)

    def _get(self, deadline: float = math.inf):
        wait = min(PACK_TIMEOUT_S, deadline - time.perf_counter())
        try:
            return self.results.get(timeout=max(wait, 0.1))
        except queue.Empty:
            why = "the time budget" if wait < PACK_TIMEOUT_S else f"{PACK_TIMEOUT_S} s"
            raise RuntimeError(f"a packed worker did not answer within {why}") from None

    def images_per_s(self, name: str, timed_batches: int) -> float:
        """Aggregate images/s of the ``n`` instances of ``name``: all images over the span from the first start to
        the last end."""
        self.barrier.reset()
        for q in self.tasks:
            q.put(name)
        answers = [self._get()[2] for _ in range(self.n)]
        errors = sorted((e for _, e in answers if e), key=lambda e: e.startswith("BrokenBarrierError"))
        if errors:  # the cause first: the others saw the barrier it broke
            raise RuntimeError(errors[0])
        first = min(s for (s, _), _ in answers)
        last = max(e for (_, e), _ in answers)
        return self.n * timed_batches * BATCH / (last - first)

    def close(self, wait_s: float = 60) -> None:
        """Ask the workers to stop, wait up to ``wait_s`` for all of them together, then end those still running."""
        for q in self.tasks:
            q.put(None)
        end = time.perf_counter() + wait_s
        for w in self.workers:
            w.join(timeout=max(0.0, end - time.perf_counter()))
            if w.is_alive():
                w.terminate()


# ---------------------------------------------------------------------------- one model's rows


@dataclass
class Model:
    """One model's measuring state: its inputs (or why it is skipped), its packed workers, its TEST row."""

    arch: str
    dataset: str
    methods: list[str]
    inputs: Inputs | str
    pack: Pack | None = None
    test: Row | None = None


def open_model(arch: str, dataset: str, methods: list[str], args, device, deadline: float = math.inf) -> Model:
    inputs = prepare(arch, dataset, methods, args, device)
    model = Model(arch, dataset, methods, inputs)
    if isinstance(inputs, str):
        print(f"   {arch} ({dataset}) {inputs}", flush=True)
        return model
    for note in inputs.notes:
        print(f"   {arch} ({dataset}) {note}", flush=True)
    if args.pack > 1:
        model.pack = Pack(args.pack, arch, dataset, methods, args, deadline)
        if model.pack.problem:
            print(f"   not packed: a packed worker could not build its inputs ({model.pack.problem})", flush=True)
            model.pack.close(wait_s=1)
            model.pack = None
    return model


def measure_models(group: list[tuple[str, str, list[str]]], args, device, emit, deadline: float) -> list[Row]:
    """TEST and the methods of every (model, dataset, methods) of ``group``, method by method across the models
    (TEST first: every ratio needs it), so that a budget that runs out leaves whole methods unmeasured rather than
    whole models; ``emit(row)`` is called as soon as a row is measured."""
    models: list[Model] = []
    rows: list[Row] = []
    try:
        open_s = 0.0  # the longest opening so far: the estimate of the next (loading a model is a budgeted step)
        for arch, dataset, methods in group:
            if not fits(open_s, deadline):
                print(f"time budget reached: {arch} not measured (not loaded: about {open_s:.0f} s as the longest "
                      "loading so far would overrun --budget-s)", flush=True)
                continue
            opened = time.perf_counter()
            models.append(open_model(arch, dataset, methods, args, device, deadline))
            open_s = max(open_s, time.perf_counter() - opened)
        order = list(dict.fromkeys(["test", *(m for model in models for m in model.methods)]))
        for name in order:
            for model in models:
                if name != "test" and name not in model.methods:
                    continue
                if not isinstance(model.inputs, str) and not model.inputs.batch_s:  # its first row: guess from others'
                    model.inputs.batch_s = max(m.inputs.batch_s for m in models if not isinstance(m.inputs, str))
                batch_s = 0.0 if isinstance(model.inputs, str) else model.inputs.batch_s
                if not fits(batch_s, deadline):  # not even one batch as long as its longest would end in time
                    print(f"time budget reached: stopped before {model.arch} / {name}", flush=True)
                    return rows
                row = _row(name, model, args, device, deadline)
                rows.append(row)
                emit(row)
                gc.collect()
                if device.type == "cuda":
                    torch.cuda.empty_cache()
    finally:
        for model in models:
            if model.pack is not None:  # within what is left of the budget (a worker still loading is ended)
                model.pack.close(wait_s=min(60.0, max(0.2, deadline - time.perf_counter())))
    return rows


def _row(name: str, model: Model, args, device, deadline: float) -> Row:
    if isinstance(model.inputs, str):
        return Row(model.arch, model.dataset, name, error=model.inputs)
    row = measure_row(name, model.inputs, args, device, deadline, model.pack)
    row.extra["inputs"] = model.inputs.notes
    if name == "test":
        model.test = row
    test = model.test
    if test is not None and not test.error and not row.error:
        row.x_test = test.images_per_s / row.images_per_s
        row.aten_x_test = row.aten_ops / test.aten_ops
    return row


OPS_COST = 3.0  # a profiled batch costs about this many plain ones (the profiler's events; measured on the CPU)


def fits(seconds: float, deadline: float) -> bool:
    """Whether a step of about ``seconds`` ends before ``deadline`` (a step that would overrun is skipped)."""
    return time.perf_counter() + seconds <= deadline


def measure_row(name: str, inputs: Inputs, args, device, deadline: float, pack: Pack | None) -> Row:
    row = Row(inputs.arch, inputs.dataset, name)
    if args.with_inputs:
        row.input_ms = inputs.input_ms  # nan where the data is not present (random images: no input work)
    try:
        seconds, row.peak_mib, row.timed_batches = time_method(name, inputs, args, device, deadline)
        row.images_per_s = 1.0 / seconds
        if not args.no_ops:
            if fits(OPS_COST * (args.ops_warmup + 2 * args.ops_batches) * seconds * BATCH, deadline):
                ops = count_method_ops(name, inputs, args, device)
                row.aten_ops, row.syncs = ops["aten_ops"], ops["recorded_syncs"]
                row.host_data = ops["host_data"]
                row.extra["sync_names"] = ops.get("sync_names", {})
            else:
                row.skipped.append("ops")
        if pack is not None:
            # every packed instance warms up and times its batches, sharing the device: about pack.n x one's time
            if fits(pack.n * (args.warmup + args.batches) * seconds * BATCH, deadline):
                row.pack = pack.n
                row.pack_images_per_s = pack.images_per_s(name, args.batches)
                row.pack_gain = row.pack_images_per_s / row.images_per_s
            else:
                row.skipped.append(f"pack {pack.n}")
        if row.skipped:
            print(f"   {inputs.arch} / {name}: skipped {', '.join(row.skipped)} (would overrun --budget-s)", flush=True)
    except OverBudget:
        row.error = "not measured: the time budget ran out during its warm-up"
    except Exception as exc:  # noqa: BLE001 - one failing method must not end the benchmark
        row.error = f"{type(exc).__name__}: {exc}".splitlines()[0][:100]
    return row


# ---------------------------------------------------------------------------- output


def _fmt(value: float | None, spec: str) -> str:
    """``format(value, spec)``, or '-' in the same width for a missing figure."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        width = spec.split(".")[0].strip(",")
        return "-".rjust(int(width)) if width.isdigit() else "-"
    return format(value, spec)


def header(pack: int) -> str:
    cols = (f"{'model':28s} {'method':14s} {'img/s':>9s} {'x TEST':>7s} {'ops/b':>7s} {'x TEST':>7s} {'syncs/b':>7s}"
            f" {'h2d/b':>5s}")
    cols += f" {'MiB':>8s} {'input ms/b':>10s}"
    return cols + (f" {f'pack{pack} img/s':>12s} {'gain':>5s}" if pack > 1 else "")


def line(r: Row) -> str:
    if r.error:
        return f"{r.arch:28s} {r.method:14s} {r.error}"
    text = (
        f"{r.arch:28s} {r.method:14s} {_fmt(r.images_per_s, '9.1f')} {_fmt(r.x_test, '7.2f')} "
        f"{_fmt(r.aten_ops, '7.0f')} {_fmt(r.aten_x_test, '7.2f')} {_fmt(r.syncs, '7.1f')} "
        f"{_fmt(r.host_data, '5.1f')} {_fmt(r.peak_mib, '8.1f')} {_fmt(r.input_ms, '10.1f')}"
    )
    if r.pack > 1:
        text += f" {_fmt(r.pack_images_per_s, '12.1f')} {_fmt(r.pack_gain, '5.2f')}"
    return text


def markdown(rows: list[Row], pack: int) -> str:
    head = ("| model | method | images/s | x TEST | aten ops/batch | x TEST | syncs/batch | host-data tensors/batch "
            "| peak MiB | input ms/batch |")
    rule = "|---|---|---|---|---|---|---|---|---|---|"
    if pack > 1:
        head += f" pack {pack} images/s | gain |"
        rule += "---|---|"
    out = [head, rule]
    for r in rows:
        if r.error:
            out.append(f"| {r.arch} | {r.method} | {r.error} |" + " |" * (7 + 2 * (pack > 1)))
            continue
        cells = [r.arch, r.method, _fmt(r.images_per_s, ",.0f"), _fmt(r.x_test, ".2f"), _fmt(r.aten_ops, ".0f"),
                 _fmt(r.aten_x_test, ".2f"), _fmt(r.syncs, ".1f"), _fmt(r.host_data, ".1f"), _fmt(r.peak_mib, ".0f"),
                 _fmt(r.input_ms, ".1f")]  # fmt: skip
        if pack > 1:
            cells += [_fmt(r.pack_images_per_s, ",.0f"), _fmt(r.pack_gain, ".2f")]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


# ---------------------------------------------------------------------------- the grid: its plan and its estimate


@dataclass
class GridPlan:
    """What ``--grid`` reads from a sweep config (``unitta.sweep.config``, as the sweep expands it): datasets, their
    models, methods, the (setting, seed) pairs of every dataset's cells, and the config's folders."""

    path: str
    datasets: list[str]
    models: dict[str, str]
    methods: list[str]
    streams: dict[str, list[tuple[str, int]]]
    data_dir: str | None
    checkpoint_dir: str | None
    trust_checkpoints: bool
    cells_per_gpu: int = 1  # the config's packing: 1 / resources.num_gpus cells share a GPU (num_gpus 0.5: two)


def grid_plan(path: str) -> GridPlan:
    """The plan of the sweep config at ``path``; a bad config is ``unitta.schema.ConfigError`` (one line)."""
    from unitta.sweep.config import load_config

    cfg = load_config(path)
    cells = cfg.cells()
    datasets = list(dict.fromkeys(c.dataset for c in cells))
    streams = {d: list(dict.fromkeys((c.setting, c.seed) for c in cells if c.dataset == d)) for d in datasets}
    models = {c.dataset: c.model for c in cells}
    methods = list(dict.fromkeys(c.method for c in cells))
    share = cfg.resources.num_gpus
    per_gpu = max(1, int(1 / share + 1e-9)) if 0 < share < 1 else 1
    return GridPlan(path, datasets, models, methods, streams, cfg.data_dir, cfg.checkpoint_dir, cfg.trust_checkpoints,
                    per_gpu)


def stream_lengths(streams: dict[str, list[tuple[str, int]]], cache: Path = GRID_LENGTHS) -> dict[str, dict[str, int]]:
    """{dataset: {'setting/seed': official stream length}} of ``streams`` ({dataset: [(setting, seed)]}), from
    ``cache`` (bench/grid_lengths.json) where cached."""
    from unitta.streams import make_stream, synthetic_labels

    cached = json.loads(cache.read_text()) if cache.is_file() else {}
    changed = False
    for ds, pairs in streams.items():
        known = cached.setdefault(ds, {})
        todo = [(s, seed) for s, seed in pairs if f"{s}/{seed}" not in known]
        if todo:
            labels, domains = synthetic_labels(ds)
            for setting, seed in todo:
                n = len(make_stream(labels, domains, setting, dataset=ds, sampler="official", seed=seed).indices)
                known[f"{setting}/{seed}"] = n
                changed = True
                print(f"   stream length {ds} {setting} seed {seed}: {n}", flush=True)
    if changed:
        tmp = cache.with_suffix(".tmp")
        tmp.write_text(json.dumps(cached, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, cache)
    return {ds: cached[ds] for ds in streams}


def grid_estimate(plan: GridPlan, rows: list[Row], cache: Path = GRID_LENGTHS) -> dict[str, Any]:
    """GPU-hours per (method, dataset) of the grid: stream images x measured seconds per image; the cells left
    unmeasured, with why."""
    lengths = stream_lengths(plan.streams, cache)
    images = {ds: sum(lengths[ds][f"{s}/{seed}"] for s, seed in plan.streams[ds]) for ds in plan.datasets}
    measured = {(r.arch, r.method): r for r in rows}
    hours: dict[str, dict[str, float | None]] = {}
    packed: dict[str, dict[str, float | None]] = {}
    unmeasured: list[str] = []
    for name in plan.methods:
        per = hours.setdefault(name, {})
        per_packed = packed.setdefault(name, {})
        for ds in plan.datasets:
            row = measured.get((plan.models[ds], name))
            per[ds] = images[ds] / row.images_per_s / 3600 if row is not None and not row.error else None
            # the grid's own packing: cells_per_gpu cells share a GPU, at the aggregate rate --pack measured
            gain = row.pack_gain if row is not None and row.pack == plan.cells_per_gpu else math.nan
            if plan.cells_per_gpu == 1:
                gain = 1.0
            per_packed[ds] = per[ds] / gain if per[ds] is not None and math.isfinite(gain) else None
            if per[ds] is None:
                why = row.error if row is not None else "not reached within the time budget"
                unmeasured.append(f"{name} on {ds} ({plan.models[ds]}): {why}")
    return {"config": plan.path, "datasets": plan.datasets, "models": plan.models, "images_per_cell_sum": images,
            "hours": hours, "cells_per_gpu": plan.cells_per_gpu, "hours_packed": packed,
            "unmeasured": unmeasured}  # fmt: skip


def print_grid(grid: dict[str, Any]) -> None:
    datasets, per_gpu = grid["datasets"], grid.get("cells_per_gpu", 1)
    packing = f"{per_gpu} cells per GPU, as the config packs them" if per_gpu > 1 else "one cell per GPU"
    print(f"\n## estimated GPU-hours of {grid['config']} ({packing}; in brackets: one cell per GPU at a time; "
          "'-': not measured)")
    if per_gpu > 1:
        print(f"packed figures: one cell's hours / the aggregate gain of --pack {per_gpu} ('-' where not measured)")
    print(
        "stream images per method (all settings and seeds): "
        + ", ".join(f"{d} {n:,}" for d, n in grid["images_per_cell_sum"].items())
    )
    print("| method | " + " | ".join(f"{d} ({grid['models'][d]})" for d in datasets) + " | total |")
    print("|---|" + "---|" * (len(datasets) + 1))
    packed = grid.get("hours_packed", grid["hours"])
    totals = {"one": dict.fromkeys(datasets, 0.0), "packed": dict.fromkeys(datasets, 0.0)}
    complete = {"one": dict.fromkeys(datasets, True), "packed": dict.fromkeys(datasets, True)}

    def both(p: float | None, o: float | None, spec: str) -> str:
        return "-" if p is None and o is None else f"{_fmt(p, spec)} ({_fmt(o, spec)})"

    for method, per in grid["hours"].items():
        for kind, values in (("one", per), ("packed", packed[method])):
            for d in datasets:
                if values[d] is None:
                    complete[kind][d] = False
                else:
                    totals[kind][d] += values[d]
        sums = [sum(v for v in values.values() if v is not None) if None not in values.values() else None
                for values in (packed[method], per)]
        print(f"| {method} | " + " | ".join(both(packed[method][d], per[d], ".2f") for d in datasets)
              + f" | {both(sums[0], sums[1], '.2f')} |")

    def total(kind: str, d: str) -> str:
        return f"{'' if complete[kind][d] else '>'}{totals[kind][d]:.1f}"

    overall = {k: f"{'' if all(complete[k].values()) else '>'}{sum(totals[k].values()):.1f}" for k in totals}
    print("| **all** | " + " | ".join(f"{total('packed', d)} ({total('one', d)})" for d in datasets)
          + f" | {overall['packed']} ({overall['one']}) |")
    if grid["unmeasured"]:
        print(f"unmeasured cells ({len(grid['unmeasured'])}), so the total is a lower bound:")
        for item in grid["unmeasured"]:
            print(f"   {item}")


def work_list(args, plan: GridPlan | None) -> list[list[tuple[str, str, list[str]]]]:
    """Groups of (model, dataset, methods) in measuring order (``measure_models`` measures a group method by method
    across its models): the grid's methods on the grid's models first, then the rest of ``--models`` x
    ``--methods``, one model per group (a method already measured on a model is not repeated)."""
    groups: list[list[tuple[str, str, list[str]]]] = []
    if plan is not None:
        groups.append([(plan.models[ds], ds, list(plan.methods)) for ds in plan.datasets])
        if not (args.models or args.methods):
            return groups
        models = [(a, MODELS[a]) for a in args.models] if args.models else [(plan.models[d], d) for d in plan.datasets]
    else:
        models = [(a, MODELS[a]) for a in args.models or MODELS]
    for arch, dataset in models:
        done = {m for group in groups for a, _, ms in group if a == arch for m in ms}
        rest = [m for m in args.methods or list_methods() if m not in done]
        if rest:
            groups.append([(arch, dataset, rest)])
    return groups


# ---------------------------------------------------------------------------- cuda vs cpu


def equality(methods: list[str], n_per_domain: int = 100, setting: str = "n111") -> int:
    """evaluate() on cuda and on cpu (strict fp32): errors must agree up to a few near-tied predictions."""
    from unitta.cell import Cell
    from unitta.evaluate import evaluate

    if not torch.cuda.is_available():
        print("--equality needs a CUDA device", file=sys.stderr)
        return 2
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


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--methods", nargs="+", default=None, help="default: every registered method (--grid: its)")
    parser.add_argument("--models", nargs="+", default=None, choices=list(MODELS), help="default: all (--grid: its)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: resnet20, 2 warm-up + 2 timed batches")
    parser.add_argument("--warmup", type=int, default=None, help=f"untimed batches (default {STEADY_WARMUP})")
    parser.add_argument("--batches", type=int, default=None, help="timed batches (default 10)")
    parser.add_argument("--setting", default="n111", help="the stream's setting code (default n111)")
    parser.add_argument("--data-dir", default=None, help="the datasets' folder (default: the grid's, else unitta's)")
    parser.add_argument("--checkpoint-dir", default=None, help="checkpoints (default: the grid's, else ./ckpt)")
    parser.add_argument("--weights", choices=["auto", "checkpoint"], default="auto",
                        help="auto: random weights where a checkpoint is missing; checkpoint: skip that model")
    parser.add_argument("--trust-checkpoints", action="store_true", help="as the config key (default: the grid's)")
    parser.add_argument("--precision", choices=["fp32", "tf32", "bf16"], default="fp32")
    parser.add_argument("--cudnn-benchmark", type=int, choices=[0, 1], default=None,
                        help="cuDNN's benchmark mode (default: UNITTA_CUDNN_BENCHMARK, as for cells; unset: 0)")
    parser.add_argument("--channels-last", action="store_true", help="also at fp32/tf32 (bf16 on cuda: always)")
    parser.add_argument("--compile", action="store_true",
                        help="torch.compile each method's step (whole for TENT-like methods, else the model)")
    parser.add_argument("--compile-mode", choices=["default", "reduce-overhead", "max-autotune"], default=None,
                        help="torch.compile's mode with --compile (reduce-overhead: CUDA graphs)")
    parser.add_argument("--pack", type=int, default=None,
                        help="N cells on one device: N processes (default 1; --grid: the config's cells per GPU)")
    parser.add_argument("--with-inputs", action="store_true",
                        help="a column of per-batch input work (read, decode, device_batch) where data is present")
    parser.add_argument("--no-ops", action="store_true", help="skip the operator counts")
    parser.add_argument("--grid", nargs="?", const="sweeps/full_grid.yaml", default=None, metavar="CONFIG",
                        help="a sweep config's GPU-hours, its cells measured first (default sweeps/full_grid.yaml)")
    parser.add_argument("--lengths", default=str(GRID_LENGTHS), metavar="JSON", help="the grid's stream lengths cache")
    parser.add_argument("--json", default=None, metavar="OUT", help="write the raw figures as JSON")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table at the end")
    parser.add_argument("--budget-s", type=float, default=None, metavar="SECONDS", help="stop measuring after it")
    parser.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: 1 on cpu)")
    parser.add_argument("--equality", action="store_true", help="cuda vs cpu evaluate() of test, bn, unitta")
    parser.add_argument("--data", action="store_true", help="first: ImageNet-C cache batch assembly (bench/data.py)")
    return parser.parse_args(argv)


def check(args) -> str | None:
    """One line naming the first bad option, or None; fills the defaults that depend on other options."""
    known = list_methods()
    unknown = [m for m in args.methods or [] if m not in known]
    if unknown:
        return f"unknown method(s) {', '.join(unknown)}; known: {', '.join(known)}"
    args.warmup = args.warmup if args.warmup is not None else (2 if args.quick else STEADY_WARMUP)
    args.batches = args.batches if args.batches is not None else (2 if args.quick else 10)
    args.models = args.models or (["resnet20"] if args.quick else None)
    args.ops_warmup, args.ops_batches = (1, 1) if args.quick else (2, 3)
    args.pack = args.pack if args.pack is not None else 1
    if args.warmup < 0 or args.batches < 1 or args.pack < 1:
        return "--warmup must be >= 0, --batches and --pack >= 1"
    if args.cudnn_benchmark is None:
        try:
            args.cudnn_benchmark = cudnn_benchmark()
        except ValueError as exc:
            return str(exc)
    args.cudnn_benchmark = bool(args.cudnn_benchmark)
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    args.threads = args.threads or (1 if args.device == "cpu" else torch.get_num_threads())
    return None


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.equality:
        return equality(args.methods or ["test", "bn", "unitta"])
    problem = check(args)
    if problem:
        print(f"error: {problem}", file=sys.stderr)
        return 2
    try:
        plan = grid_plan(args.grid) if args.grid else None
    except ConfigError as exc:
        print(f"error: --grid: {exc}", file=sys.stderr)
        return 2
    if plan is not None:
        if "--pack" not in (argv if argv is not None else sys.argv[1:]):
            args.pack = plan.cells_per_gpu  # the grid's own packing, measured
        args.data_dir = args.data_dir or plan.data_dir
        args.checkpoint_dir = args.checkpoint_dir or plan.checkpoint_dir
        args.trust_checkpoints = args.trust_checkpoints or plan.trust_checkpoints
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)  # on cpu 1: oversubscribed OpenMP threads make shared-CPU figures erratic
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu, {torch.get_num_threads()} threads"
    if device.type == "cpu":  # a shared CPU's figures depend on what else runs
        name += f" (load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)"
    with backend_mode(args.precision, device, args.cudnn_benchmark) as backend:
        settings = backend.describe()
    print(f"device: {name}; torch {torch.__version__}; precision {args.precision} ({settings})"
          f"{', channels_last' if args.channels_last or channels_last(args.precision, device) else ''}"
          f"{', compiled' if args.compile else ''}; batch {BATCH}, {args.warmup} warm-up + {args.batches} timed"
          f"{'' if args.no_ops else f'; ops: {args.ops_warmup} + {args.ops_batches} batches'}"
          f"{f'; {args.pack} processes packed' if args.pack > 1 else ''}", flush=True)  # fmt: skip
    started = time.perf_counter()
    if args.data:
        from data import bench_prepared

        bench_prepared(BATCH)
    deadline = started + args.budget_s if args.budget_s is not None else math.inf
    print(header(args.pack), flush=True)
    rows: list[Row] = []
    for group in work_list(args, plan):
        rows += measure_models(group, args, device, lambda r: print(line(r), flush=True), deadline)
    print(f"measured in {time.perf_counter() - started:.0f} s", flush=True)
    grid = grid_estimate(plan, rows, Path(args.lengths)) if plan is not None else None
    if args.markdown:
        print("\n" + markdown(rows, args.pack))
    if grid is not None:
        print_grid(grid)
    if args.json:
        payload = {"device": name, "torch": torch.__version__, "backend": settings, "args": vars(args),
                   "rows": [asdict(r) for r in rows], "grid": grid}  # fmt: skip
        Path(args.json).write_text(json.dumps(payload, indent=1, default=str) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

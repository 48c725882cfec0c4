"""Dataset figures: Fashion-MNIST-C preparation time, batch assembly throughput (images/s).

    python bench/data.py [--n 1000] [--batch 64] [--threads 1]
    python bench/data.py --folder [--threads 1] [--batch 64] [--device cpu|cuda]   (bench/folder_data.py)

1. Preparation: corrupts a class-balanced subset of ``--n`` images (all 15 corruptions, severity 5)
   into a temporary cache and times it, per corruption and in total; the full-set figures
   (10,000 images; 5 severities) are extrapolated linearly and labelled so.
2. In-memory batches: ``ArrayDataset.get_batch`` on a 150,000-image uint8 array (the size of
   Fashion-MNIST-C / CIFAR-10-C at one severity), random indices.
3. Lazy JPEG batches: ImageNet-C layout with a few hundred 224x224 JPEGs in a temporary folder,
   decoded by ``JpegDataset.get_batch``'s thread pool (1 and the default number of workers).
4. Decoded ImageNet-C cache (``python -m unitta.data prepare imagenet-c``): preparation rate of the
   same JPEGs, then ``PreparedDataset.get_batch`` from the memory map (page cache warm), random
   indices, as float32 NCHW and as the uint8 gather alone.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from unitta.data import CORRUPTIONS, load_dataset
from unitta.data.arrays import ArrayDataset, balanced_subset
from unitta.data.corruptions import corrupt
from unitta.data.fmnist_c import padded_test_set


def bench_preparation(n: int) -> None:
    images, labels = padded_test_set()
    ids = balanced_subset(labels, n, 10)
    subset = images[ids]
    corrupt(subset[:10], "zoom_blur", 5)  # build the cached zoom operator outside the timing
    print(f"## Fashion-MNIST-C preparation, severity 5, measured on a subset of {n} images")
    print(f"{'corruption':20s} {'ms / 1000 images':>17s}")
    total = 0.0
    for name in CORRUPTIONS:
        start = time.perf_counter()
        corrupt(subset, name, 5, 0, ids)
        seconds = time.perf_counter() - start
        total += seconds
        print(f"{name:20s} {seconds * 1000 * 1000 / n:17.0f}")
    print(f"{'all 15':20s} {total * 1000 * 1000 / n:17.0f}")
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        load_dataset("fmnist-c", data_dir=tmp, n_per_domain=n)  # the whole path: read, corrupt, write, load
        end_to_end = time.perf_counter() - start
    print(f"end to end (load_dataset, {n} x 15 images, cache written and read): {end_to_end:.1f} s")
    print(f"EXTRAPOLATED full set, severity 5 (10,000 x 15 images): {end_to_end * 10_000 / n:.0f} s")
    print(f"EXTRAPOLATED full set, all 5 severities (50,000 x 15 images): {end_to_end * 50_000 / n / 60:.1f} min")


def _throughput(dataset, batch: int, batches: int, seed: int = 0) -> float:
    rng = np.random.default_rng(seed)
    dataset.get_batch(rng.integers(0, len(dataset), batch))  # warm-up (thread pool, page cache)
    start = time.perf_counter()
    for _ in range(batches):
        dataset.get_batch(rng.integers(0, len(dataset), batch))
    return batch * batches / (time.perf_counter() - start)


def bench_in_memory(batch: int) -> None:
    n = 150_000
    images = np.random.default_rng(0).integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)
    zeros = np.zeros(n, dtype=np.int64)
    dataset = ArrayDataset("bench", zeros, zeros, ["x_5"], 10, images=images)
    rate = _throughput(dataset, batch, 300)
    print(f"## in-memory (uint8 {n} x 32 x 32 x 3, random indices, batch {batch}): {rate:,.0f} images/s")


def _write_jpegs(tmp: str, files: int) -> None:
    rng = np.random.default_rng(0)
    for k in range(files):
        folder = Path(tmp) / "ImageNet-C" / "fog" / "5" / f"n{k % 8:08d}"
        folder.mkdir(parents=True, exist_ok=True)
        # smooth random content (upsampled noise) compresses like a photo more than flat colour does
        small = rng.integers(0, 256, (28, 28, 3), dtype=np.uint8)
        Image.fromarray(small).resize((224, 224), Image.BICUBIC).save(folder / f"{k:05d}.JPEG", quality=85)


def bench_jpeg(batch: int, files: int = 320) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        _write_jpegs(tmp, files)
        dataset = load_dataset("imagenet-c", data_dir=tmp, corruptions=["fog"])
        size = sum(p.stat().st_size for p in Path(tmp).rglob("*.JPEG")) / files / 1024
        print(f"## lazy JPEG ({files} files 224 x 224, {size:.0f} KiB each, batch {batch})")
        for workers in sorted({1, dataset.num_workers}):
            dataset.num_workers, dataset._pool = workers, None
            print(f"   {workers} decoding thread(s): {_throughput(dataset, batch, 20):,.0f} images/s")


def _cache_worker(dataset, batch: int, batches: int, seed: int, queue) -> None:
    torch.set_num_threads(1)  # one cell's loader: one core
    queue.put(_throughput(dataset, batch, batches, seed))


def bench_prepared(batch: int, files: int = 320, processes: int | None = None) -> None:
    """Preparation rate, then batch assembly from the cache: one process, ``processes`` at once (a node's
    cells, each reading the shared memory map), and, with a GPU, the uint8 batch converted on the device."""
    import multiprocessing as mp

    from unitta.data.prepared import prepare_domain

    processes = processes or os.cpu_count() or 1
    with tempfile.TemporaryDirectory() as tmp:
        _write_jpegs(tmp, files)
        print(f"## decoded ImageNet-C cache ({files} JPEGs 224 x 224, batch {batch}, page cache warm)")
        for workers in sorted({1, os.cpu_count() or 1}):
            start = time.perf_counter()
            prepare_domain(tmp, "fog", 5, workers=workers, chunk_rows=32)
            print(f"   prepare, {workers} process(es): {files / (time.perf_counter() - start):,.0f} images/s")
        dataset = load_dataset("imagenet-c", data_dir=tmp, corruptions=["fog"])
        assert dataset.meta.get("prepared"), "the cache was not picked up"
        print(f"   get_batch (float32 NCHW), 1 process: {_throughput(dataset, batch, 100):,.0f} images/s")
        raw = type("Raw", (), {"get_batch": dataset.get_batch_uint8, "__len__": lambda _: len(dataset)})()
        print(f"   get_batch_uint8 (NHWC gather only), 1 process: {_throughput(raw, batch, 100):,.0f} images/s")
        if processes > 1:
            context = mp.get_context("fork")
            queue = context.Queue()
            children = [context.Process(target=_cache_worker, args=(dataset, batch, 100, k, queue))
                        for k in range(processes)]  # fmt: skip
            for child in children:
                child.start()
            total = sum(queue.get() for _ in children)
            for child in children:
                child.join()
            print(f"   get_batch (float32 NCHW), {processes} processes at once: {total:,.0f} images/s in total")
        if torch.cuda.is_available():
            def on_gpu(indices):  # what a loop feeding a GPU can do: move uint8, convert there
                x = torch.from_numpy(dataset.get_batch_uint8(indices)).to("cuda", non_blocking=True)
                return x.permute(0, 3, 1, 2).float().div_(255.0)

            gpu = type("Gpu", (), {"get_batch": staticmethod(on_gpu), "__len__": lambda _: len(dataset)})()
            rate = _throughput(gpu, batch, 100)
            torch.cuda.synchronize()
            print(f"   uint8 gather + copy to cuda + convert there, 1 process: {rate:,.0f} images/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=1000, help="subset size for the preparation timing (multiple of 10)")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (--folder: decoding threads too)")
    parser.add_argument("--folder", action="store_true",
                        help="only the image-folder figures: decode vs forward, indexing 100,000 files")
    parser.add_argument("--device", default="cpu", help="--folder: the model's device (cpu, cuda)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"cores: {os.cpu_count()}, load average: {' '.join(f'{v:.1f}' for v in os.getloadavg())}")
    if args.folder:
        from folder_data import main as folder_main

        folder_main(args.threads, args.batch, args.device)
        return
    bench_preparation(args.n)
    bench_in_memory(args.batch)
    bench_jpeg(args.batch)
    bench_prepared(args.batch)


if __name__ == "__main__":
    main()

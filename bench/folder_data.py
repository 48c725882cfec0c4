"""Image-folder figures (``python bench/data.py --folder``; docs/own_data.md):

1. Decoding keeps up with the model: images/s of ``JpegDataset.get_batch`` (the folder's lazy loader, a thread pool
   of the cell's ``--threads``) beside the source model's forward images/s on the same batches, for the embedded
   ResNet-20 on 32x32 PNGs (a Fashion-MNIST-C folder, ``unitta.data.export``) and a torchvision ResNet-50 (random
   weights) on 224x224 JPEGs. Both on this machine's CPU unless ``--device cuda``.
2. Planning never decodes: indexing a synthetic tree of 100,000 tiny files (4 domains x 25 classes x 1,000) in
   /tmp, wall time and the driver's memory (tracemalloc peak of the indexing, and the index's size).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from unitta.data.export import export_fmnist_c
from unitta.data.folder import index_folder, load_folder


def _rates(dataset, model, batch: int, batches: int, device: torch.device) -> tuple[float, float]:
    """(decode images/s, forward images/s) over the same random batches."""
    rng = np.random.default_rng(0)
    picks = [rng.choice(len(dataset), batch, replace=False) for _ in range(batches + 1)]
    model = model.to(device).eval()
    with torch.no_grad():
        model(dataset.get_batch(picks[0]).to(device))  # warm-up: thread pool, kernels
        decode = forward = 0.0
        for indices in picks[1:]:
            t0 = time.perf_counter()
            x = dataset.get_batch(indices)
            t1 = time.perf_counter()
            model(x.to(device))
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            t2 = time.perf_counter()
            decode, forward = decode + t1 - t0, forward + t2 - t1
    return batch * batches / decode, batch * batches / forward


def _print(name: str, decode: float, forward: float) -> None:
    verdict = "decoding is faster" if decode > forward else "DECODING IS SLOWER"
    print(f"{name:38s} decode {decode:9.0f} img/s   forward {forward:9.0f} img/s   x{decode / forward:5.1f}  {verdict}")


def bench_decode_vs_forward(threads: int, batch: int, device: torch.device) -> None:
    import torchvision

    from unitta.models import load_model
    from unitta.models.catalog import IMAGENET_MEAN, IMAGENET_STD, Normalized

    print(f"## decode vs forward ({threads} decoding thread(s), {torch.get_num_threads()} torch thread(s), "
          f"batch {batch}, {device})")
    with tempfile.TemporaryDirectory() as tmp:
        folder, _ = export_fmnist_c(Path(tmp) / "png", ["fog", "snow", "contrast"], n_per_domain=200)
        data = load_folder(index_folder(folder), image_size=32, num_workers=threads)
        _print("ResNet-20, 32x32 PNG (600 files)", *_rates(data, load_model("fmnist-c")[0], batch, 8, device))
        rng = np.random.default_rng(0)
        for d in range(2):
            for k in range(4):
                (Path(tmp) / "jpg" / f"d{d}" / f"c{k}").mkdir(parents=True)
                for j in range(32):
                    # a smooth picture (upsampled noise) encodes like a photograph, not like white noise
                    small = rng.integers(0, 256, (28, 28, 3), dtype=np.uint8)
                    Image.fromarray(small).resize((224, 224), Image.BICUBIC).save(
                        Path(tmp) / "jpg" / f"d{d}" / f"c{k}" / f"{j}.jpg", quality=90)
        data = load_folder(index_folder(Path(tmp) / "jpg"), image_size=224, num_workers=threads)
        r50 = Normalized(torchvision.models.resnet50(weights=None), IMAGENET_MEAN, IMAGENET_STD)
        _print("ResNet-50, 224x224 JPEG (256 files)", *_rates(data, r50, batch, 2, device))


def bench_index(files: int = 100_000) -> None:
    root = Path(tempfile.mkdtemp(prefix="unitta-index-"))
    try:
        per_class = files // 100
        t0 = time.perf_counter()
        for d in range(4):
            for k in range(25):
                folder = root / f"domain{d}" / f"class{k:02d}"
                folder.mkdir(parents=True)
                for j in range(per_class):
                    (folder / f"{j:06d}.png").write_bytes(b"x")
        built = time.perf_counter() - t0
        os.sync()
        tracemalloc.start()
        t0 = time.perf_counter()
        index = index_folder(root)
        seconds = time.perf_counter() - t0
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        t0 = time.perf_counter()
        for domain in os.scandir(root):  # the file system's floor: list and stat every file, nothing else
            for cls in os.scandir(domain.path):
                for entry in os.scandir(cls.path):
                    entry.stat()
        floor = time.perf_counter() - t0
        t0 = time.perf_counter()
        index_folder(root)
        again = time.perf_counter() - t0
        kept = sum(len(n) + 49 for names in index.files for n in names) + index.labels.nbytes  # str objects + labels
        print(f"## indexing {len(index.labels):,} files (tree written in {built:.1f} s)")
        print(f"index_folder: {seconds:.2f} s first ({len(index.labels) / seconds:,.0f} files/s), {again:.2f} s again; "
              f"listing and stat alone {floor:.2f} s; "
              f"memory: {peak / 2**20:.1f} MB peak while indexing, ~{kept / 2**20:.1f} MB kept (names + labels)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main(threads: int, batch: int, device: str) -> None:
    torch.set_num_threads(threads)
    bench_decode_vs_forward(threads, batch, torch.device(device))
    bench_index()

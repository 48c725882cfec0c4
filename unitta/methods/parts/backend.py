"""The PyTorch backend settings a cell runs its method under, in one place for the adaptation loop and the bench.

``backend_mode(precision, device)`` is the numeric and kernel-selection mode of a cell's forward and backward
passes (docs/benchmarks.md, "The GPU measurement"); ``bench/gpu.py`` times its methods under the same context,
so the bench measures what a cell runs:

- ``precision``: ``fp32`` keeps the process's TF32 flags (PyTorch's defaults: cuDNN convolutions may use TF32,
  matmuls do not; the project's fp32 since its first GPU runs); ``tf32`` allows TF32 for matmuls and
  convolutions; ``bf16`` autocasts to bfloat16 (on every device; on CUDA the model and batches are also
  channels-last: ``channels_last``).
- cuDNN's benchmark mode (``torch.backends.cudnn.benchmark``: time every convolution algorithm on the first
  batch of each new input shape, keep the fastest): off unless ``UNITTA_CUDNN_BENCHMARK=1``. Off by default
  because a method whose batch shapes change along the stream (filtered or growing batches) pays a new search
  for every shape; whether it pays off once the methods' shapes are static is to be measured on a GPU
  (``python bench/gpu.py --cudnn-benchmark``). The sweep forwards the variable to its Ray workers
  (``environment``).

Every flag is restored when the context exits.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported where a flag is set: the sweep's driver reads ``environment`` without it
    import torch

__all__ = ["CUDNN_BENCHMARK_ENV", "Backend", "backend_mode", "channels_last", "cudnn_benchmark", "environment"]

CUDNN_BENCHMARK_ENV = "UNITTA_CUDNN_BENCHMARK"
_SWITCH = {"0": False, "1": True, "": False}


def cudnn_benchmark() -> bool:
    """Whether cells run with cuDNN's benchmark mode: ``UNITTA_CUDNN_BENCHMARK`` (0 or 1; unset: 0)."""
    value = os.environ.get(CUDNN_BENCHMARK_ENV, "").strip()
    if value not in _SWITCH:
        raise ValueError(f"{CUDNN_BENCHMARK_ENV}={value!r}: expected 0 or 1 (cuDNN's benchmark mode off or on)")
    return _SWITCH[value]


def environment() -> dict[str, str]:
    """The backend variables set in this process, for the environment of the workers that run its cells."""
    return {CUDNN_BENCHMARK_ENV: os.environ[CUDNN_BENCHMARK_ENV]} if CUDNN_BENCHMARK_ENV in os.environ else {}


def channels_last(precision: str, device: torch.device) -> bool:
    """Whether the model and batches are channels-last: bf16 on CUDA (its tensor-core convolutions want NHWC)."""
    return precision == "bf16" and device.type == "cuda"


@dataclass(frozen=True)
class Backend:
    """The torch.backends flags of one mode; None leaves a flag as the process has it."""

    matmul_tf32: bool | None
    cudnn_tf32: bool | None
    cudnn_benchmark: bool

    @classmethod
    def of(cls, precision: str, benchmark: bool | None = None) -> Backend:
        """The flags of ``precision`` with cuDNN's benchmark mode ``benchmark`` (None: ``cudnn_benchmark()``)."""
        tf32 = True if precision == "tf32" else None
        return cls(tf32, tf32, cudnn_benchmark() if benchmark is None else benchmark)

    def describe(self) -> str:
        def flag(value: bool | None) -> str:
            return "as set" if value is None else ("on" if value else "off")

        return (f"TF32 matmul {flag(self.matmul_tf32)}, TF32 cuDNN {flag(self.cudnn_tf32)}, "
                f"cuDNN benchmark {flag(self.cudnn_benchmark)}")  # fmt: skip


@contextlib.contextmanager
def _flags(backend: Backend) -> Iterator[None]:
    import torch

    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark
    try:
        if backend.matmul_tf32 is not None:
            torch.backends.cuda.matmul.allow_tf32 = backend.matmul_tf32
        if backend.cudnn_tf32 is not None:
            torch.backends.cudnn.allow_tf32 = backend.cudnn_tf32
        torch.backends.cudnn.benchmark = backend.cudnn_benchmark
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark = before


@contextlib.contextmanager
def backend_mode(precision: str, device: torch.device, benchmark: bool | None = None) -> Iterator[Backend]:
    """Run the block under a cell's backend settings (module docstring); yields the ``Backend`` applied.

    ``benchmark``: cuDNN's benchmark mode, None for the cells' setting (``cudnn_benchmark()``). The flags matter
    on CUDA only; bf16 autocasts on every device. Autocast is thread-local: enter the context in the thread
    that runs the method.
    """
    import torch

    backend = Backend.of(precision, benchmark)
    with contextlib.ExitStack() as stack:
        if device.type == "cuda":
            stack.enter_context(_flags(backend))
        if precision == "bf16":
            stack.enter_context(torch.autocast(device_type=device.type, dtype=torch.bfloat16))
        yield backend

"""One switch for the device-dependent code paths of the methods (docs/benchmarks.md "Device paths").

Some methods compute the same values in two ways: on a GPU with batched, launch-friendly operators that never
read a device value on the host; on the CPU with per-image or grouped operators that read their random draws on
the host (host memory there, so free) and skip work a GPU would do in the same kernel anyway. Every such branch
asks ``takes_cuda_path(tensor_or_device)``: True on any accelerator, False on the CPU, unless the environment
variable ``UNITTA_DEVICE_PATHS=cuda`` is set (or ``device_paths_set("cuda")``), when a CPU run takes exactly the
branches a CUDA run takes, so that ``bench/opcount.py`` and the tests count the operators, host synchronisations
and shapes a GPU sees on any machine. ``UNITTA_DEVICE_PATHS=auto`` (or unset) is the default.
"""

from __future__ import annotations

import contextlib
import os
import weakref

import torch

from unitta.methods.parts.switch import scoped

__all__ = [
    "takes_cuda_path", "device_paths", "set_device_paths", "device_paths_set", "DEVICE_PATHS", "device_generator",
    "is_device_generator", "host_values",
]

DEVICE_PATHS = ("auto", "cuda")  # the values UNITTA_DEVICE_PATHS takes


def _checked(value: str, where: str) -> str:
    value = value.strip().lower() or "auto"
    if value not in DEVICE_PATHS:
        raise ValueError(f"{where}={value!r} is not one of {list(DEVICE_PATHS)} (docs/benchmarks.md 'Device paths')")
    return value


_mode = _checked(os.environ.get("UNITTA_DEVICE_PATHS", ""), "UNITTA_DEVICE_PATHS")


def device_paths() -> str:
    """'cuda' when every run takes the CUDA branches, 'auto' when each device takes its own."""
    return _mode


def set_device_paths(mode: str) -> None:
    """Choose the branches for this process ('auto' or 'cuda'; a Ray worker reads ``UNITTA_DEVICE_PATHS``)."""
    global _mode
    _mode = _checked(mode, "device paths")


def device_paths_set(mode: str) -> contextlib.AbstractContextManager[None]:
    """``set_device_paths(mode)`` for the body only (tests, benches)."""
    return scoped(device_paths, set_device_paths, mode)


def takes_cuda_path(where: torch.Tensor | torch.device | torch.Generator | str) -> bool:
    """Whether code running on ``where`` (a tensor, a device, a generator or a device name) takes the CUDA branch:
    on any device but the CPU, and on the CPU too under ``UNITTA_DEVICE_PATHS=cuda``."""
    if _mode == "cuda":
        return True
    device = where.device if isinstance(where, (torch.Tensor, torch.Generator)) else torch.device(where)
    return device.type != "cpu"


_DEVICE_GENERATORS: weakref.WeakSet[torch.Generator] = weakref.WeakSet()


def device_generator(source: torch.Generator, device: torch.device | str) -> torch.Generator:
    """A generator on ``device`` seeded from one draw of ``source`` (so per-pixel randomness can be drawn where
    the tensors live while the whole run still follows the method's single seed). Remembered as a device
    generator: on a CPU run of the CUDA paths its draws are device draws (``is_device_generator``)."""
    seed = int(torch.randint(0, 2**62, (1,), generator=source, device=source.device).item())
    generator = torch.Generator(device=device).manual_seed(seed)
    _DEVICE_GENERATORS.add(generator)
    return generator


def is_device_generator(generator: torch.Generator) -> bool:
    """Whether ``generator`` draws where the tensors live: not a CPU generator, or one made by
    ``device_generator`` (a CPU run's stand-in for a CUDA generator)."""
    return generator.device.type != "cpu" or generator in _DEVICE_GENERATORS


def host_values(t: torch.Tensor) -> list:
    """``t.tolist()`` for a tensor in host memory by construction (a draw of a CPU generator for Python control
    flow): no synchronisation on any device, so ``unitta.contract.host_sync`` does not record it."""
    if t.device.type != "cpu":
        raise ValueError(f"host_values reads host tensors only, got one on {t.device}")
    return t.tolist()

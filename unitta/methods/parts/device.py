"""Which branch the device-dependent code paths of the methods take (docs/benchmarks.md "Device paths").

Some methods compute the same values in two ways: on a GPU with batched, launch-friendly operators that never
read a device value on the host; on the CPU with per-image or grouped operators that read their random draws on
the host (host memory there, so free) and skip work a GPU would do in the same kernel anyway. Every such branch
asks a ``DevicePaths`` object, ``paths.cuda(tensor_or_device)``: True on any accelerator, False on the CPU, unless
its mode is ``"cuda"``, when a CPU run takes exactly the branches a CUDA run takes, so that ``bench/opcount.py``
and the tests count the operators, host synchronisations and shapes a GPU sees on any machine.

A method holds one (``TTAMethod.device_paths``), read once from the environment variable ``UNITTA_DEVICE_PATHS``
(``auto``, the default, or ``cuda``) when it is built, and hands it to the layers and augmentations it builds; a
layer or augmentation built on its own reads the variable once when it is built. No module-level state: a
generator made by ``device_generator`` is a ``DeviceGenerator`` (a type, not a registry).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

__all__ = [
    "DEVICE_PATHS", "ENVIRONMENT_VARIABLE", "DevicePaths", "DeviceGenerator", "device_generator",
    "is_device_generator", "host_values", "staged",
]

DEVICE_PATHS = ("auto", "cuda")  # the values UNITTA_DEVICE_PATHS takes
ENVIRONMENT_VARIABLE = "UNITTA_DEVICE_PATHS"


def _checked(value: str, where: str) -> str:
    value = value.strip().lower() or "auto"
    if value not in DEVICE_PATHS:
        raise ValueError(f"{where}={value!r} is not one of {list(DEVICE_PATHS)} (docs/benchmarks.md 'Device paths')")
    return value


@dataclass(frozen=True)
class DevicePaths:
    """The branches a method's device-dependent code takes: ``mode`` 'auto' (each device its own) or 'cuda' (every
    device the CUDA branches, the CPU too)."""

    mode: str = "auto"

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", _checked(self.mode, "device paths"))

    @classmethod
    def from_environment(cls) -> DevicePaths:
        """The mode ``UNITTA_DEVICE_PATHS`` says (unset: 'auto'); read when a method (a layer) is built."""
        return cls(_checked(os.environ.get(ENVIRONMENT_VARIABLE, ""), ENVIRONMENT_VARIABLE))

    def cuda(self, where: torch.Tensor | torch.device | torch.Generator | str) -> bool:
        """Whether code running on ``where`` (a tensor, a device, a generator or a device name) takes the CUDA
        branch: on any device but the CPU, and on the CPU too in mode 'cuda'."""
        if self.mode == "cuda":
            return True
        device = where.device if isinstance(where, (torch.Tensor, torch.Generator)) else torch.device(where)
        return device.type != "cpu"


class DeviceGenerator(torch.Generator):
    """A CPU generator made by ``device_generator``: a CPU run's stand-in for a generator on the device, whose draws
    count as device draws (``is_device_generator``)."""


def device_generator(source: torch.Generator, device: torch.device | str) -> torch.Generator:
    """A generator on ``device`` seeded from one draw of ``source`` (so per-pixel randomness can be drawn where
    the tensors live while the whole run still follows the method's single seed). On the CPU a
    ``DeviceGenerator``: on a CPU run of the CUDA paths its draws are device draws (``is_device_generator``)."""
    seed = int(torch.randint(0, 2**62, (1,), generator=source, device=source.device).item())
    kind = DeviceGenerator if torch.device(device).type == "cpu" else torch.Generator
    return kind(device=device).manual_seed(seed)


def is_device_generator(generator: torch.Generator) -> bool:
    """Whether ``generator`` draws where the tensors live: not a CPU generator, or one made by
    ``device_generator`` (a CPU run's stand-in for a CUDA generator)."""
    return generator.device.type != "cpu" or isinstance(generator, DeviceGenerator)


def host_values(t: torch.Tensor) -> list:
    """``t.tolist()`` for a tensor in host memory by construction (a draw of a CPU generator for Python control
    flow): no synchronisation on any device, so ``unitta.contract.host_sync`` does not record it."""
    if t.device.type != "cpu":
        raise ValueError(f"host_values reads host tensors only, got one on {t.device}")
    return t.tolist()


def staged(values: list, dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    """The host's bookkeeping (a Python list, nested lists for a table) on ``device`` through a fresh staging
    tensor in host memory, pinned on a GPU, and one non-blocking copy: no stream synchronisation (a
    ``torch.tensor(values, device=...)`` copies from pageable memory and waits). PyTorch's pinned-memory cache
    hands a staging block out again only once its copy has finished. ``unitta.contract.host_sync`` counts each
    call as a host-to-device copy, not as a tensor made from host data (docs/benchmarks.md "Device paths")."""
    device = torch.device(device)
    host = torch.empty(_shape(values), dtype=dtype, pin_memory=device.type == "cuda")
    host.numpy()[...] = values  # host memory by construction: no device read
    return host.to(device, non_blocking=True)


def _shape(values: list) -> tuple[int, ...]:
    shape = []
    while isinstance(values, (list, tuple)):
        shape.append(len(values))
        values = values[0] if values else None
    return tuple(shape)

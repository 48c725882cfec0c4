"""One switch for the hand-written fast paths of the normalisation layers (as timm's ``set_fused_attn``).

On (the default): IABN, Robust BN and Balanced BN train with their hand-written backward passes
(``torch.autograd.Function``s), and the per-sample statistics use the fused or device-specific kernels of
``unitta.methods.norm.stats``. Off (``UNITTA_FAST_PATHS=0`` in the environment, or ``set_fast_paths(False)``):
every one of them falls back to the plain composition of operators that autograd differentiates, and the
statistics to one device-independent formula (means over the positions, as the CUDA branch returns them),
so that a result can be checked against the plain path on any device (docs/benchmarks.md).
"""

from __future__ import annotations

import contextlib
import os

from unitta.methods.parts.switch import scoped

__all__ = ["fast_paths", "set_fast_paths", "fast_paths_set"]

_enabled = os.environ.get("UNITTA_FAST_PATHS", "1").strip().lower() not in ("0", "false", "no", "off")


def fast_paths() -> bool:
    """Whether the hand-written backward passes and fused statistics run (see the module docstring)."""
    return _enabled


def set_fast_paths(enable: bool) -> None:
    """Turn the fast paths on or off for this process (a Ray worker reads its ``UNITTA_FAST_PATHS`` instead)."""
    global _enabled
    _enabled = bool(enable)


def fast_paths_set(enable: bool) -> contextlib.AbstractContextManager[None]:
    """``set_fast_paths(enable)`` for the body only (tests, comparisons)."""
    return scoped(fast_paths, set_fast_paths, enable)

"""Optimisers of the TTA baselines, with the reference settings (docs/methods.md).

Adam: betas (0.9, 0.999), weight decay 0 (UT / md ``OPTIM`` defaults). SGD: momentum 0.9, Nesterov,
dampening 0, weight decay 0 (UT / md ``OPTIM.MOMENTUM``, ``OPTIM.NESTEROV``). A method's Config names
the optimiser in a field ``optimizer`` ("adam" | "sgd") and its learning rate in ``lr``.

Both run as PyTorch's fused implementations (one kernel for all parameters, step counts kept on the
parameters' device) on CUDA and CPU, and as the ``foreach`` (multi-tensor) ones elsewhere: the
default single-tensor path costs a handful of kernel launches and, for Adam, one host read of the step
count per parameter, which adds up on a GPU. Fused Adam rounds differently from the single-tensor path by
about one float32 ulp on some elements; fused SGD gives identical results.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn

__all__ = ["OPTIMIZERS", "make_optimizer", "optimizer_from_config"]

OPTIMIZERS = ("adam", "sgd")
ADAM_BETAS = (0.9, 0.999)  # UT core/configs/defaults.py OPTIM.BETA = 0.9; md conf.py likewise
SGD_MOMENTUM = 0.9  # UT / md OPTIM.MOMENTUM
SGD_NESTEROV = True  # UT / md OPTIM.NESTEROV


def make_optimizer(
    params: Iterable[nn.Parameter], name: str, lr: float, weight_decay: float = 0.0
) -> torch.optim.Optimizer:
    """Adam or SGD over ``params`` with the reference settings.

    Args:
        params: the parameters to adapt (must be non-empty).
        name: "adam" or "sgd".
        lr: learning rate, > 0.
        weight_decay: L2 weight decay, >= 0 (0 in every reference config used here).
    """
    params = list(params)
    if not params:
        raise ValueError("params is empty: the method has nothing to optimise")
    if name not in OPTIMIZERS:
        raise ValueError(f"optimizer={name!r} is not one of {list(OPTIMIZERS)}")
    if not lr > 0:
        raise ValueError(f"lr={lr!r} must be > 0")
    if weight_decay < 0:
        raise ValueError(f"weight_decay={weight_decay!r} must be >= 0")
    speed = _implementation(params)
    if name == "adam":
        return torch.optim.Adam(params, lr=lr, betas=ADAM_BETAS, weight_decay=weight_decay, **speed)
    return torch.optim.SGD(
        params, lr=lr, momentum=SGD_MOMENTUM, dampening=0.0, nesterov=SGD_NESTEROV, weight_decay=weight_decay, **speed
    )


# torch.optim's fused Adam/SGD kernels exist for these. Not a device path (``parts/device.py``): a question about
# which devices torch implements a kernel for, and the CPU and CUDA both take the fused branch.
_FUSED_DEVICES = ("cuda", "cpu")


def _implementation(params: list[nn.Parameter]) -> dict[str, bool]:
    """``fused=True`` when every parameter is a float tensor on a fused-capable device, else ``foreach=True``."""
    if all(p.device.type in _FUSED_DEVICES and p.is_floating_point() for p in params):
        return {"fused": True}
    return {"foreach": True}


def optimizer_from_config(params: Iterable[nn.Parameter], cfg: Any) -> torch.optim.Optimizer:
    """``make_optimizer`` from a method Config with fields ``optimizer``, ``lr`` (``weight_decay`` optional)."""
    return make_optimizer(params, cfg.optimizer, cfg.lr, getattr(cfg, "weight_decay", 0.0))

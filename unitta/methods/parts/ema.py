"""Exponential-moving-average (mean) teachers: CoTTA's and RoTTA's teacher networks.

CoTTA (Wang et al., CVPR'22, sec. 3) and RoTTA (Yuan et al., CVPR'23, sec. 3.3) keep a teacher whose
weights are an EMA of the student's: theta_t <- m * theta_t + (1 - m) * theta_s after every
optimisation step. Both references average *parameters only*; normalisation statistics (buffers) of
the teacher evolve through the teacher's own forwards. ``buffers=True`` also averages floating-point
buffers, for methods that want it.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from unitta.methods.norm.stats import constant
from unitta.methods.parts.device import DevicePaths

__all__ = ["make_teacher", "ema_update_", "ema_tensors_"]


def make_teacher(model: nn.Module) -> nn.Module:
    """A deep copy of ``model`` with every parameter frozen (``requires_grad=False``).

    The copy keeps ``model``'s train/eval mode and device. Build teachers inside a method's
    ``setup()`` so that ``reset()`` rebuilds them from the source.
    """
    teacher = copy.deepcopy(model)
    teacher.requires_grad_(False)
    return teacher


@torch.no_grad()
def ema_update_(teacher: nn.Module, student: nn.Module, momentum: float, buffers: bool = False) -> None:
    """In place: ``t <- momentum * t + (1 - momentum) * s`` for every parameter (and buffer).

    Args:
        teacher: the EMA network, updated in place.
        student: the trained network; must have the same parameter names and shapes.
        momentum: the teacher's keep rate m in [0, 1] (CoTTA ``MT`` = 0.999; RoTTA 1 - nu = 0.999).
        buffers: also average floating-point buffers (integer buffers such as BN's
            ``num_batches_tracked`` are copied from the student).
    """
    if not 0.0 <= momentum <= 1.0:
        raise ValueError(f"momentum={momentum!r} must lie in [0, 1]")
    t_params = dict(teacher.named_parameters())
    s_params = dict(student.named_parameters())
    if t_params.keys() != s_params.keys():
        missing = sorted(set(t_params) ^ set(s_params))[:5]
        raise ValueError(f"teacher and student have different parameters (e.g. {missing})")
    # one multi-tensor kernel per op instead of two per parameter; same arithmetic as mul_().add_()
    # no ``detach()``: this runs under no_grad, so the student's parameters add without autograd history
    _ema_(list(t_params.values()), [s_params[name] for name in t_params], momentum)
    if not buffers:
        return
    s_buffers = dict(student.named_buffers())
    floats_t, floats_s = [], []
    for name, t in teacher.named_buffers():
        s = s_buffers.get(name)
        if s is None or s.shape != t.shape:
            raise ValueError(f"student has no buffer {name!r} of shape {tuple(t.shape)}")
        if t.is_floating_point():
            floats_t.append(t)
            floats_s.append(s)
        else:
            t.copy_(s)
    _ema_(floats_t, floats_s, momentum)


def _ema_(targets: list[torch.Tensor], sources: list[torch.Tensor], momentum: float,
          paths: DevicePaths | None = None) -> None:
    """``t.mul_(momentum).add_(s, alpha=1 - momentum)`` for every pair, as two multi-tensor ops (``paths``: the
    calling method's device paths; None: read from the environment)."""
    if not targets:
        return
    first = targets[0]
    if (paths or DevicePaths.from_environment()).cuda(first):
        # one multi-tensor kernel taking the number as an argument: no tensor made per new momentum (CMF's filter
        # passes a new one every batch for its first few hundred, which a cached constant would copy from the host)
        torch._foreach_mul_(targets, momentum)
    elif all(t.dtype == first.dtype and t.device == first.device for t in targets):
        # a cached 0-dim tensor factor: the same float product as the Python number, which the CPU's
        # per-tensor fallback would otherwise convert to a tensor once per parameter
        torch._foreach_mul_(targets, constant(momentum, first))
    else:
        torch._foreach_mul_(targets, momentum)
    torch._foreach_add_(targets, sources, alpha=1.0 - momentum)


@torch.no_grad()
def ema_tensors_(targets: list[torch.Tensor], sources: list[torch.Tensor], momentum: float,
                 paths: DevicePaths | None = None) -> None:
    """In place: ``t <- momentum * t + (1 - momentum) * s`` for matching lists of tensors (CMF's filter steps,
    which average selected parameters rather than whole networks)."""
    if not 0.0 <= momentum <= 1.0:
        raise ValueError(f"momentum={momentum!r} must lie in [0, 1]")
    if len(targets) != len(sources):
        raise ValueError(f"{len(targets)} targets but {len(sources)} sources")
    _ema_(targets, sources, momentum, paths)

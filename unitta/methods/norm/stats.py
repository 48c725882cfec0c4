"""Small statistics helpers shared by the normalisation layers (Balanced BN, BDN, UnMix-TNS, Robust BN).

All helpers treat a feature map ``x`` of shape (B, C, *spatial) (spatial may be empty, as for a
BatchNorm1d input of shape (B, C)) and return per-sample, per-channel quantities of shape (B, C).
They are written for GPU efficiency (docs/benchmarks.md "Operator counts"): few, fused operators, no
host synchronisation, Python numbers only where an operator takes them as a parameter (``alpha``,
``value``, ``min``), since a Python number operand costs a host-side conversion per call.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

_CONSTANTS: dict[tuple[float, torch.dtype, torch.device], Tensor] = {}


def constant(value: float, like: Tensor) -> Tensor:
    """A cached 0-dim tensor holding ``value`` on ``like``'s device and dtype (an operand without a
    per-call host conversion; created once per (value, dtype, device))."""
    key = (value, like.dtype, like.device)
    out = _CONSTANTS.get(key)
    if out is None:
        out = _CONSTANTS[key] = torch.tensor(value, dtype=like.dtype, device=like.device)
    return out


def instance_mean_var(x: Tensor) -> tuple[Tensor, Tensor]:
    """Per-sample, per-channel mean and *biased* variance over the spatial positions, each (B, C).

    The quantities of ``torch.var_mean(x, dim=[2, 3], unbiased=False)`` in the reference BDN (UniTTA
    core/utils/bdn.py), computed in two passes (mean, then mean((x - mean)^2)). On CUDA that is the one
    fused ``torch.var_mean`` kernel; on the CPU ``torch.var_mean`` over inner dimensions is ~10x slower
    than a sum and a dot product, so the two passes are spelled out.
    For a (B, C) input every sample has one value per channel: mean = x, variance = 0.
    """
    if x.ndim == 2:
        return x, torch.zeros_like(x)
    flat = x.flatten(2)
    if flat.is_cuda:
        var, mean = torch.var_mean(flat, dim=2, unbiased=False)
        return mean, var
    positions = constant(float(flat.shape[2]), flat)
    mean = torch.div(flat.sum(2), positions)
    centred = flat - mean.unsqueeze(2)
    return mean, torch.div(torch.linalg.vecdot(centred, centred), positions)


def instance_moments(x: Tensor) -> tuple[Tensor, Tensor]:
    """Per-sample, per-channel mean and biased variance, each (B, C), in one pass over ``x``.

    The statistics of the EMA updates of Balanced BN and BDN (docs/unitta.md "Layers"). On the CPU the
    variance is E[x^2] - mean^2 from a sum and a dot product, without materialising x - mean (speed:
    UniTTA from ~3.7x to ~3.4x TEST on the CPU). Precision: E[x^2] - mean^2 carries an absolute error of
    about 1e-7 * E[x^2], a relative error 1e-7 * (1 + mean^2/var), negligible against the EMA noise
    unless a channel's spatial mean exceeds its spatial std by ~1000x; it is clamped at 0. On CUDA this
    is the (exact, two-pass) ``torch.var_mean`` kernel.
    """
    if x.ndim == 2:
        return x, torch.zeros_like(x)
    flat = x.flatten(2)
    if flat.is_cuda:
        var, mean = torch.var_mean(flat, dim=2, unbiased=False)
        return mean, var
    positions = constant(float(flat.shape[2]), flat)
    mean = torch.div(flat.sum(2), positions)
    square = torch.div(torch.linalg.vecdot(flat, flat), positions)
    return mean, torch.addcmul(square, mean, mean, value=-1.0).clamp_min_(0.0)


def class_mean_var(means: Tensor, dim: int) -> tuple[Tensor, Tensor]:
    """(mean, unbiased variance) of the class means along ``dim``, in one ``torch.var_mean`` call.

    Balanced BN / BDN: the global (or domain) variance is mean_k var_k + var_k(mean_k) with the
    *unbiased* variance of the K class means. With a single class the variance is 0 (torch gives NaN).
    """
    if means.shape[dim] < 2:
        mean = means.select(dim, 0)
        return mean, torch.zeros_like(mean)
    var, mean = torch.var_mean(means, dim=dim)
    return mean, var


def ema_step(mean: Tensor, var: Tensor, delta: Tensor, spread: Tensor, mn: Tensor, rate: float = 1.0):
    """One class-balanced EMA step of (mean, var) per group, given the group sums of the batch.

    With m_g the group's weight (eta, or TRIBE's clamp 1/n) and n_g its size, ``delta`` = m_g
    sum_i (mu_i - mean_g), ``spread`` = m_g sum_i mean_hw((x_i - mean_g)^2) and ``mn`` = m_g n_g:
        mean_g += rate * delta_g
        var_g  += rate * (spread_g - mn_g var_g - delta_g^2)
    (docs/unitta.md "Layers"; TRIBE's Balanced BN and UniTTA's BDN with rate = 1 - gamma and 1). Groups
    without samples have delta = spread = mn = 0 and stay unchanged.
    Returns (new_mean, new_var, gap) with gap = spread - mn var - delta^2, the variance increment.
    """
    gap = torch.addcmul(torch.addcmul(spread, mn, var, value=-1.0), delta, delta, value=-1.0)
    return torch.add(mean, delta, alpha=rate), torch.add(var, gap, alpha=rate), gap


def affine(mean: Tensor, var: Tensor, eps: float, weight: Tensor | None, bias: Tensor | None) -> tuple[Tensor, Tensor]:
    """(scale, shift) such that x * scale + shift == (x - mean) / sqrt(var + eps) * weight + bias.

    A negative variance (possible with the reference's unclamped BDN update, UniTTA core/utils/bdn.py)
    is clamped to 0 before adding eps, so the output is finite where the reference would give NaN; for
    non-negative variances this is the reference formula. clamp(var + eps, min=eps) equals
    clamp(var, min=0) + eps bit for bit. This is how PyTorch's own batch_norm kernel evaluates it.
    """
    scale = torch.rsqrt(torch.add(var, constant(eps, var)).clamp_min_(eps))
    if weight is not None:
        scale = scale * weight
    if bias is None:
        return scale, torch.mul(mean, scale).neg_()
    return scale, torch.addcmul(bias, mean, scale, value=-1.0)


def apply_affine(x: Tensor, scale: Tensor, shift: Tensor) -> Tensor:
    """x * scale + shift in one pass, for (C,) or (B, C) ``scale``/``shift`` (already shaped by ``as_map``)."""
    return torch.addcmul(shift, x, scale)


def as_map(stat: Tensor, x: Tensor) -> Tensor:
    """Reshape a (C,) or (B, C) statistic so that it broadcasts against ``x`` (B, C, *spatial)."""
    extra = (1,) * (x.ndim - 2)
    if stat.ndim == 1:
        return stat.view(-1, *extra)
    return stat.view(stat.shape[0], stat.shape[1], *extra)


def normalise(x: Tensor, mean: Tensor, var: Tensor, eps: float, weight: Tensor | None, bias: Tensor | None) -> Tensor:
    """(x - mean) / sqrt(var + eps) * weight + bias with (C,) or (B, C) statistics.

    Negative variances are clamped to 0 (see ``affine``). Per-channel statistics without autograd
    history go through ``F.batch_norm`` (one fused kernel; it refuses statistics with autograd history,
    as in TRIBE's updating Balanced BN forward); everything else is ``x * scale + shift``. Either way
    the rounding differs from the reference's four-step formula by about one float32 ulp.
    """
    if mean.ndim == 1 and x.ndim >= 2 and not (mean.requires_grad or var.requires_grad):
        return F.batch_norm(x, mean, var.clamp_min(0.0), weight, bias, training=False, momentum=0.0, eps=eps)
    scale, shift = affine(mean, var, eps, weight, bias)
    return apply_affine(x, as_map(scale, x), as_map(shift, x))


class AffineCache:
    """The (scale, shift) of ``affine`` for one layer, recomputed only when an input changes.

    An eval forward of Balanced BN / BDN normalises with statistics that changed at the last update, not
    since; caching their affine form makes that forward a single ``x * scale + shift`` operator. The
    cache keys on the identity and in-place version counter of every input tensor (and holds them, so an
    identity cannot be reused), so a buffer reassigned or modified in place, or a parameter stepped by
    an optimiser, is seen. Not for forwards that need autograd through the parameters (``usable``).
    """

    def __init__(self) -> None:
        self._inputs: tuple = ()
        self._versions: tuple = ()
        self._value: tuple[Tensor, Tensor] | None = None

    @staticmethod
    def usable(weight: Tensor | None, bias: Tensor | None) -> bool:
        """False when gradients must reach ``weight``/``bias`` through this forward."""
        if not torch.is_grad_enabled():
            return True
        return not any(p is not None and p.requires_grad for p in (weight, bias))

    def get(self, mean: Tensor, var: Tensor, eps: float, weight: Tensor | None, bias: Tensor | None, shape) -> tuple:
        """(scale, shift) of ``affine(mean, var, ...)``, each viewed as ``shape``."""
        inputs = (mean, var, weight, bias)
        versions = tuple(-1 if t is None else t._version for t in inputs)
        if (
            self._value is None
            or versions != self._versions
            or any(a is not b for a, b in zip(inputs, self._inputs))
        ):
            scale, shift = affine(mean, var, eps, weight, bias)
            self._value = (scale.view(shape), shift.view(shape))
            self._inputs, self._versions = inputs, versions
        return self._value

    def clear(self) -> None:
        self.__init__()

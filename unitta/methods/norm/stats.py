"""Small statistics helpers shared by the normalisation layers (Balanced BN, BDN, UnMix-TNS, Robust BN).

All helpers treat a feature map ``x`` of shape (B, C, *spatial) (spatial may be empty, as for a
BatchNorm1d input of shape (B, C)) and return per-sample, per-channel quantities of shape (B, C).
They are written for GPU efficiency (measured by bench/opcount.py): few, fused operators, no
host synchronisation, Python numbers only where an operator takes them as a parameter (``alpha``,
``value``, ``min``), since a Python number operand costs a host-side conversion per call.
"""

from __future__ import annotations

import functools
import math
import weakref

import torch
import torch.nn.functional as F
from torch import Tensor

from unitta.methods.norm.fast_paths import fast_paths
from unitta.methods.parts.device import DevicePaths

_CONSTANTS: dict[tuple[float, torch.dtype, torch.device], Tensor] = {}


def constant(value: float, like: Tensor) -> Tensor:
    """A cached 0-dim tensor holding ``value`` on ``like``'s device and dtype (an operand without a
    per-call host conversion; created once per (value, dtype, device))."""
    key = (value, like.dtype, like.device)
    out = _CONSTANTS.get(key)
    if out is None:
        out = _CONSTANTS[key] = torch.tensor(value, dtype=like.dtype, device=like.device)
    return out


def source_statistics(bn: torch.nn.Module, layer: str) -> tuple[Tensor, Tensor]:
    """Copies of a source BatchNorm's running mean and variance, the starting point of every layer here;
    a clear error naming ``layer`` when ``bn`` keeps none (``track_running_stats=False``)."""
    if getattr(bn, "running_mean", None) is None or getattr(bn, "running_var", None) is None:
        raise ValueError(f"{layer} needs a BatchNorm with running statistics (track_running_stats=True)")
    return bn.running_mean.detach().clone(), bn.running_var.detach().clone()


def instance_mean_var(
    x: Tensor, paths: DevicePaths, unbiased: bool = False, keepdim: bool = False
) -> tuple[Tensor, Tensor]:
    """Per-sample, per-channel mean and *biased* (``unbiased``: divided by L - 1) variance over the L
    spatial positions, each (B, C) (``keepdim``: (B, C, 1, 1), maps that broadcast against x). ``paths``: the
    device paths of the layer that asks (``unitta/methods/parts/device.py``).

    The quantities of ``torch.var_mean(x, dim=[2, 3], unbiased=False)`` in the reference BDN (UniTTA
    core/utils/bdn.py), computed in two passes (mean, then mean((x - mean)^2)). On CUDA that is the one
    fused ``torch.var_mean`` kernel; on the CPU ``torch.var_mean`` over inner dimensions is ~10x slower
    than a sum and a Euclidean norm, so the two passes are spelled out.
    For a (B, C) input every sample has one value per channel: mean = x, variance = 0.
    """
    if x.ndim == 2:
        return x, torch.zeros_like(x)
    dims = tuple(range(2, x.ndim))
    if paths.cuda(x) or not fast_paths():
        var, mean = torch.var_mean(x, dim=dims, unbiased=unbiased, keepdim=keepdim)
        return mean, var
    positions = math.prod(x.shape[2:])
    mean = torch.div(x.sum(dims, keepdim=keepdim), constant(float(positions), x))
    centred = x - (mean if keepdim else as_map(mean, x))
    norm = torch.linalg.vector_norm(centred, dim=dims, keepdim=keepdim)  # ||x - mean|| over the positions
    return mean, torch.div(norm * norm, constant(float(positions - 1 if unbiased else positions), x))


def instance_moments(x: Tensor, paths: DevicePaths) -> tuple[Tensor, Tensor, int]:
    """Per-sample, per-channel spatial sums of x and x^2, each (B, C), and the number of positions L.

    (first / L, second / L) are a sample's spatial mean and mean square E[x^2]: the statistics of the
    EMA updates of Balanced BN and BDN (``ema_step``), which fold 1/L into their group weights (one
    operator per batch instead of two per layer). On the CPU: a sum and a Euclidean norm, two fast
    reductions without any x-sized temporary (``torch.var_mean`` over inner dimensions is ~10x slower
    there); on CUDA the one fused ``torch.var_mean`` kernel, returned as means (L = 1).
    """
    if x.ndim == 2:
        return x, x * x, 1
    dims = tuple(range(2, x.ndim))
    if paths.cuda(x) or not fast_paths():  # the plain path is the CUDA one: means, L = 1
        var, mean = torch.var_mean(x, dim=dims, unbiased=False)
        return mean, torch.addcmul(var, mean, mean), 1
    norm = torch.linalg.vector_norm(x, dim=dims)
    return x.sum(dims), norm * norm, math.prod(x.shape[2:])


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


def ema_step(mean: Tensor, var: Tensor, s1: Tensor, s2: Tensor, mn: Tensor, rate: float = 1.0):
    """One class-balanced EMA step of (mean, var) per group g, from the batch's weighted group sums.

    With m_g the group's weight (eta, or TRIBE's clamp 1/n), n_g its size, mu_i and E_i[x^2] a sample's
    spatial mean and mean square: ``s1`` = m_g sum_{i in g} mu_i, ``s2`` = m_g sum_{i in g} E_i[x^2] and
    ``mn`` = m_g n_g (the group sums of ``norm/groups.py``). The step of TRIBE's Balanced BN and UniTTA's
    BDN (docs/unitta.md "Layers") is
        delta_g  = m_g sum_i (mu_i - mean_g)                    = s1 - mn mean_g
        spread_g = m_g sum_i mean_hw((x_i - mean_g)^2)          = s2 - mean_g (s1 + delta_g)
        mean_g  += rate * delta_g
        var_g   += rate * (spread_g - mn_g var_g - delta_g^2)
    with rate = 1 - gamma (Balanced BN) or 1 (BDN). Groups without samples have s1 = s2 = mn = 0 and stay
    unchanged. Precision: spread is a difference of terms of size m n E[x^2], so it carries an absolute
    error of about 1e-7 m n (E[x^2] + mean^2), a relative error 1e-7 (1 + mean^2/var) of the variance
    step: negligible against the EMA noise unless a channel's mean exceeds its std by ~1000x.
    Returns (new_mean, new_var, delta, spread); ``spread`` is None when rate == 1, where the variance
    step is evaluated as s2 - mn var - mean s1 - delta new_mean (one operator fewer).
    """
    delta = torch.addcmul(s1, mn, mean, value=-1.0)
    if rate == 1.0:
        new_mean = mean + delta
        gap = torch.addcmul(torch.addcmul(s2, mn, var, value=-1.0), mean, s1, value=-1.0)
        return new_mean, var + torch.addcmul(gap, delta, new_mean, value=-1.0), delta, None
    spread = torch.addcmul(s2, mean, s1 + delta, value=-1.0)
    gap = torch.addcmul(torch.addcmul(spread, mn, var, value=-1.0), delta, delta, value=-1.0)
    return torch.add(mean, delta, alpha=rate), torch.add(var, gap, alpha=rate), delta, spread


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


_PARAMETER_MAPS: dict[tuple, tuple[weakref.ref, Tensor]] = {}


def parameter_map(param: Tensor, x: Tensor) -> Tensor:
    """``as_map(param, x)`` of a (C,) parameter, without autograd history, made once per parameter, storage and
    rank (dropped with the parameter): an in-place update (an optimiser step) shows through the view, a
    reassigned ``.data`` makes a new one. For a hand-written Function's forward, which returns the parameter's
    gradient itself."""
    if torch.compiler.is_compiling():  # a traced graph: a view costs nothing there, and the cache is host state
        return as_map(param.detach(), x)
    key = (id(param), x.ndim, param.data_ptr(), param.dtype, param.device)
    made = _PARAMETER_MAPS.get(key)
    if made is None or made[0]() is not param:
        made = (weakref.ref(param, lambda _, key=key: _PARAMETER_MAPS.pop(key, None)), as_map(param.detach(), x))
        _PARAMETER_MAPS[key] = made
    return made[1]


def normalise(x: Tensor, mean: Tensor, var: Tensor, eps: float, weight: Tensor | None, bias: Tensor | None) -> Tensor:
    """(x - mean) / sqrt(var + eps) * weight + bias with (C,) or (B, C) statistics.

    Negative variances are clamped to 0 (see ``affine``). Per-channel statistics without autograd
    history go through ``F.batch_norm`` (one fused kernel; it refuses statistics with autograd history,
    as in TRIBE's updating Balanced BN forward); everything else is ``x * scale + shift``. Either way
    the rounding differs from the reference's four-step formula by about one float32 ulp.
    """
    if fast_paths() and mean.ndim == 1 and x.ndim >= 2 and not (mean.requires_grad or var.requires_grad):
        return F.batch_norm(x, mean, var.clamp_min(0.0), weight, bias, training=False, momentum=0.0, eps=eps)
    scale, shift = affine(mean, var, eps, weight, bias)
    return apply_affine(x, as_map(scale, x), as_map(shift, x))


def needs_grad(x: Tensor, weight: Tensor | None, bias: Tensor | None) -> bool:
    """True when a layer's forward must be differentiable: autograd is on and its input or affine
    parameters need a gradient (the layers with a hand-written backward then run their Function)."""
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (x, weight, bias))


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

    def get(self, mean: Tensor, var: Tensor, eps: float, weight: Tensor | None, bias: Tensor | None,
            shape: tuple[int, ...] | None = None) -> tuple[Tensor, Tensor]:
        """(scale, shift) of ``affine(mean, var, ...)``, each viewed as ``shape`` if given."""
        inputs = (mean, var, weight, bias)
        versions = tuple(-1 if t is None else t._version for t in inputs)
        if (
            self._value is None
            or versions != self._versions
            or any(a is not b for a, b in zip(inputs, self._inputs))
        ):
            scale, shift = affine(mean, var, eps, weight, bias)
            self._value = (scale, shift) if shape is None else (scale.view(shape), shift.view(shape))
            self._inputs, self._versions = inputs, versions
        return self._value

    def clear(self) -> None:
        self.__init__()


class ViewCache:
    """Reshaped views of a layer's buffers and parameters, made once instead of once per forward.

    A view shares its tensor's storage, so in-place updates (EMA steps, optimiser steps) show through
    it; a tensor that is reassigned (``.to()``, ``load_state_dict`` of a new tensor) gets a new view. A
    tensor that needs a gradient in a forward with autograd on gets a fresh view, so that the view is
    part of that forward's graph.
    """

    def __init__(self) -> None:
        self._views: dict[tuple[str, tuple[int, ...]], tuple[Tensor, Tensor]] = {}

    def get(self, name: str, tensor: Tensor, shape: tuple[int, ...]) -> Tensor:
        if tensor.requires_grad and torch.is_grad_enabled():
            return tensor.view(shape)
        key = (name, shape)
        cached = self._views.get(key)
        if cached is None or cached[0] is not tensor:
            cached = self._views[key] = (tensor, tensor.view(shape))
        return cached[1]


_LOW_PRECISION = (torch.bfloat16, torch.float16)


def float32_forward(forward):
    """Decorator: run a normalisation layer's ``forward(self, x, ...)`` in float32 under autocast.

    Under ``precision: bf16`` the convolutions hand a layer bf16 maps, while its statistics buffers stay
    float32 (as PyTorch's own BatchNorm under autocast, which normalises in float32): the layer then
    upcasts its input and runs with autocast off, and its float32 output goes on to the next
    convolution, which autocast casts back. Without autocast and for float32 inputs nothing changes.
    """

    @functools.wraps(forward)
    def wrapper(self, x: Tensor, *args, **kwargs):
        if x.dtype in _LOW_PRECISION or torch.is_autocast_enabled(x.device.type):
            with torch.autocast(x.device.type, enabled=False):
                return forward(self, x.float(), *args, **kwargs)
        return forward(self, x, *args, **kwargs)

    return wrapper

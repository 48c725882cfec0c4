"""Sharpness-aware minimisation (Foret et al., ICLR'21), as SAR uses it (Niu et al., ICLR'23, eq. 4-5).

One SAM update is two gradient evaluations around the current weights w:

1. ``ascend()``: with the gradient g of the loss at w in ``p.grad``, move to w + e, e = rho * g / (||g||_2 + 1e-12)
   (||g|| over all parameters together), and clear the gradients;
2. the caller evaluates the loss again at w + e and back-propagates;
3. ``descend()``: put the weights back to exactly w (saved copies, not w + e - e) and let the base optimiser
   step with the gradient taken at w + e; clear the gradients.

rho = 0.05 and the 1e-12 guard are those of the SAM implementation that SAR's code and the mariodoebler TTA benchmark
ship (``sam.py`` after davda54/sam, non-adaptive). A parameter without a gradient is left alone in both steps.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn

__all__ = ["SAM", "SAM_RHO"]

SAM_RHO = 0.05  # neighbourhood size: SAR code / mariodoebler benchmark SAM(..., rho=0.05) default
_NORM_GUARD = 1e-12  # SAM's grad_norm + 1e-12


class SAM:
    """The two half-steps of SAM (module docstring) around a base optimiser over ``params``."""

    def __init__(self, params: Iterable[nn.Parameter], base: torch.optim.Optimizer, rho: float = SAM_RHO):
        if not rho >= 0:
            raise ValueError(f"rho={rho!r} must be >= 0")
        self.params = list(params)
        self.base = base
        self.rho = rho
        self._saved: tuple[list[nn.Parameter], list[torch.Tensor]] | tuple[()] = ()

    @torch.no_grad()
    def ascend(self) -> None:
        """w -> w + rho g / ||g|| for the parameters that have a gradient; gradients cleared."""
        params = [p for p in self.params if p.grad is not None]
        if not params:
            self._saved = ()
            return
        grads = [p.grad for p in params]
        # multi-tensor kernels (as torch.nn.utils.clip_grad_norm_): a handful of launches whatever the layer count
        norm = torch.linalg.vector_norm(torch.stack(torch._foreach_norm(grads)))
        scale = self.rho / (norm + _NORM_GUARD)
        self._saved = (params, torch._foreach_mul(params, 1.0))  # exact copies of w
        torch._foreach_add_(params, torch._foreach_mul(grads, scale))
        self.zero_grad()

    @torch.no_grad()
    def descend(self) -> None:
        """Back to the saved w, then the base optimiser's step with the current gradients; gradients cleared."""
        if self._saved:
            torch._foreach_copy_(*self._saved)
        self._saved = ()
        self.base.step()
        self.zero_grad()

    def zero_grad(self) -> None:
        self.base.zero_grad(set_to_none=True)

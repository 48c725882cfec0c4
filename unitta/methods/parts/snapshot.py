"""A copy of a model's and its optimiser's state, restored in place: the periodic and triggered resets of
RDumb (Press et al., NeurIPS'23) and SAR's model recovery (Niu et al., ICLR'23, sec. 4).

``restore()`` loads the saved tensors into the same modules and parameters (``load_state_dict``), so the
optimiser keeps pointing at the model's parameters and a compiled model stays compiled; the optimiser's
state (Adam moments, SGD momentum) goes back to what it was, which for a snapshot taken before the first
step is empty, as for a new optimiser. This is what the mariodoebler TTA benchmark's ``reset()`` does
(``load_model_and_optimizer``). A method's full ``reset()`` (a fresh deep copy of the source) also clears
its cost counters; these resets happen inside a stream and must not.

``optimizer=None`` restores the model only: SAR's recovery in SAR's code and in the mariodoebler benchmark reloads
the state of its SAM wrapper, which does not hold the base SGD's momentum buffers, so the momentum survives it.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

__all__ = ["Snapshot"]


class Snapshot:
    """The state of ``model`` (and ``optimizer``) when built; ``restore()`` puts it back in place."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer | None):
        self.model = model
        self.optimizer = optimizer
        self._model_state = {key: value.detach().clone() for key, value in model.state_dict().items()}
        self._optimizer_state = None if optimizer is None else copy.deepcopy(optimizer.state_dict())

    @torch.no_grad()
    def restore(self) -> None:
        self.model.load_state_dict(self._model_state)
        if self.optimizer is not None:
            self.optimizer.load_state_dict(copy.deepcopy(self._optimizer_state))

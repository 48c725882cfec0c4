"""A gradient method's whole adaptation step as one graph: forward, loss, backward and optimiser update
(docs/benchmarks.md, "Compiled steps").

The step is written as a pure function of (trainable parameters, optimiser state, batch): the forward through
``torch.func.functional_call``, the loss and its gradient through ``torch.func.grad_and_value`` (a transform dynamo
traces, unlike ``Tensor.backward``), and the optimiser's update as multi-tensor (``torch._foreach_*``) arithmetic
equal to ``torch.optim.Adam``'s and ``torch.optim.SGD``'s for the settings ``parts/optim.py`` builds. So
``torch.compile(..., fullgraph=True)`` captures the whole step as one graph, with no graph break (on CUDA,
``mode="reduce-overhead"`` replays it as one CUDA graph).

The update is written in place into the parameters and into the optimiser's own ``state`` (the keys and layout of
torch's fused implementation: ``step`` a float32 tensor on the parameters' device, ``exp_avg``, ``exp_avg_sq``,
``momentum_buffer``), so that an eager ``optimizer.step()``, a snapshot or ``reset()`` sees the same state. SGD's
momentum buffer starts at zeros instead of torch's first-step copy of the gradient: 0.9 * 0 + g = g exactly.
Adam's bias corrections are computed on the device in float64 from the step tensor (torch: in double from the step
count), so a compiled step equals the eager one to float rounding (tests/methods/test_compile_capture.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn
from torch.func import functional_call, grad_and_value

__all__ = ["WholeStep"]

LossOf = Callable[[Tensor, Tensor], Any]


class WholeStep:
    """``step(x) -> logits`` (detached, computed before the update): one forward of ``model``, the loss
    ``loss_of(x, logits)``, its gradient for ``optimizer``'s parameters and ``optimizer``'s update, compiled as
    one graph by ``torch.compile(fullgraph=True, **compile_options)``.

    ``loss_of`` must be a function of tensors only (no host reads, no change of state: it runs inside
    ``grad_and_value``, which refuses in-place writes to captured tensors). With ``after``, it returns (loss, aux)
    and ``after(aux)`` runs once the gradient is known, without gradients: it updates the method's state and
    returns None or a boolean tensor, False to skip the update (parameters and optimiser state are kept as they
    were, as when an eager step is not taken: ETA's empty selection).
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer: torch.optim.Optimizer,
        loss_of: LossOf,
        after: Callable[[Any], Tensor | None] | None = None,
        **compile_options: Any,
    ):
        self.model = model
        self.loss_of = loss_of
        self.after = after
        self.params = [p for group in optimizer.param_groups for p in group["params"]]
        names = {id(p): name for name, p in model.named_parameters()}
        if any(id(p) not in names for p in self.params):
            raise ValueError("the optimiser holds a parameter that is not the model's: a whole step cannot take it")
        self.names = [names[id(p)] for p in self.params]
        self.update = _update_of(optimizer, self.params)
        self.compiled = torch.compile(self.step, fullgraph=True, **compile_options)
        # CUDA graphs (these modes) replay into the same output buffers: a step's logits are copied out
        self.cuda_graphs = compile_options.get("mode") in ("reduce-overhead", "max-autotune")

    def __call__(self, x: Tensor) -> Tensor:
        if not self.cuda_graphs:
            return self.compiled(x)
        torch.compiler.cudagraph_mark_step_begin()  # the previous step's outputs are no longer read
        return self.compiled(x).clone()

    def step(self, x: Tensor) -> Tensor:
        """The step, uncompiled (what ``__call__`` runs compiled)."""

        def loss(trainable: dict[str, Tensor]) -> tuple[Tensor, tuple[Tensor, Any]]:
            logits = functional_call(self.model, trainable, (x,))
            if self.after is None:
                return self.loss_of(x, logits), (logits, ())  # aux: tensors only
            value, aux = self.loss_of(x, logits)
            return value, (logits, aux)

        trainable = dict(zip(self.names, self.params, strict=True))
        grads, (_, (logits, aux)) = grad_and_value(loss, has_aux=True)(trainable)
        with torch.no_grad():
            take = self.after(aux) if self.after is not None else None
            grads = [grads[name] for name in self.names]
            if take is None:
                self.update(grads)
            else:  # the update where ``take``, else every tensor as it was: no host read
                tensors = [*self.params, *self.update.state()]
                before = [t.clone() for t in tensors]
                self.update(grads)
                for tensor, old in zip(tensors, before, strict=True):
                    tensor.copy_(torch.where(take, tensor, old))
        return logits.detach()


def _update_of(optimizer: torch.optim.Optimizer, params: list[nn.Parameter]) -> _AdamUpdate | _SgdUpdate:
    """The in-place multi-tensor update of ``optimizer`` (Adam or SGD with one parameter group), its state created."""
    if len(optimizer.param_groups) != 1:
        raise ValueError("a whole step takes an optimiser with one parameter group (parts/optim.py builds one)")
    group = optimizer.param_groups[0]
    if group.get("maximize") or group.get("differentiable"):
        raise ValueError("a whole step does not implement maximize or differentiable optimisers")
    state = [optimizer.state[p] for p in params]
    if type(optimizer) is torch.optim.Adam and not group["amsgrad"] and not group.get("decoupled_weight_decay"):
        for p, s in zip(params, state, strict=True):
            s.setdefault("step", torch.zeros((), dtype=torch.float32, device=p.device))
            s.setdefault("exp_avg", torch.zeros_like(p, memory_format=torch.preserve_format))
            s.setdefault("exp_avg_sq", torch.zeros_like(p, memory_format=torch.preserve_format))
        _static(state)
        return _AdamUpdate(params, state, group)
    if type(optimizer) is torch.optim.SGD and group["dampening"] == 0:
        if group["momentum"]:
            for p, s in zip(params, state, strict=True):
                if s.get("momentum_buffer") is None:
                    s["momentum_buffer"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        _static(state)
        return _SgdUpdate(params, state, group)
    raise ValueError(f"a whole step implements Adam (no amsgrad) and SGD (dampening 0), not {optimizer!r}")


def _static(state: list[dict[str, Tensor]]) -> None:
    """Mark the optimiser state as tensors at fixed addresses (as torch does for a compiled optimiser): CUDA graphs
    (``mode="reduce-overhead"``) then update them in place instead of copying them in and out at every replay."""
    for tensors in state:
        for tensor in tensors.values():
            torch._dynamo.mark_static_address(tensor)


class _AdamUpdate:
    """torch.optim.Adam's update (L2 weight decay added to the gradient; ``torch/optim/adam.py``), multi-tensor."""

    def __init__(self, params: list[nn.Parameter], state: list[dict[str, Tensor]], group: dict[str, Any]):
        self.params = params
        self.steps = [s["step"] for s in state]
        self.exp_avg = [s["exp_avg"] for s in state]
        self.exp_avg_sq = [s["exp_avg_sq"] for s in state]
        self.lr, (self.beta1, self.beta2) = float(group["lr"]), group["betas"]
        self.eps, self.weight_decay = float(group["eps"]), float(group["weight_decay"])

    def state(self) -> list[Tensor]:
        return [*self.steps, *self.exp_avg, *self.exp_avg_sq]

    def __call__(self, grads: list[Tensor]) -> None:
        if self.weight_decay:
            grads = torch._foreach_add(grads, self.params, alpha=self.weight_decay)
        torch._foreach_add_(self.steps, 1.0)
        torch._foreach_lerp_(self.exp_avg, grads, 1.0 - self.beta1)
        torch._foreach_mul_(self.exp_avg_sq, self.beta2)
        torch._foreach_addcmul_(self.exp_avg_sq, grads, grads, value=1.0 - self.beta2)
        step = self.steps[0].to(torch.float64)  # every parameter's step count is the same
        step_size = self.lr / (1.0 - self.beta1**step)
        bias_correction2_sqrt = (1.0 - self.beta2**step).sqrt()
        denom = torch._foreach_div(torch._foreach_sqrt(self.exp_avg_sq), bias_correction2_sqrt.float())
        torch._foreach_add_(denom, self.eps)
        update = torch._foreach_div(self.exp_avg, denom)
        torch._foreach_mul_(update, step_size.float())
        torch._foreach_sub_(self.params, update)


class _SgdUpdate:
    """torch.optim.SGD's update with dampening 0 (momentum, Nesterov, L2 weight decay; ``torch/optim/sgd.py``)."""

    def __init__(self, params: list[nn.Parameter], state: list[dict[str, Tensor]], group: dict[str, Any]):
        self.params = params
        self.buffers = [s["momentum_buffer"] for s in state] if group["momentum"] else []
        self.lr, self.momentum = float(group["lr"]), float(group["momentum"])
        self.nesterov, self.weight_decay = bool(group["nesterov"]), float(group["weight_decay"])

    def state(self) -> list[Tensor]:
        return list(self.buffers)

    def __call__(self, grads: list[Tensor]) -> None:
        if self.weight_decay:
            grads = torch._foreach_add(grads, self.params, alpha=self.weight_decay)
        if self.buffers:
            torch._foreach_mul_(self.buffers, self.momentum)
            torch._foreach_add_(self.buffers, grads)
            grads = torch._foreach_add(grads, self.buffers, alpha=self.momentum) if self.nesterov else self.buffers
        torch._foreach_add_(self.params, grads, alpha=-self.lr)

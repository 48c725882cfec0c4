"""The method contract as checks: what every registered TTA method must do (``unitta/methods/parts/tta_method.py``
states it). The package also holds ``host_sync`` (the recorder of host synchronisations the checks use) and
``command`` (``unitta methods`` = ``python -m unitta.contract``: check a method, list the methods); it sits in
the command layer, above the cells, evaluation and the run layer it uses (docs/layout.md).

Each check builds the method by name, runs it on the batches it is given and returns a ``CheckResult``
(passed or not, and why), so that the test suite (``tests/methods/test_contract.py``) and a command
line checker for new methods can share them. The contract:

* finite (B, K) scores for a full batch and for a batch of one (streams end with short batches);
* ``reset()`` restores the source exactly: the adapted model's state equals the freshly built one and
  the outputs equal those of a never-used method;
* the source model passed in is never modified, by ``setup()``, ``forward`` or ``reset()``: its state, its
  modules and its outputs stay those of an untouched copy;
* a fixed seed gives identical outputs on CPU (randomness comes from the method's seeded generator);
* the hyper-parameter check refuses an unknown name and a value of the wrong type;
* ``method.cost`` counts batches, images, forward passes (>= 1 per batch), and backward passes
  exactly when the method holds an optimiser; nothing before the first batch (one-off set-up goes to
  ``setup_cost``, ``TTAMethod.one_off``);
* under bf16 autocast (a cell's ``precision: bf16``) the scores stay finite;

and two warnings, which a method passes with a reason to read: a method that should adapt (``adapts``) whose
outputs on the check's shifted images equal the source model's on every batch ("never adapts"), and a
``forward`` that synchronises with the host (``.item()``, ``.cpu()``, ``.tolist()``, ``bool(tensor)``,
``nonzero``, boolean-mask indexing; ``unitta.contract.host_sync``), forbidden by docs/adding_a_method.md
unless unavoidable and documented.

``run_checks`` gives every check its own deep copy of the model, so that a method which modifies the model
it was given cannot change what a later check compares with.

``overrides`` (keyword arguments) go to ``get_method``, e.g. fewer CoTTA augmentations to keep a
check fast; they must not change what the check is about.
"""

from __future__ import annotations

import copy
import dataclasses
import typing
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.data import TensorDataset

from unitta.contract.host_sync import HostSyncRecorder
from unitta.methods.parts.registry import build_config, get_method, method_class, resolved_hints
from unitta.methods.parts.tta_method import TTAMethod
from unitta.models.info import ModelInfo

__all__ = [
    "CheckResult",
    "CHECKS",
    "check_finite_outputs",
    "check_reset_restores_source",
    "check_source_unchanged",
    "check_adapts",
    "check_host_sync",
    "check_deterministic",
    "check_config_validation",
    "check_cost_accounting",
    "check_bf16_autocast",
    "run_checks",
]


@dataclass(frozen=True)
class CheckResult:
    """The outcome of one contract check for one method: passed or not; a passed check may carry a warning."""

    check: str
    method: str
    passed: bool
    reason: str = ""
    warning: bool = False

    def __bool__(self) -> bool:
        return self.passed


def _result(check: str, method: str, failure: str | None) -> CheckResult:
    return CheckResult(check, method, failure is None, failure or "ok")


def _warning(check: str, method: str, warning: str | None) -> CheckResult:
    return CheckResult(check, method, True, warning or "ok", warning is not None)


def _state(module: nn.Module) -> dict[str, Tensor]:
    return {key: value.detach().clone() for key, value in module.state_dict().items()}


def _first_difference(a: dict[str, Tensor], b: dict[str, Tensor]) -> str | None:
    if a.keys() != b.keys():
        return f"different state keys, e.g. {sorted(set(a) ^ set(b))[:3]}"
    for key, value in a.items():
        if value.shape != b[key].shape or not torch.equal(value, b[key]):
            return key
    return None


def check_finite_outputs(
    name: str, model: nn.Module, info: ModelInfo, batches: Sequence[Tensor], **overrides: Any
) -> CheckResult:
    """Every batch in ``batches`` (e.g. sizes 1, 64, 1) gives finite scores of shape (B, num_classes)."""
    return _result("finite_outputs", name, _scores_failure(get_method(name, model, info, **overrides), info, batches))


def check_bf16_autocast(
    name: str, model: nn.Module, info: ModelInfo, batches: Sequence[Tensor], **overrides: Any
) -> CheckResult:
    """Under ``precision: bf16`` (``torch.autocast`` to bfloat16 on the model's device) every batch still
    gives finite (B, num_classes) scores: a cell's precision option works for every method."""
    method = get_method(name, model, info, **overrides)
    try:
        with torch.autocast(method.device.type, dtype=torch.bfloat16):
            failure = _scores_failure(method, info, batches)
    except RuntimeError as exc:  # e.g. a float32 buffer updated from a bf16 statistic
        failure = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    return _result("bf16", name, failure)


def _scores_failure(method: TTAMethod, info: ModelInfo, batches: Sequence[Tensor]) -> str | None:
    for i, x in enumerate(batches):
        out = method(x)
        expected = (x.shape[0], info.num_classes)
        if tuple(out.shape) != expected:
            return f"batch {i}: output shape {tuple(out.shape)}, expected {expected}"
        if not torch.isfinite(out).all():
            return f"batch {i} (size {x.shape[0]}): non-finite scores"
    return None


def check_reset_restores_source(
    name: str, model: nn.Module, info: ModelInfo, batches: Sequence[Tensor], **overrides: Any
) -> CheckResult:
    """After adapting on ``batches`` and ``reset()``, the method is indistinguishable from a fresh one."""
    method = get_method(name, model, info, **overrides)
    initial = _state(method.model)
    for x in batches:
        method(x)
    method.reset()
    differs = _first_difference(initial, _state(method.model))
    if differs is not None:
        return _result("reset", name, f"state after reset() differs from the fresh method's at {differs!r}")
    if method.cost.batches or method.cost.forwards or method.cost.backwards:
        return _result("reset", name, f"cost not cleared by reset(): {method.cost}")
    fresh = get_method(name, model, info, **overrides)
    for i, x in enumerate(batches):
        if not torch.equal(method(x), fresh(x)):
            return _result("reset", name, f"batch {i}: outputs after reset() differ from a fresh method's")
    return _result("reset", name, None)


def _structure(module: nn.Module) -> list[tuple[str, str, bool]]:
    return [(key, type(m).__qualname__, m.training) for key, m in module.named_modules()]


def _source_difference(pristine: nn.Module, model: nn.Module, probe: Tensor) -> str | None:
    """How ``model`` differs from its untouched copy ``pristine``: state, modules and mode, or outputs on ``probe``."""
    differs = _first_difference(_state(pristine), _state(model))
    if differs is not None:
        return f"its state at {differs!r}"
    for (key, kind, mode), (key2, kind2, mode2) in zip(_structure(pristine), _structure(model), strict=False):
        if (key, kind) != (key2, kind2):
            return f"its modules: {key or 'the model'} ({kind}) became {key2 or 'the model'} ({kind2})"
        if mode != mode2:
            return f"the train/eval mode of {key or 'the model'}"
    if len(_structure(pristine)) != len(_structure(model)):
        return "its modules (some were added or removed)"
    was = pristine.training
    try:
        with torch.no_grad():
            same = torch.equal(pristine.eval()(probe), model.eval()(probe))
    finally:
        pristine.train(was)
    return None if same else "its outputs (same state and modules)"


def check_source_unchanged(
    name: str, model: nn.Module, info: ModelInfo, batches: Sequence[Tensor], **overrides: Any
) -> CheckResult:
    """The model passed in is never modified: building the method (``setup()``), adapting on ``batches`` and
    ``reset()`` leave its state, its modules and its outputs those of an untouched copy (the outputs are
    compared on ``batches[0]`` in eval mode, after the method has run)."""
    pristine = copy.deepcopy(model)
    method = get_method(name, model, info, **overrides)
    for x in batches:
        method(x)
    method.reset()
    differs = _source_difference(pristine, model, batches[0])
    if differs is None:
        return _result("source_unchanged", name, None)
    return _result("source_unchanged", name, f"the source model passed in was modified: {differs} "
                                             "(build state on self.model in setup(), never on self.source_model)")


def _same_as_source(out: Tensor, source_logits: Tensor, scores: str) -> bool:
    """Whether the method's scores say what the source model's logits say (up to float rounding)."""
    reference = source_logits.softmax(1) if scores == "probabilities" else source_logits
    return out.shape == reference.shape and torch.allclose(out.float(), reference.float(), rtol=1e-5, atol=1e-6)


def check_adapts(
    name: str, model: nn.Module, info: ModelInfo, batches: Sequence[Tensor], **overrides: Any
) -> CheckResult:
    """A warning for a method meant to adapt (``adapts``) whose scores on every one of ``batches`` (images
    under distribution shift, in stream order) equal the source model's: it behaves exactly like ``test``."""
    cls = method_class(name)
    if not cls.adapts:
        return _warning("adapts", name, None)
    source = copy.deepcopy(model).eval()
    method = get_method(name, model, info, **overrides)
    for x in batches:
        out = method(x)
        with torch.no_grad():
            if not _same_as_source(out.detach(), source(x), cls.scores):
                return _warning("adapts", name, None)
    return _warning("adapts", name, f"never adapts: its scores on {len(batches)} shifted batches equal the source "
                                    "model's (set adapts = False if that is intended, as for 'test')")


def check_host_sync(
    name: str, model: nn.Module, info: ModelInfo, batches: Sequence[Tensor], **overrides: Any
) -> CheckResult:
    """A warning for a ``forward`` that synchronises with the host (on a GPU: ``.item()``, ``.cpu()``,
    ``.tolist()``, ``bool(tensor)``, ``nonzero``, boolean-mask indexing), seen on any device by
    ``HostSyncRecorder``; building the method is not watched, only its calls on ``batches``."""
    method = get_method(name, model, info, **overrides)
    first: Counter[tuple[str, str]] = Counter()
    with HostSyncRecorder() as syncs:
        for i, x in enumerate(batches):
            method(x)
            if i == 0:
                first = Counter(syncs.host_data)  # constants made on the first batch: once per cell
    steady_host_data = syncs.host_data - first
    if not syncs.counts and not steady_host_data:
        return _warning("host_sync", name, None)
    problems = []
    if syncs.counts:
        problems.append(f"{sum(syncs.counts.values())} host synchronisation(s) in forward over {len(batches)} "
                        f"batches: {syncs.summary()}")
    if steady_host_data:
        sites = ", ".join(f"{what} at {where} (x{n})" for (what, where), n in steady_host_data.most_common(3))
        problems.append(f"{sum(steady_host_data.values())} tensor(s) made from host data after the first batch "
                        f"(a host-to-device copy each on a GPU): {sites}")
    return _warning("host_sync", name, "; ".join(problems) + " (docs/adding_a_method.md: avoid, or document why)")


def check_deterministic(
    name: str, model: nn.Module, info: ModelInfo, batches: Sequence[Tensor], seed: int = 7, **overrides: Any
) -> CheckResult:
    """Two methods built with the same seed give identical outputs on ``batches``."""
    a = get_method(name, model, info, seed=seed, **overrides)
    b = get_method(name, model, info, seed=seed, **overrides)
    for i, x in enumerate(batches):
        if not torch.equal(a(x), b(x)):
            return _result("deterministic", name, f"batch {i}: outputs differ for the same seed {seed}")
    return _result("deterministic", name, None)


def check_config_validation(name: str) -> CheckResult:
    """``build_config`` refuses an unknown hyper-parameter and a value of the wrong type (ValueError)."""
    cls = method_class(name)
    failure = _refused(lambda: build_config(cls, no_such_hyper_parameter=1), "an unknown hyper-parameter")
    if failure:
        return _result("config_validation", name, failure)
    typed = _scalar_field(cls)
    if typed is not None:  # methods without hyper-parameters have no type to get wrong
        failure = _refused(lambda: build_config(cls, **{typed: object()}), f"{typed}=object()")
        if failure:
            return _result("config_validation", name, failure)
    if not dataclasses.is_dataclass(build_config(cls)):
        return _result("config_validation", name, "build_config() did not return the Config dataclass")
    return _result("config_validation", name, None)


def _refused(build: Callable[[], Any], what: str) -> str | None:
    try:
        build()
    except ValueError:
        return None
    except Exception as exc:  # noqa: BLE001 - the contract asks for ValueError, report what came instead
        return f"{what} raised {type(exc).__name__} instead of ValueError: {exc}"
    return f"{what} was accepted"


def _scalar_field(cls: type[TTAMethod]) -> str | None:
    """A Config field whose annotation ``build_config`` type-checks (not a free-form tuple/list/Any)."""
    hints = resolved_hints(cls.Config)
    for field in dataclasses.fields(cls.Config):
        hint = hints[field.name]
        origin = typing.get_origin(hint)
        if hint in (float, int, bool, str) or origin is typing.Literal:
            return field.name
    return None


def check_cost_accounting(name: str, model: nn.Module, info: ModelInfo, x: Tensor, **overrides: Any) -> CheckResult:
    """One batch: 1 batch, B images, >= 1 forward, time measured; >= 1 backward iff the method has an optimiser.

    ``x`` should be a full batch (64): methods that update every 64 samples then take one step.
    """
    method = get_method(name, model, info, **overrides)
    if method.cost.forwards or method.cost.backwards:
        return _result("cost", name, f"{method.cost} before the first batch: one-off set-up belongs in setup_cost "
                                     "(run it inside TTAMethod.one_off)")
    method(x)
    cost = method.cost
    if (cost.batches, cost.images) != (1, x.shape[0]):
        return _result("cost", name, f"batches={cost.batches}, images={cost.images} after one batch of {x.shape[0]}")
    if cost.forwards < 1:
        return _result("cost", name, "no forward pass counted (track() the networks the method runs)")
    if not cost.seconds > 0:
        return _result("cost", name, f"seconds={cost.seconds}: wall time not measured")
    trains = getattr(method, "optimizer", None) is not None
    if trains and cost.backwards < 1:
        return _result("cost", name, "the method has an optimiser but no backward pass was counted (use step())")
    if not trains and cost.backwards:
        return _result("cost", name, f"{cost.backwards} backward passes counted by a method without an optimiser")
    return _result("cost", name, None)


def check_source(model: nn.Module, images: Tensor) -> TensorDataset:
    """A labelled stand-in source set for methods that need one when the caller gave none: the check images
    labelled by the source model's own predictions (the contract checks mechanics, not accuracy)."""
    with torch.no_grad():
        labels = model.eval()(images).argmax(1)
    return TensorDataset(images, labels)


CHECKS = ("finite_outputs", "reset", "source_unchanged", "deterministic", "config_validation", "cost", "bf16",
          "adapts", "host_sync")

Guard = Callable[[str, Callable[[], CheckResult]], CheckResult]


def _unguarded(check: str, run: Callable[[], CheckResult]) -> CheckResult:
    return run()


def run_checks(
    name: str, model: nn.Module, info: ModelInfo, images: Tensor, small: int = 8, guard: Guard = _unguarded,
    **overrides: Any,
) -> list[CheckResult]:
    """All checks of ``CHECKS`` for method ``name`` on ``images`` (at least 65 + 2 * ``small``, stream order).

    ``images[:64]`` is the full batch (finite outputs, cost: methods that update every 64 samples take one
    step on it), ``images[64:65]`` the batch of one (first and last in the finite-output stream), and the
    reset and determinism checks run on the next two batches of ``small`` images (pass overrides such as a
    shorter update period so that they adapt). Every check gets its own deep copy of ``model``, so that a
    method that modifies the model it is given cannot hide it from a later check. ``guard(check, run)`` runs
    each check (the command line turns a method's exception into that check's failure).
    """
    need = 65 + 2 * small
    if images.shape[0] < need:
        raise ValueError(f"run_checks needs at least {need} images, got {images.shape[0]}")
    if method_class(name).needs_source and overrides.get("source") is None:
        overrides = {**overrides, "source": check_source(copy.deepcopy(model), images)}
    full, one = images[:64], images[64:65]
    stream = [images[65 : 65 + small], images[65 + small : need]]
    plan: dict[str, Callable[[nn.Module], CheckResult]] = {
        "finite_outputs": lambda m: check_finite_outputs(name, m, info, [one, full, one], **overrides),
        "reset": lambda m: check_reset_restores_source(name, m, info, stream, **overrides),
        "source_unchanged": lambda m: check_source_unchanged(name, m, info, stream, **overrides),
        "deterministic": lambda m: check_deterministic(name, m, info, stream, **overrides),
        "config_validation": lambda m: check_config_validation(name),
        "cost": lambda m: check_cost_accounting(name, m, info, full, **overrides),
        "bf16": lambda m: check_bf16_autocast(name, m, info, [one, *stream], **overrides),  # small: slow on CPUs
        "adapts": lambda m: check_adapts(name, m, info, [full, *stream], **overrides),
        "host_sync": lambda m: check_host_sync(name, m, info, [full, *stream], **overrides),
    }
    return [guard(check, lambda run=run: run(copy.deepcopy(model))) for check, run in plan.items()]

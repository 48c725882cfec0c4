"""The method contract as checks: what every registered TTA method must do (``unitta/methods/parts/tta_method.py``
states it). The package also holds ``host_sync`` (the recorder of host synchronisations the checks use) and
``command`` (``unitta methods`` = ``python -m unitta.contract``: check a method, list the methods); it sits in
the command layer, above the cells, evaluation and the run layer it uses (docs/layout.md).

The checks build the method by name, run it on the batches they are given and return ``CheckResult``s
(passed or not, and why), so that the test suite (``tests/methods/test_contract.py``) and a command line
checker for new methods can share them; one run serves several checks (``check_stream`` five,
``check_twins`` two), so that a method costs four builds, not ten. The contract:

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

``run_checks`` gives every run its own deep copy of the model, so that a method which modifies the model
it was given cannot change what a later run compares with.

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
from unitta.methods.parts.tta_method import MethodCost, TTAMethod
from unitta.models.info import ModelInfo

__all__ = [
    "CheckResult",
    "CHECKS",
    "check_stream",
    "check_twins",
    "check_config_validation",
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


def check_bf16_autocast(
    name: str, model: nn.Module, info: ModelInfo, batches: Sequence[Tensor], **overrides: Any
) -> CheckResult:
    """Under ``precision: bf16`` (``torch.autocast`` to bfloat16 on the model's device) every batch still
    gives finite (B, num_classes) scores: a cell's precision option works for every method."""
    method = get_method(name, model, info, **overrides)
    failure = None
    try:
        with torch.autocast(method.device.type, dtype=torch.bfloat16):
            for i, x in enumerate(batches):
                failure = failure or _scores_failure(i, x, method(x), info)
    except RuntimeError as exc:  # e.g. a float32 buffer updated from a bf16 statistic
        failure = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    return _result("bf16", name, failure)


def _scores_failure(i: int, x: Tensor, out: Tensor, info: ModelInfo) -> str | None:
    """Why the scores ``out`` of batch ``i`` are not finite (B, num_classes) scores, or None."""
    expected = (x.shape[0], info.num_classes)
    if tuple(out.shape) != expected:
        return f"batch {i}: output shape {tuple(out.shape)}, expected {expected}"
    if not torch.isfinite(out).all():
        return f"batch {i} (size {x.shape[0]}): non-finite scores"
    return None


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


def _same_as_source(out: Tensor, source_logits: Tensor, scores: str) -> bool:
    """Whether the method's scores say what the source model's logits say (up to float rounding)."""
    reference = source_logits.softmax(1) if scores == "probabilities" else source_logits
    return out.shape == reference.shape and torch.allclose(out.float(), reference.float(), rtol=1e-5, atol=1e-6)


def _cost_failure(method: TTAMethod, before: MethodCost, x: Tensor) -> str | None:
    """What ``method.cost`` miscounted for the batch ``x`` it just ran (``before``: the cost before it)."""
    cost = method.cost
    counted = (cost.batches - before.batches, cost.images - before.images)
    if counted != (1, x.shape[0]):
        return f"batches={counted[0]}, images={counted[1]} counted for one batch of {x.shape[0]}"
    if cost.forwards - before.forwards < 1:
        return f"no forward pass counted for the batch of {x.shape[0]} (track() the networks the method runs)"
    if not cost.seconds > before.seconds:
        return f"seconds={cost.seconds}: wall time not measured"
    trains = getattr(method, "optimizer", None) is not None
    if trains and cost.backwards < 1:
        return "the method has an optimiser but no backward pass was counted (use step())"
    if not trains and cost.backwards:
        return f"{cost.backwards} backward passes counted by a method without an optimiser"
    return None


def check_stream(
    name: str, model: nn.Module, info: ModelInfo, one: Tensor, full: Tensor, stream: Sequence[Tensor],
    **overrides: Any,
) -> dict[str, CheckResult]:
    """One method built once runs ``[one, full, one, *stream]`` and is then ``reset()``; what it did serves
    five checks (so that a method costs one build and one stream here, not five):

    * ``finite_outputs``: every batch gives finite (B, num_classes) scores, the batch of one ``one`` first
      (a fresh method), after the full batch, and the short batches of ``stream``;
    * ``cost``: nothing counted before the first batch (one-off set-up belongs in ``setup_cost``); the full
      batch ``full`` (64 images: methods that update every 64 samples take a step by its end) counts 1 batch,
      its images, >= 1 forward and its wall time; >= 1 backward by then iff the method holds an optimiser;
    * ``adapts`` (a warning): the scores on ``full`` and ``stream`` (shifted images, stream order) all equal
      the source model's, for a method meant to adapt: it behaves exactly like ``test``;
    * ``host_sync`` (a warning): ``forward`` on ``full`` and ``stream`` synchronises with the host (on a GPU:
      ``.item()``, ``.cpu()``, ``.tolist()``, ``bool(tensor)``, ``nonzero``, boolean-mask indexing), seen on any
      device by ``HostSyncRecorder``; building the method is not watched;
    * ``source_unchanged``: the model passed in is never modified: building the method (``setup()``),
      adapting and ``reset()`` leave its state, its modules and its outputs those of an untouched copy (the
      outputs compared on ``stream[0]`` in eval mode, after the method has run).
    """
    cls = method_class(name)
    pristine = copy.deepcopy(model)  # what source_unchanged compares with
    source = copy.deepcopy(model).eval()  # what adapts compares with
    method = get_method(name, model, info, **overrides)
    cost_failure = None
    if method.cost.forwards or method.cost.backwards:
        cost_failure = (f"{method.cost} before the first batch: one-off set-up belongs in setup_cost "
                        "(run it inside TTAMethod.one_off)")
    batches = [one, full, one, *stream]
    watched = [full, *stream]  # what adapts and host_sync look at: full-size and stream batches
    syncs = HostSyncRecorder()
    first_host_data: Counter[tuple[str, str]] = Counter()  # made on the first watched batch: once per cell
    finite_failure, adapted = None, not cls.adapts  # a method that should not adapt passes adapts as it is
    for i, x in enumerate(batches):
        before = dataclasses.replace(method.cost)
        if any(x is w for w in watched):
            with syncs:
                out = method(x)
            if x is full:
                first_host_data = Counter(syncs.host_data)
            if not adapted:
                with torch.no_grad():
                    adapted = not _same_as_source(out.detach(), source(x), cls.scores)
        else:
            out = method(x)
        finite_failure = finite_failure or _scores_failure(i, x, out, info)
        if x is full and cost_failure is None:
            cost_failure = _cost_failure(method, before, x)
    method.reset()
    changed = _source_difference(pristine, model, stream[0])
    n_syncs = sum(syncs.counts.values())
    steady_host_data = syncs.host_data - first_host_data
    sync_problems = [f"{n_syncs} host synchronisation(s) in forward over {len(watched)} batches: {syncs.summary()}"
                     ] if n_syncs else []
    if steady_host_data:
        sites = ", ".join(f"{what} at {where} (x{n})" for (what, where), n in steady_host_data.most_common(3))
        sync_problems.append(f"{sum(steady_host_data.values())} tensor(s) made from host data after the first "
                             f"batch (a host-to-device copy each on a GPU): {sites}")
    return {
        "finite_outputs": _result("finite_outputs", name, finite_failure),
        "cost": _result("cost", name, cost_failure),
        "adapts": _warning("adapts", name, None if adapted else (
            f"never adapts: its scores on {len(watched)} shifted batches equal the source model's (set adapts = "
            "False if that is intended, as for 'test')")),
        "host_sync": _warning("host_sync", name, None if not sync_problems else (
            "; ".join(sync_problems) + " (docs/adding_a_method.md: avoid, or document why)")),
        "source_unchanged": _result("source_unchanged", name, None if changed is None else (
            f"the source model passed in was modified: {changed} (build state on self.model in setup(), never "
            "on self.source_model)")),
    }


def check_twins(
    name: str, model: nn.Module, info: ModelInfo, stream: Sequence[Tensor], seed: int = 7, **overrides: Any
) -> dict[str, CheckResult]:
    """Two methods built with the same ``seed`` run ``stream`` side by side; this serves two checks:

    * ``deterministic``: the two give identical outputs on every batch (randomness comes from the method's
      seeded generator);
    * ``reset``: after the first one's ``reset()`` its state equals the freshly built one's, its cost is
      cleared, and on ``stream`` again it gives the outputs it gave when fresh: it is indistinguishable from
      a never-used method.
    """
    a = get_method(name, model, info, seed=seed, **overrides)
    b = get_method(name, model, info, seed=seed, **overrides)
    initial = _state(a.model)
    fresh, nondeterministic = [], None
    for i, x in enumerate(stream):
        out = a(x)
        fresh.append(out.detach().clone())
        if nondeterministic is None and not torch.equal(out, b(x)):
            nondeterministic = f"batch {i}: outputs differ for the same seed {seed}"
    return {"deterministic": _result("deterministic", name, nondeterministic),
            "reset": _result("reset", name, _reset_failure(a, initial, stream, fresh))}


def _reset_failure(method: TTAMethod, initial: dict[str, Tensor], stream: Sequence[Tensor],
                   fresh: list[Tensor]) -> str | None:
    """Why ``method``, adapted on ``stream`` and then ``reset()``, is not the fresh method whose state was
    ``initial`` and whose outputs on ``stream`` were ``fresh``; None when it is."""
    method.reset()
    differs = _first_difference(initial, _state(method.model))
    if differs is not None:
        return f"state after reset() differs from the fresh method's at {differs!r}"
    if method.cost.batches or method.cost.forwards or method.cost.backwards:
        return f"cost not cleared by reset(): {method.cost}"
    for i, x in enumerate(stream):
        if not torch.equal(method(x), fresh[i]):
            return f"batch {i}: outputs after reset() differ from a fresh method's"
    return None


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


def _once(run: Callable[[], dict[str, CheckResult]]) -> Callable[[], dict[str, CheckResult]]:
    """``run`` called at most once: later calls return its results, or raise the exception it raised."""
    outcome: list[tuple[dict[str, CheckResult] | None, Exception | None]] = []

    def results() -> dict[str, CheckResult]:
        if not outcome:
            try:
                outcome.append((run(), None))
            except Exception as exc:  # noqa: BLE001 - raised again to every check the run serves
                outcome.append((None, exc))
        value, exc = outcome[0]
        if exc is not None:
            raise exc
        assert value is not None
        return value

    return results


def run_checks(
    name: str, model: nn.Module, info: ModelInfo, images: Tensor, small: int = 8, guard: Guard = _unguarded,
    checks: Sequence[str] = CHECKS, **overrides: Any,
) -> list[CheckResult]:
    """``checks`` (default: all ``CHECKS``; only their builds made) for ``name`` on ``images`` (>= 65 + 2 * ``small``).

    ``images[:64]`` is the full batch (cost: methods that update every 64 samples take a step by its end),
    ``images[64:65]`` the batch of one, and the next two batches of ``small`` images the stream (pass
    overrides such as a shorter update period so that the method adapts within them). Four builds of the
    method serve the nine checks: ``check_stream`` (finite outputs, cost, adapts, host sync, source unchanged),
    ``check_twins`` (two builds: determinism and reset), ``check_bf16_autocast``; the config check builds
    none. Each gets its own deep copy of ``model`` (a method that modifies its model cannot hide it from another).
    ``guard(check, run)`` runs each check (on the command line a method's exception fails every check its run serves).
    """
    if unknown := [check for check in checks if check not in CHECKS]:
        raise ValueError(f"unknown check(s) {unknown}: choose from {list(CHECKS)}")
    need = 65 + 2 * small
    if images.shape[0] < need:
        raise ValueError(f"run_checks needs at least {need} images, got {images.shape[0]}")
    if method_class(name).needs_source and overrides.get("source") is None:
        overrides = {**overrides, "source": check_source(copy.deepcopy(model), images)}
    full, one = images[:64], images[64:65]
    stream = [images[65 : 65 + small], images[65 + small : need]]
    streamed = _once(lambda: check_stream(name, copy.deepcopy(model), info, one, full, stream, **overrides))
    twins = _once(lambda: check_twins(name, copy.deepcopy(model), info, stream, **overrides))
    plan: dict[str, Callable[[], CheckResult]] = {
        "finite_outputs": lambda: streamed()["finite_outputs"],
        "reset": lambda: twins()["reset"],
        "source_unchanged": lambda: streamed()["source_unchanged"],
        "deterministic": lambda: twins()["deterministic"],
        "config_validation": lambda: check_config_validation(name),
        "cost": lambda: streamed()["cost"],
        # small batches: bf16 is slow on CPUs
        "bf16": lambda: check_bf16_autocast(name, copy.deepcopy(model), info, [one, *stream], **overrides),
        "adapts": lambda: streamed()["adapts"],
        "host_sync": lambda: streamed()["host_sync"],
    }
    return [guard(check, plan[check]) for check in checks]

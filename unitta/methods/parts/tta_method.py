"""The TTA method contract: ``TTAMethod``, the base class every method subclasses, and ``MethodCost``, what
adapting has cost so far (the registry and per-dataset presets are in ``unitta/methods/parts/registry.py``).

A method sees only images in stream order, never labels or true domains. ``reset()`` rebuilds the
method from a pristine deep copy of the source model, so restoring the source is exact by
construction; subclasses put all their state-building in ``setup()``.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from unitta.methods.parts.device import DevicePaths
from unitta.methods.parts.heads import FeatureModel
from unitta.methods.parts.whole_step import WholeStep
from unitta.models.info import ModelInfo
from unitta.nn.norms import norm_kind

__all__ = ["TTAMethod", "MethodCost", "norm_kind_problem"]


@dataclass
class MethodCost:
    """What adapting has cost so far: model forward/backward passes, batches, images, seconds.

    A method holds two: ``cost``, the stream's (what the real-time protocol charges per batch and the row's
    ``forwards_per_batch``), and ``setup_cost``, its one-off set-up before the stream (``TTAMethod.one_off``).
    """

    forwards: int = 0
    backwards: int = 0
    batches: int = 0
    images: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, float]:
        return dataclasses.asdict(self)


class TTAMethod:
    """Base class of all test-time adaptation methods.

    Subclasses define a frozen ``Config`` dataclass (defaults = the CIFAR-10 reference config),
    optional ``presets`` (dataset family -> field overrides), ``setup()`` and ``forward()``.
    """

    name: ClassVar[str] = ""
    # Bump when the method's behaviour changes (results computed with another version are stale):
    # the cell identity includes it, so a resumed sweep recomputes such cells.
    version: ClassVar[int] = 1
    # True for methods that need labelled source images (EATA's Fisher, RMT's replay, SANTA, GTTA):
    # they get them as ``get_method(..., source=DATASET)`` and refuse to start without (``self.source``).
    needs_source: ClassVar[bool] = False
    # The normalisation kinds (``unitta.nn.norms.NORM_KINDS``) of the models the method runs on:
    # BatchNorm-statistics methods only 'batch'; affine-adapting methods all three (docs/methods.md).
    norm_kinds: ClassVar[tuple[str, ...]] = ("batch",)
    # What ``forward`` returns: 'logits' (softmax gives the class probabilities) or 'probabilities' (LAME).
    scores: ClassVar[str] = "logits"
    # Hyper-parameters ``unitta methods check`` runs the method with, to keep the contract check short
    # (e.g. RMT's source warm-up); what the check verifies must not depend on them. Explicit ``--set`` wins.
    check_overrides: ClassVar[dict[str, Any]] = {}
    # False only for a method that never changes the source model's outputs on purpose (``test``): the
    # contract's ``adapts`` check warns when any other method's outputs equal the source model's.
    adapts: ClassVar[bool] = True
    # The hyper-parameters worth searching and their ranges (``unitta/search_dimensions.py``: Config field ->
    # LogUniform | Uniform | IntUniform | Choice; ``methods/parts/search_space.py``), each range cited; empty:
    # nothing to tune (docs/methods.md).
    space: ClassVar[dict[str, Any]] = {}
    # True for a self-training method whose ``compile()`` captures the whole step (forward, loss, backward, update) as
    # one graph (``parts/whole_step.py``; docs/benchmarks.md "Compiled steps"): its ``forward`` is
    # ``self_train(x, self.loss)`` (or, once compiled, ``run_whole_step(x)``, as ETA), ``self.loss`` is of tensors only
    # (no host read, no state written; a method with ``after_step(aux)`` returns (loss, aux) and writes its state
    # there) and ``self.optimizer`` is ``parts/optim.py``'s Adam or SGD.
    whole_step: ClassVar[bool] = False

    @dataclass(frozen=True)
    class Config:
        pass

    presets: ClassVar[dict[str, dict[str, Any]]] = {}
    # profile name -> the values that profile sets, for every dataset family ({"reference": {"lr": 1e-4}}) or per
    # family like ``presets``; applied after the preset, before the user's overrides (``parts/profiles.py``).
    # With the Config defaults and ``presets``, every value a method can run with is in its own class. Unlike
    # ``presets``, a subclass does not inherit it: a method derived from another states its own.
    profiles: ClassVar[dict[str, dict[str, Any]]] = {}

    def __init__(self, model: nn.Module, cfg: Any, info: ModelInfo, seed: int = 0, source: Any = None):
        if self.needs_source and source is None:
            raise ValueError(
                f"method {self.name!r} needs labelled source images: pass get_method(..., source=DATASET) "
                "with a torch Dataset of (image, label) pairs, e.g. unitta.data.load_source(dataset)"
            )
        kind = norm_kind(model)
        if kind != "none" and (problem := norm_kind_problem(type(self), kind, info.name)):
            raise ValueError(problem)
        self.source = source
        self.source_model = model
        # the branches of its device-dependent code (docs/benchmarks.md "Device paths"): UNITTA_DEVICE_PATHS, read
        # once now, handed to the layers and augmentations it builds
        self.device_paths = DevicePaths.from_environment()
        self.cfg = cfg
        self.info = info
        self.seed = seed
        self.cost = MethodCost()
        self.setup_cost = MethodCost()
        self._in_one_off = False
        self.model: nn.Module = model
        self.generator: torch.Generator = torch.Generator()
        self.reset()

    # ------------------------------------------------------------------ lifecycle
    def reset(self) -> None:
        """Back to the source model with all adaptation state cleared (exact, by deep copy)."""
        self.model = copy.deepcopy(self.source_model)
        self.model.eval()
        self.device = _module_device(self.model)
        self.generator = torch.Generator(device="cpu").manual_seed(self.seed)
        self.cost = MethodCost()
        self.setup_cost = MethodCost()
        self._tracked: list[nn.Module] = []
        self._hooks: list[Any] = []
        self._whole_step: WholeStep | None = None  # compile() builds it, for the new model
        self._counting = True
        with self.one_off():
            self.setup()
        self.track(self.model)

    @contextlib.contextmanager
    def one_off(self) -> Iterator[None]:
        """Count what runs inside as one-off set-up, not as adaptation of the stream: passes and seconds go to
        ``setup_cost`` (the row's ``setup_forwards``, ``setup_backwards``, ``setup_time_s``), never to ``cost``.

        ``setup()`` always runs inside it; a method whose set-up waits for the first batch (EATA's Fisher
        estimate, RMT's warm-up at the test batch size) wraps that work in ``with self.one_off():`` inside
        ``forward``, so that the real-time protocol's k and ``forwards_per_batch`` cover the stream only
        (docs/results.md, "Cost"). Passes count only through tracked modules (``track``): ``setup()`` must
        track a module before it runs passes through it. Nested uses count once.
        """
        if self._in_one_off:
            yield
            return
        stream_cost, self.cost = self.cost, self.setup_cost  # the pass counters add to ``self.cost``
        self._in_one_off = True
        start = time.perf_counter()
        try:
            yield
        finally:
            self.setup_cost.seconds += time.perf_counter() - start
            self._in_one_off = False
            self.cost = stream_cost

    def setup(self) -> None:
        """Build method state on ``self.model`` (a fresh copy of the source). Override."""

    def forward(self, x: Tensor) -> Tensor:
        """One batch in stream order -> (B, K) scores; adapts as it goes. Override."""
        raise NotImplementedError

    def predict_scores(self, x: Tensor) -> Tensor:
        """Scores for ``x`` without adapting (of the kind ``scores`` names). Override when the method's
        non-adapting prediction is not its current model in evaluation mode (docs/results.md, "Real time").

        Called under ``torch.no_grad()`` by ``predict``, which restores every buffer of ``self.model`` and the
        cost counters afterwards; an override must not change any other state of the method.
        """
        scores = self.model(x)
        if type(self.model) is FeatureModel:  # split at the classifier, forward gives features (SplitModel: logits)
            scores = self.model.logits(scores)
        return scores.softmax(dim=1) if self.scores == "probabilities" else scores

    # ------------------------------------------------------------------ calling
    def predict(self, x: Tensor) -> Tensor:
        """Score one batch without adapting and without changing the method's state (parameters, buffers,
        memories, random streams, cost): the real-time protocol's busy batches and the forgetting check."""
        if x.ndim != 4:
            raise ValueError(f"{self.name}: expected a batch of images (B, C, H, W), got shape {tuple(x.shape)}")
        buffers = [(b, b.detach().clone()) for b in self._held_buffers()]
        cost = dataclasses.replace(self.cost)
        generator_state = self.generator.get_state()
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                return self.predict_scores(x)
        finally:
            with torch.no_grad():
                for buffer, saved in buffers:
                    buffer.copy_(saved)
            self.model.train(was_training)
            self.cost = cost
            self.generator.set_state(generator_state)

    def _held_buffers(self) -> list[Tensor]:
        """Every buffer of every module the method holds as an attribute (its model, teachers, anchors...)."""
        seen: dict[int, Tensor] = {}
        for value in vars(self).values():
            if isinstance(value, nn.Module) and value is not self.source_model:
                for buffer in value.buffers():
                    seen.setdefault(id(buffer), buffer)
        return list(seen.values())

    def __call__(self, x: Tensor) -> Tensor:
        if x.ndim != 4:
            raise ValueError(f"{self.name}: expected a batch of images (B, C, H, W), got shape {tuple(x.shape)}")
        # No device synchronisation here: on a GPU, the host queues the next batch while this one runs.
        # ``cost.seconds`` is then the host's time; ``evaluate`` measures the stream's wall time.
        start, setup_seconds = time.perf_counter(), self.setup_cost.seconds
        out = self.forward(x)
        # set-up done at this batch (``one_off``) is in setup_cost.seconds, not the stream's seconds
        self.cost.seconds += time.perf_counter() - start - (self.setup_cost.seconds - setup_seconds)
        self.cost.batches += 1
        self.cost.images += x.shape[0]
        return out

    def compile(self, **options: Any) -> None:
        """``torch.compile`` the method's step (a cell's ``compile: true``; off by default), ``options`` passed on.

        A ``whole_step`` method's adaptation step is compiled whole, as one graph (``parts/whole_step.py``); any
        other method's model is compiled in place (``nn.Module.compile``: same parameters and state), and what its
        forward does around the model (backward, optimiser, Python state) stays eager (docs/benchmarks.md
        "Compiled steps"). Call it again after ``reset()``, which drops what it built.
        """
        if self.whole_step:
            after = getattr(self, "after_step", None)  # ETA: its filter's state, and whether to step
            self._whole_step = WholeStep(self.model, self.optimizer, self.loss, after, **options)
        else:
            self.model.compile(**options)

    # ------------------------------------------------------------------ helpers for subclasses
    def track(self, module: nn.Module) -> None:
        """Count every forward pass through ``module`` in ``self.cost.forwards``."""
        if any(m is module for m in self._tracked):
            return
        self._tracked.append(module)
        self._hooks.append(module.register_forward_hook(self._count_forward))

    def _count_forward(self, module: nn.Module, args: Any, output: Any) -> None:
        if self._counting:  # off while a compiled whole step runs: it counts its own passes (``self_train``)
            self.cost.forwards += 1

    def backward(self, loss: Tensor) -> None:
        """``loss.backward()``, counted in ``self.cost.backwards``."""
        loss.backward()
        self.cost.backwards += 1

    def step(self, loss: Tensor, optimizer: torch.optim.Optimizer | None = None) -> None:
        """One optimisation step on ``loss``: zero the gradients, counted backward, ``optimizer.step()``.

        ``optimizer`` defaults to ``self.optimizer`` (the one a gradient-based method builds in ``setup()``).
        """
        optimizer = self.optimizer if optimizer is None else optimizer
        optimizer.zero_grad(set_to_none=True)
        self.backward(loss)
        optimizer.step()

    def self_train(self, x: Tensor, loss_of: Callable[[Tensor, Tensor], Tensor | None]) -> Tensor:
        """The gradient self-training forward of TENT-like methods (TENT, RPL, DeYO): a batch smaller than
        ``cfg.min_update_batch`` is only predicted; otherwise ``cfg.steps`` times a forward and one ``step`` on
        ``loss_of(x, logits)`` (None: no step, e.g. every sample filtered out). Returns the last forward's
        logits, detached (the original tent.py's prediction: before that forward's step)."""
        if x.shape[0] < self.cfg.min_update_batch:
            with torch.no_grad():
                return self.model(x)
        prediction = None
        if self._whole_step is not None and loss_of == self._whole_step.loss_of:  # compiled: one graph per step
            for _ in range(self.cfg.steps):
                prediction = self.run_whole_step(x)
            return prediction
        for _ in range(self.cfg.steps):
            with torch.enable_grad():
                logits = self.model(x)
                loss = loss_of(x, logits)
                if loss is not None:
                    self.step(loss)
            prediction = logits.detach()
        return prediction

    def run_whole_step(self, x: Tensor) -> Tensor:
        """One compiled whole step (``compile()``) on ``x``: its logits, its forward and backward counted."""
        self._counting = False  # the forward hook's side effect inside the graph would make dynamo trace it again
        try:
            logits = self._whole_step(x)
        finally:
            self._counting = True
        self.cost.forwards += 1
        self.cost.backwards += 1
        return logits

    def num_domains(self) -> int | None:
        """Domains discovered so far (BDN-based methods); None for methods without domains."""
        return None

    def own_resets(self) -> int:
        """How often the method returned itself to the source state since its last ``reset()`` (RDumb's periodic
        reset, SAR's model recovery): the ``resets`` column counts these with the reset protocol's (docs/results.md)."""
        return 0

    def extra_metrics(self) -> dict[str, Any]:
        """Method-specific figures for the result row (e.g. memory-bank fill). Override."""
        return {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.cfg})"


def _module_device(model: nn.Module) -> torch.device:
    for tensor in model.parameters():
        return tensor.device
    for tensor in model.buffers():
        return tensor.device
    return torch.device("cpu")


_NORM_NAMES = {"batch": "BatchNorm", "layer": "LayerNorm", "group": "GroupNorm"}


def norm_kind_problem(cls: type[TTAMethod], kind: str, model: str) -> str | None:
    """One line saying why method ``cls`` does not run on a model of normalisation ``kind``, or None if it does.

    A method runs on the kinds of its ``norm_kinds`` (docs/methods.md, "Normalisation kinds").
    """
    if kind in cls.norm_kinds:
        return None
    runs_on = ", ".join(_NORM_NAMES.get(k, k) for k in cls.norm_kinds)
    return (
        f"method {cls.name!r} runs on {runs_on} models only, but model {model!r} normalises with "
        f"{_NORM_NAMES.get(kind, kind)} (norm kind {kind!r}); pick a BatchNorm model for it or drop it "
        "(docs/methods.md, 'Normalisation kinds')"
    )

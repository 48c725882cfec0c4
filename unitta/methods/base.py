"""The TTA method contract, the method registry and per-dataset hyper-parameter presets.

Every method is one class in one file under ``unitta/methods/``, registered by name::

    @register_method("tent")
    class Tent(TTAMethod):
        \"\"\"TENT: entropy minimisation on BN affine parameters (Wang et al., ICLR'21).\"\"\"

        @dataclass(frozen=True)
        class Config:
            lr: float = 1e-3                      # configs/adapter/cifar10/tent.yaml
            optimizer: Literal["adam", "sgd"] = "adam"

        presets = {"imagenet": {"lr": 2.5e-4, "optimizer": "sgd"}}

        def setup(self) -> None:                  # build state on self.model (a fresh source copy)
            ...

        def forward(self, x: Tensor) -> Tensor:   # one batch in stream order -> (B, K) scores
            ...

A method sees only images in stream order, never labels or true domains. ``reset()`` rebuilds the
method from a pristine deep copy of the source model, so restoring the source is exact by
construction; subclasses put all their state-building in ``setup()``.

The output of ``forward`` is a (B, K) score tensor whose argmax is the prediction (logits or
probabilities, whichever the method naturally produces; the paper's metric only uses the argmax).

The built-in method modules are listed in ``BUILTIN_MODULES`` and imported on the first registry
access, so importing ``unitta.methods`` (or anything that needs only the contract) loads no method; the
``unitta.methods`` entry points of installed packages are imported right after them. Methods outside the
package are plugins (``unitta/plugins.py``, docs/adding_a_method.md).
``unitta/methods/contract.py`` holds the checks every registered method must pass.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import importlib
import logging
import numbers
import re
import sys
import time
import types
import typing
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, get_args, get_origin

import numpy as np
import torch
from torch import Tensor, nn

from unitta.methods.heads import FeatureModel
from unitta.models.info import ModelInfo
from unitta.nn.norms import norm_kind
from unitta.streams.settings import DATASET_ALIASES, canonical_dataset

__all__ = [
    "TTAMethod",
    "MethodCost",
    "register_method",
    "get_method",
    "list_methods",
    "method_class",
    "preset_key",
    "build_config",
    "resolved_config",
    "norm_kind_problem",
    "BUILTIN_MODULES",
    "ENTRY_POINT_GROUP",
    "entry_point_errors",
]

# The modules that register the built-in methods, imported on the first registry access.
BUILTIN_MODULES = (
    "unitta.methods.source",
    "unitta.methods.bn",
    "unitta.methods.tent",
    "unitta.methods.cotta",
    "unitta.methods.rotta",
    "unitta.methods.robust_bn",
    "unitta.methods.note",
    "unitta.methods.lame",
    "unitta.methods.tribe",
    "unitta.methods.roid",
    "unitta.methods.unmixtns",
    "unitta.methods.balanced_bn",
    "unitta.methods.cofa",
    "unitta.methods.bdn",
    "unitta.methods.unitta",
    "unitta.methods.bn_alpha",
    "unitta.methods.eta",
    "unitta.methods.eata",
    "unitta.methods.rdumb",
    "unitta.methods.sar",
    "unitta.methods.deyo",
    "unitta.methods.rpl",
    "unitta.methods.memo",
    "unitta.methods.santa",
    "unitta.methods.cmf",
    "unitta.methods.rmt",
    "unitta.methods.adacontrast",
    "unitta.methods.gtta",
)
_builtins_loaded = False

# Installed packages register their methods here (pyproject.toml: [project.entry-points."unitta.methods"]
# my_method = "my_pkg.my_method"); imported with the built-ins (docs/adding_a_method.md).
ENTRY_POINT_GROUP = "unitta.methods"
_ENTRY_POINT_ERRORS: dict[str, str] = {}

_REGISTRY: dict[str, type[TTAMethod]] = {}

# Dataset name -> the reference config family whose hyper-parameters apply (the reference's
# configs/adapter/<cifar10|cifar100|imagenet>/ directories; docs/methods.md).
# The embedded Fashion-MNIST-C uses CIFAR-10's values (same size: 10 classes, 32x32, 1000 per state).
def preset_key(dataset: str | None) -> str:
    """Map a dataset name to its hyper-parameter family: 'cifar10', 'cifar100' or 'imagenet'
    (``unitta.streams.settings.DATASET_ALIASES``, the one table of dataset families)."""
    if dataset is None:
        return "cifar10"
    try:
        return canonical_dataset(dataset)
    except ValueError:
        raise ValueError(
            f"dataset={dataset!r} has no hyper-parameter preset; known: {sorted(DATASET_ALIASES)}"
        ) from None


@dataclass
class MethodCost:
    """What adapting has cost so far: model forward/backward passes, batches, images, seconds."""

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
    # Hyper-parameters ``python -m unitta.methods check`` runs the method with, to keep the contract check short
    # (e.g. RMT's source warm-up); what the check verifies must not depend on them. Explicit ``--set`` wins.
    check_overrides: ClassVar[dict[str, Any]] = {}
    # False only for a method that never changes the source model's outputs on purpose (``test``): the
    # contract's ``adapts`` check warns when any other method's outputs equal the source model's.
    adapts: ClassVar[bool] = True

    @dataclass(frozen=True)
    class Config:
        pass

    presets: ClassVar[dict[str, dict[str, Any]]] = {}

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
        self.cfg = cfg
        self.info = info
        self.seed = seed
        self.cost = MethodCost()
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
        self._tracked: list[nn.Module] = []
        self._hooks: list[Any] = []
        self.setup()
        self.track(self.model)

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
        start = time.perf_counter()
        out = self.forward(x)
        self.cost.seconds += time.perf_counter() - start
        self.cost.batches += 1
        self.cost.images += x.shape[0]
        return out

    def compile(self, **options: Any) -> None:
        """``torch.compile`` the adapted model in place (``nn.Module.compile``): same parameters and state.

        Off by default (a cell's ``compile: true``); methods whose forward changes Python state per batch
        recompile or fall back to eager at those points, which torch handles by graph breaks.
        """
        self.model.compile(**options)

    # ------------------------------------------------------------------ helpers for subclasses
    def track(self, module: nn.Module) -> None:
        """Count every forward pass through ``module`` in ``self.cost.forwards``."""
        if any(m is module for m in self._tracked):
            return
        self._tracked.append(module)
        self._hooks.append(module.register_forward_hook(self._count_forward))

    def _count_forward(self, module: nn.Module, args: Any, output: Any) -> None:
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

    def num_domains(self) -> int | None:
        """Domains discovered so far (BDN-based methods); None for methods without domains."""
        return None

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


# ---------------------------------------------------------------------- registry
# A method name becomes part of file names (cells/<cell_id>.parquet, logs/<cell_id>.log): one plain word.
_METHOD_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")


def check_method_name(name: Any) -> str:
    """``name`` if it can name a method, else a one-line ValueError (no slashes, no leading dot, no spaces)."""
    if not isinstance(name, str) or not _METHOD_NAME.match(name):
        raise ValueError(
            f"method name {name!r} is not allowed: use one word of letters, digits, '_', '-', '.' or '+', starting "
            "with a letter or digit (it becomes part of result file names)"
        )
    return name


def register_method(name: str):
    """Class decorator: register a TTAMethod subclass under ``name``.

    A name that is not one plain word (``check_method_name``: it becomes part of file names, so
    ``../../evil`` is refused) or is already taken by another class is a ValueError naming the problem.
    """
    check_method_name(name)

    def wrap(cls: type[TTAMethod]) -> type[TTAMethod]:
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            taken = _REGISTRY[name]
            raise ValueError(
                f"method name {name!r} is already taken by {taken.__module__}.{taken.__qualname__}; "
                f"register {cls.__module__}.{cls.__qualname__} under another name"
            )
        if not (dataclasses.is_dataclass(cls.Config) and cls.Config.__dataclass_params__.frozen):
            raise TypeError(f"{cls.__name__}.Config must be a frozen dataclass")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return wrap


def _ensure_loaded() -> None:
    """Import the built-in method modules once (each registers its methods when imported), then the
    ``unitta.methods`` entry points of installed packages (docs/adding_a_method.md)."""
    global _builtins_loaded
    if _builtins_loaded:
        return
    for module in BUILTIN_MODULES:
        importlib.import_module(module)
    _builtins_loaded = True  # before the entry points: one that lists the methods while importing must not recurse
    _load_entry_points()


def _load_entry_points() -> None:
    """Import every entry point of the ``unitta.methods`` group; one that fails is one warning line, not a crash.

    The failure is kept by entry-point name (by convention the method's name), so that a config naming that
    method reports why it is missing (``entry_point_errors``).
    """
    from importlib.metadata import entry_points

    for entry in entry_points(group=ENTRY_POINT_GROUP):
        try:
            entry.load()
        except Exception as exc:  # noqa: BLE001 - a broken installed package must not break list_methods()
            dist = f" (package {entry.dist.name})" if getattr(entry, "dist", None) is not None else ""
            message = " ".join(f"{type(exc).__name__}: {exc}".split())
            _ENTRY_POINT_ERRORS[entry.name] = (
                f"entry point {entry.name} = {entry.value}{dist} failed to import: {message}"
            )
            logging.getLogger(__name__).warning("warning: unitta: %s", _ENTRY_POINT_ERRORS[entry.name])


def entry_point_errors() -> dict[str, str]:
    """Entry points of the ``unitta.methods`` group that failed to import: name -> one-line reason."""
    _ensure_loaded()
    return dict(_ENTRY_POINT_ERRORS)


def list_methods() -> list[str]:
    """Names of all registered methods, sorted."""
    _ensure_loaded()
    return sorted(_REGISTRY)


def method_class(name: str) -> type[TTAMethod]:
    """The registered class for ``name``; unknown names list the registered ones."""
    _ensure_loaded()
    try:
        return _REGISTRY[name]
    except KeyError:
        hint = difflib.get_close_matches(name, _REGISTRY, n=1)
        did_you_mean = f" (did you mean {hint[0]!r}?)" if hint else ""
        raise ValueError(
            f"unknown method {name!r}{did_you_mean}; registered methods: {', '.join(sorted(_REGISTRY))}"
        ) from None


def build_config(
    cls: type[TTAMethod], dataset: str | None = None, profile: str = "default", **overrides: Any
) -> Any:
    """The method's Config: class defaults, the dataset preset, the profile's values, then checked overrides.

    profile: 'default' (each method as its own paper describes it) or 'reference' (the reference
    implementation's code paths, ``unitta.methods.profiles``; docs/methods.md, "Profiles").
    """
    from unitta.methods.profiles import profile_values

    fields = {f.name: f for f in dataclasses.fields(cls.Config)}
    values: dict[str, Any] = dict(cls.presets.get(preset_key(dataset), {}))
    hints = _resolved_hints(cls.Config)
    for key, value in profile_values(cls.name, preset_key(dataset), profile).items():
        values[key] = _check_type(cls.name, key, value, hints[key])  # the profile table is checked like overrides
    for key, value in overrides.items():
        if key not in fields:
            hint = difflib.get_close_matches(key, fields, n=1)
            did_you_mean = f" (did you mean {hint[0]!r}?)" if hint else ""
            allowed = ", ".join(fields) or "none"
            raise ValueError(f"method {cls.name!r} has no hyper-parameter {key!r}{did_you_mean}; allowed: {allowed}")
        values[key] = _check_type(cls.name, key, value, _resolved_hints(cls.Config)[key])
    try:
        return cls.Config(**values)
    except ValueError as exc:  # a range check of Config.__post_init__
        raise ValueError(f"method {cls.name!r}: {exc}") from None


def resolved_config(
    name: str, dataset: str | None = None, profile: str = "default", **overrides: Any
) -> dict[str, Any]:
    """The hyper-parameters method ``name`` runs with on ``dataset`` (defaults, preset, overrides), JSON-ready.

    Part of a result's identity (with ``TTAMethod.version``): tuples become lists so that the dict
    serialises and hashes the same after a JSON round trip.
    """
    return _jsonable(dataclasses.asdict(build_config(method_class(name), dataset, profile, **overrides)))


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _jsonable(item) for key, item in value.items()}
    if isinstance(value, (tuple, list)):
        return [_jsonable(item) for item in value]
    return value


def _resolved_hints(config_cls: type) -> dict[str, Any]:
    module = sys.modules.get(config_cls.__module__)
    return typing.get_type_hints(config_cls, globalns=vars(module) if module else None)


def _check_type(method: str, key: str, value: Any, hint: Any) -> Any:
    """Accept ``value`` for a field annotated ``hint`` (int -> float widening allowed), else raise."""
    origin = get_origin(hint)
    if origin is Literal:
        if value in get_args(hint):
            return value
        raise ValueError(f"method {method!r}: {key}={value!r} is not one of {list(get_args(hint))}")
    if origin in (typing.Union, types.UnionType):
        for option in get_args(hint):
            if option is type(None) and value is None:
                return None
            try:
                return _check_type(method, key, value, option)
            except ValueError:
                continue
        raise ValueError(f"method {method!r}: {key}={value!r} has the wrong type (expected {hint})")
    # numbers.* so that numpy scalars (e.g. from a Ray Tune / Optuna search space) are accepted too
    if hint is float and isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_)):
        return float(value)
    if hint is int and isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_)):
        return int(value)
    if hint is bool and isinstance(value, (bool, np.bool_)):
        return bool(value)
    if hint is str and isinstance(value, str):
        return value
    if origin in (tuple, list) and isinstance(value, (tuple, list)):
        return type(value)(value) if origin is list else tuple(value)
    if hint in (float, int, bool, str):
        raise ValueError(
            f"method {method!r}: {key}={value!r} has type {type(value).__name__}, expected {hint.__name__}"
        )
    return value


def get_method(
    name: str,
    model: nn.Module,
    info: ModelInfo,
    dataset: str | None = None,
    seed: int = 0,
    profile: str = "default",
    source: Any = None,
    **overrides: Any,
) -> TTAMethod:
    """Build method ``name`` around ``model``.

    Hyper-parameters: the method's CIFAR-10 defaults, replaced by the preset of ``dataset``'s
    family (the reference's ``configs/adapter/<dataset>/*.yaml``, docs/methods.md), then by the
    ``profile``'s values ('reference': the reference implementation's code paths), then by ``overrides``
    (names and types checked; ranges by the Config itself).
    source: labelled source images (a ``torch.utils.data.Dataset`` of (image, label)), for the methods
    whose ``needs_source`` is True (``unitta.data.load_source``); ignored by the others.

    >>> method = get_method("unitta", model, info, eta=0.05)
    >>> logits = method(x)
    """
    cls = method_class(name)
    cfg = build_config(cls, dataset, profile, **overrides)
    return cls(model, cfg, info, seed=seed, source=source if cls.needs_source else None)

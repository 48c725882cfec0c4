"""The method registry and per-dataset hyper-parameter presets; re-exports the TTA method contract
(``TTAMethod``, ``MethodCost``: ``unitta/methods/parts/tta_method.py``).

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

The built-in method modules (every module directly in ``unitta/methods/``) are imported on the first
registry access, so importing ``unitta.methods`` (or anything that needs only the contract) loads no method; the
``unitta.methods`` entry points of installed packages are imported right after them. Methods outside the
package are plugins (``unitta/plugins.py``, docs/adding_a_method.md).
``unitta/contract/__init__.py`` holds the checks every registered method must pass.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib
import logging
import math
import numbers
import pkgutil
import re
import sys
import types
import typing
from typing import Any, Literal, get_args, get_origin

import numpy as np
from torch import nn

from unitta.methods.parts.tta_method import TTAMethod
from unitta.models.info import ModelInfo
from unitta.streams.settings import DATASET_ALIASES, canonical_dataset

__all__ = [
    "register_method",
    "get_method",
    "list_methods",
    "method_class",
    "preset_key",
    "build_config",
    "resolved_config",
    "resolved_hints",
    "builtin_modules",
    "methods_of",
    "ENTRY_POINT_GROUP",
    "entry_point_errors",
]

# The built-in methods: every module directly in unitta/methods/ (docs/layout.md), imported on the first
# registry access. pkgutil lists the folder without importing anything.
def builtin_modules() -> tuple[str, ...]:
    """The modules that register the built-in methods: every module directly in ``unitta/methods/``."""
    import unitta.methods

    return tuple(
        f"unitta.methods.{m.name}"
        for m in pkgutil.iter_modules(unitta.methods.__path__)
        if not m.ispkg and not m.name.startswith("_")
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
        taken = _REGISTRY.get(name)
        if taken is not None and taken is not cls and (taken.__module__, taken.__qualname__) != (
                cls.__module__, cls.__qualname__):  # the same class of an edited plugin file, executed again: replaced
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
    for module in builtin_modules():
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


def methods_of(module: str) -> list[str]:
    """Names of the registered methods whose class is defined in ``module`` or one of its submodules."""
    return sorted(
        name for name, cls in _REGISTRY.items() if cls.__module__ == module or cls.__module__.startswith(module + ".")
    )


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


def build_config(cls: type[TTAMethod], dataset: str | None = None, profile: str = "default", **overrides: Any) -> Any:
    """The method's Config: class defaults, the dataset preset, the profile's values, then checked overrides.

    profile: 'default' (each method as its own paper describes it) or 'reference' (the reference
    implementation's code paths, ``unitta.methods.parts.profiles``; docs/methods.md, "Profiles").
    """
    from unitta.methods.parts.profiles import profile_values

    fields = {f.name: f for f in dataclasses.fields(cls.Config)}
    values: dict[str, Any] = dict(cls.presets.get(preset_key(dataset), {}))
    hints = resolved_hints(cls.Config)
    for key, value in profile_values(cls, preset_key(dataset), profile).items():
        values[key] = _check_type(cls.name, key, value, hints[key])  # the profile table is checked like overrides
    for key, value in overrides.items():
        if key not in fields:
            hint = difflib.get_close_matches(key, fields, n=1)
            did_you_mean = f" (did you mean {hint[0]!r}?)" if hint else ""
            allowed = ", ".join(fields) or "none"
            raise ValueError(f"method {cls.name!r} has no hyper-parameter {key!r}{did_you_mean}; allowed: {allowed}")
        values[key] = _check_type(cls.name, key, value, hints[key])
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


@functools.cache  # a Config class is fixed once defined; typing.get_type_hints evaluates every annotation
def resolved_hints(config_cls: type) -> dict[str, Any]:
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
        if not math.isfinite(value):  # no hyper-parameter is infinite; and a row's method_kwargs must be JSON
            raise ValueError(f"method {method!r}: {key}={value!r} is not a finite number")
        return float(value)
    if hint is int and isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_)):
        return int(value)
    if hint is bool and isinstance(value, (bool, np.bool_)):
        return bool(value)
    if hint is str and isinstance(value, str):
        return value
    if origin in (tuple, list) and isinstance(value, (tuple, list)):
        if any(isinstance(v, numbers.Real) and not math.isfinite(v) for v in value):
            raise ValueError(f"method {method!r}: {key}={list(value)!r} is not a list of finite numbers")
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

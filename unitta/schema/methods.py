"""A config's methods checked before any cell: each name against the registry (did-you-mean), each override
against the method's Config, each method against the model's normalisation kind (docs/adding_a_method.md)."""

from __future__ import annotations

from typing import Any

from unitta.schema import ConfigError, hint

__all__ = ["check_methods"]


def check_methods(
    entries: list[tuple[str, str, dict[str, Any]]],
    datasets: list[str],
    profile: str,
    source: str,
    models: dict[str, str | None] | None = None,
) -> None:
    """Each (label, method name, overrides) against the registry and the method's Config, per dataset.

    The Config's own validation (types, ranges) runs here, so a bad hyper-parameter fails the config
    check instead of every cell. ``models`` ({dataset: model name or None for the default}) are checked
    against the zoo, and each method against the model's normalisation kind (``TTAMethod.norm_kinds``;
    the zoo's table, no model is built).
    """
    from unitta.methods import list_methods, resolved_config
    from unitta.methods.parts.registry import entry_point_errors

    registered = list_methods()
    for label, name, overrides in entries:
        if name not in registered and name in entry_point_errors():
            raise ConfigError(f"{source}: {label}: method {name!r} is not available: {entry_point_errors()[name]}")
        if name not in registered:
            raise ConfigError(
                f"{source}: {label}: unknown method {name!r}{hint(name, registered)}; "
                f"registered methods: {', '.join(registered)} (a method of one's own: list its module under "
                "'plugins', docs/adding_a_method.md)"
            )
        for dataset in datasets:
            try:
                resolved_config(name, dataset, profile=profile, **overrides)
            except (ValueError, TypeError) as exc:
                raise ConfigError(f"{source}: {label} ({name}): {exc}".replace("\n", " ")) from None
            problem = _norm_kind_problem(name, dataset, (models or {}).get(dataset), source)
            if problem:
                raise ConfigError(f"{source}: {label}: {dataset}: {problem}")


def _norm_kind_problem(method: str, dataset: str, model: str | None, source: str) -> str | None:
    """Why ``method`` cannot run on the dataset's model (its normalisation kind), or None."""
    from unitta.methods import method_class, norm_kind_problem
    from unitta.models.any_model import any_norm_kind
    from unitta.models.builders import check_builder_exit, is_builder
    from unitta.models.custom import is_custom
    from unitta.models.zoo import known_models, list_models, model_norm_kind, zoo_table

    if is_custom(model):
        try:
            if is_builder(model):  # first in a child process: a builder that ends the process must not end this one
                check_builder_exit(model)
            return norm_kind_problem(method_class(method), any_norm_kind(dataset, model), model)
        except (ValueError, ImportError) as exc:
            raise ConfigError(f"{source}: models: {dataset}: {exc}".replace("\n", " ")) from None
    known = known_models(dataset)
    if model is not None and model not in known:
        raise ConfigError(f"{source}: models: {dataset}: unknown model {model!r}{hint(model, known)}; known: "
                          f"{', '.join(known)}, or torchvision:NAME, timm:NAME, my_models.py:build (docs/own_data.md)")
    if zoo_table(dataset, model) not in list_models():
        return None  # no zoo entry to ask (e.g. a dataset a plugin adds); the cell names the problem
    name = model if model is not None else known[0]
    dataset = zoo_table(dataset, model)
    return norm_kind_problem(method_class(method), model_norm_kind(dataset, name), name)

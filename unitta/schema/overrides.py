"""Command-line overrides of a config file's values: ``key=value`` after the config (docs/results.md, "Configs").

``unitta sweep sweeps/quick.yaml methods=[test,bn] n_per_domain=100 tracking.mlflow.experiment=x``: each override
sets one key of the YAML mapping before it is validated, so the same schema checks it as if it were in the file
(an unknown key, a bad value: one ``ConfigError`` line naming the override, exit 2). A dotted key sets a value
nested in mappings (``resources.num_gpus=1``), creating the mappings it needs; the value is read as YAML
(``[test, bn]`` is a list, ``1e-3`` a float, ``{tent: {lr: 1.0e-4}}`` a mapping, ``x`` a string). The same key
given twice keeps the last, as Hydra does.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from unitta.schema import ConfigError
from unitta.schema.yaml_files import read_yaml_file, yaml_loader

__all__ = ["OVERRIDES_HELP", "apply_overrides", "read_config", "source_with"]

OVERRIDES_HELP = ("overrides of the config's values, checked like the file: key=value, a dotted key for a nested "
                  "value (resources.num_gpus=1, tracking.mlflow.experiment=x), a YAML value (methods=[test,bn], "
                  "settings=[i111], n_per_domain=100, output=results/q2)")


def _parse(text: str) -> tuple[list[str], Any]:
    """``'a.b=[1, 2]'`` -> (['a', 'b'], [1, 2]); a malformed override is a one-line ConfigError."""
    import yaml

    key, sep, raw = text.partition("=")
    parts = key.strip().split(".")
    if not sep or not all(p.strip() for p in parts):
        raise ConfigError(f"override {text!r}: expected key=value (e.g. n_per_domain=100, resources.num_gpus=1)")
    try:
        value = yaml.load(raw, Loader=yaml_loader()) if raw.strip() else None
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"override {text!r}: the value is not valid YAML ({problem}); quote it, "
                          "e.g. key='\"a, b\"'".replace("\n", " ")) from None
    return [p.strip() for p in parts], value


def apply_overrides(data: Any, overrides: Sequence[str]) -> Any:
    """A copy of the parsed config ``data`` with each ``key=value`` of ``overrides`` set (see the module docstring).

    Only the shape is checked here (``key=value``, YAML, a dotted key through mappings); the values are the
    schema's to check.
    """
    if not overrides:
        return data
    if not isinstance(data, dict):
        raise ConfigError(f"overrides need a config that is a mapping of keys, got {type(data).__name__}")
    data = _copy(data)
    for text in overrides:
        parts, value = _parse(text)
        node = data
        for depth, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            elif not isinstance(child, dict):
                where = ".".join(parts[: depth + 1])
                raise ConfigError(f"override {text!r}: {where} is {child!r}, not a mapping of keys; "
                                  f"set it whole ({where}={{...}})")
            node = child
        node[parts[-1]] = value
    return data


def _copy(value: Any) -> Any:
    """A copy of the mappings along the way (the lists and values are replaced whole, never edited)."""
    return {k: _copy(v) for k, v in value.items()} if isinstance(value, dict) else value


def source_with(path: str | Path, overrides: Sequence[str]) -> str:
    """How a config's errors name it: the file, and the overrides when there are any."""
    return f"{path} with {' '.join(overrides)}" if overrides else str(path)


def read_config(path: str | Path, overrides: Sequence[str] = ()) -> Any:
    """The parsed YAML mapping of ``path`` with ``overrides`` applied, not yet validated."""
    return apply_overrides(read_yaml_file(path), list(overrides))

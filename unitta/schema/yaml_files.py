"""Reading a YAML config file: PyYAML's safe loader with YAML 1.2 floats, a key given twice refused with both lines,
aliases that expand past ``MAX_YAML_VALUES`` values refused before they expand, every mistake one ``ConfigError``
line (docs/results.md, "Configs")."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from unitta.schema import ConfigError

__all__ = ["MAX_YAML_VALUES", "read_yaml_file", "yaml_loader"]


def yaml_loader():
    """PyYAML's SafeLoader with YAML 1.2 floats: ``1e-3`` is a float, not the string '1e-3' (YAML 1.1)."""
    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.yaml_implicit_resolvers = {k: list(v) for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()}
    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
        list("-+0123456789"),
    )
    Loader.add_constructor("tag:yaml.org,2002:map", _mapping_without_duplicates)
    return Loader


def _mapping_without_duplicates(loader, node) -> dict:
    """A YAML mapping; a key given twice is an error naming both lines (PyYAML would keep the last silently)."""
    import yaml

    first: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":  # '<<: *anchor' merges are not duplicates
            continue
        key = loader.construct_object(key_node, deep=True)
        if key in first:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} is given twice (first at line {first[key] + 1}); keep one",
                key_node.start_mark,
            )
        first[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=True)


# A config is a few hundred values; aliases (``*name``) that expand to more are a mistake or an "alias bomb"
# (a few lines that expand to billions of values), refused before anything expands them.
MAX_YAML_VALUES = 100_000


def _load_bounded(text: str, loader_class, path: Path) -> Any:
    """The YAML document of ``text``, refused (ConfigError) when its aliases expand to over MAX_YAML_VALUES values."""
    import yaml

    loader = loader_class(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        sizes: dict[int, int] = {}

        def size(n) -> int:  # the expanded size, each shared (aliased) node counted once per use, memoised
            if id(n) not in sizes:
                sizes[id(n)] = 0  # a recursive alias counts once
                if isinstance(n, yaml.MappingNode):
                    children = [c for pair in n.value for c in pair]
                else:
                    children = n.value if isinstance(n, yaml.SequenceNode) else []
                sizes[id(n)] = min(1 + sum(size(c) for c in children), MAX_YAML_VALUES + 1)
            return sizes[id(n)]

        if size(node) > MAX_YAML_VALUES:
            raise ConfigError(f"{path}: its YAML aliases expand to more than {MAX_YAML_VALUES:,} values; "
                              "write the values out")
        return loader.construct_document(node)
    finally:
        loader.dispose()


def read_yaml_file(path: str | Path) -> Any:
    """The parsed content of a YAML config file; a missing file or a YAML error is a one-line ``ConfigError``."""
    import yaml

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such config file")
    try:
        data = _load_bounded(path.read_text(), yaml_loader(), path)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ConfigError(f"{path}: invalid YAML{where}: {problem}".replace("\n", " ")) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the config: {exc}".replace("\n", " ")) from None
    if data is None:
        raise ConfigError(f"{path}: the file is empty")
    return data

"""TTA methods: one module per method, registered by name (see ``base.py`` for the contract).

Every module in this package is imported here, so adding a method is adding one file.
"""

import importlib
import pkgutil

from unitta.methods.base import (
    MethodCost,
    TTAMethod,
    build_config,
    get_method,
    list_methods,
    method_class,
    preset_key,
    register_method,
)

for _module in pkgutil.iter_modules(__path__):
    if _module.name != "base" and not _module.name.startswith("_"):
        importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "MethodCost",
    "TTAMethod",
    "build_config",
    "get_method",
    "list_methods",
    "method_class",
    "preset_key",
    "register_method",
]

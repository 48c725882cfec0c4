"""TTA methods: every module directly in this folder is one registered method (``@register_method``),
and nothing else is; the registry finds them by listing the folder (``unitta/methods/parts/registry.py``).

``parts/`` holds what the methods are made of (the base class ``TTAMethod``, the registry, the profiles,
the shared building blocks), ``norm/`` the normalisation layers. This module is the package's public API
(docs/unitta.md); inside the package every name is imported from its home module.

Importing this package loads only the registry; the built-in method modules are imported on the first
registry access (``list_methods``, ``method_class``, ``get_method``, ``build_config`` by name), so
``import unitta.models`` or ``import unitta.methods`` stays cheap. A new built-in method is one file here.
"""

from unitta.methods.parts.registry import (
    build_config,
    get_method,
    list_methods,
    method_class,
    preset_key,
    register_method,
    resolved_config,
)
from unitta.methods.parts.search_space import check_space, method_space
from unitta.methods.parts.tta_method import MethodCost, TTAMethod, norm_kind_problem
from unitta.search_dimensions import Choice, Dim, IntUniform, LogUniform, Uniform

__all__ = [
    "Choice",
    "Dim",
    "IntUniform",
    "LogUniform",
    "MethodCost",
    "TTAMethod",
    "Uniform",
    "build_config",
    "check_space",
    "get_method",
    "list_methods",
    "method_class",
    "method_space",
    "norm_kind_problem",
    "preset_key",
    "register_method",
    "resolved_config",
]

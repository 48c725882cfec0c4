"""TTA methods: one module per method, registered by name (see ``base.py`` for the contract).

Importing this package loads only the registry; the built-in method modules (``BUILTIN_MODULES`` in
``base.py``) are imported on the first registry access (``list_methods``, ``method_class``,
``get_method``, ``build_config`` by name), so ``import unitta.models`` or ``import unitta.methods``
stays cheap. A new built-in method is one file plus one entry in ``BUILTIN_MODULES``.
"""

from unitta.methods.base import (
    MethodCost,
    TTAMethod,
    build_config,
    get_method,
    list_methods,
    method_class,
    norm_kind_problem,
    preset_key,
    register_method,
    resolved_config,
)
from unitta.methods.space import Choice, Dim, IntUniform, LogUniform, Uniform, check_space, method_space

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

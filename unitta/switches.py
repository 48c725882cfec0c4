"""The environment variables that switch how cells compute, checked once when a command starts.

Each is read where it acts (``unitta.methods.parts.device``, ``unitta.methods.parts.backend``,
``unitta.methods.norm.fast_paths``; docs/benchmarks.md); a value none of them takes would otherwise be found at
import (a traceback) or inside every cell. ``switch_problems()`` says it first, one line per variable, and the
``unitta`` command and the run commands exit with code 2 before anything runs. No imports of the library here:
it must run before the modules that read the variables are imported.
"""

from __future__ import annotations

import os

__all__ = ["SWITCHES", "switch_problems"]

# variable -> (the values it takes, case-insensitive, after stripping blanks; where the docs say what it does)
SWITCHES: dict[str, tuple[tuple[str, ...], str]] = {
    "UNITTA_DEVICE_PATHS": (("", "auto", "cuda"), "docs/benchmarks.md 'Device paths'"),
    "UNITTA_CUDNN_BENCHMARK": (("", "0", "1"), "docs/benchmarks.md 'The GPU measurement'"),
    "UNITTA_FAST_PATHS": (("", "0", "1", "false", "true", "no", "yes", "off", "on"),
                          "docs/benchmarks.md 'Turning the fast paths off'"),
}


def switch_problems(environ: dict[str, str] | None = None) -> list[str]:
    """One line per switch set to a value it does not take (empty: all clear)."""
    environ = os.environ if environ is None else environ
    found = []
    for name, (values, doc) in SWITCHES.items():
        value = environ.get(name)
        if value is not None and value.strip().lower() not in values:
            shown = ", ".join(v for v in values if v)
            found.append(f"{name}={value!r} in the environment is not one of {shown}; set one of them or unset it "
                         f"({doc})")
    return found

"""Importing robustbench (the paper's models and the CIFAR-C download records) with the fixes of docs/models.md."""

from __future__ import annotations

import sys
import warnings

__all__ = ["import_robustbench"]


def import_robustbench():
    """Import robustbench with the fixes of docs/models.md (also needed inside Ray workers).

    robustbench 1.1.1 imports ``autoattack``, which PyPI ships as ``pyautoattack``; alias it first.
    Its ``pkg_resources`` import needs setuptools < 82 (pinned in pyproject.toml).
    """
    if "autoattack" not in sys.modules:
        import pyautoattack
        import pyautoattack.state

        sys.modules["autoattack"] = pyautoattack
        sys.modules["autoattack.state"] = pyautoattack.state
    try:
        with warnings.catch_warnings():
            # robustbench 1.1.1 imports pkg_resources and old timm/torch.jit APIs: noise at every import
            warnings.simplefilter("ignore", (DeprecationWarning, FutureWarning, UserWarning))
            import robustbench
    except ModuleNotFoundError as err:
        if err.name == "pkg_resources":
            raise ImportError(
                "robustbench needs pkg_resources, removed in setuptools 82: pip install 'setuptools>=77.0.3,<82'"
            ) from err
        raise
    return robustbench

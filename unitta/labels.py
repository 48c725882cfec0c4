"""How a method is named in tables: its registry name, plus its hyper-parameter overrides when a cell had any
(``tent{lr=0.0005}``), so that a modified method never shares a row, or a mean, with the unmodified one. Used by
the sweep's summary table (``unitta.run.summary``) and the analysis scripts (``analysis/common.py``)."""

from __future__ import annotations

import json

__all__ = ["method_label"]


def method_label(method: str, method_kwargs: str | None) -> str:
    """'tent', or 'tent{lr=0.0005}' when the cell overrode hyper-parameters (``method_kwargs``: the row's JSON)."""
    if not method_kwargs or method_kwargs in ("{}", "null"):
        return method
    try:
        kwargs = json.loads(method_kwargs)
    except json.JSONDecodeError:
        return f"{method}{{{method_kwargs}}}"
    if not kwargs:
        return method
    return method + "{" + ",".join(f"{k}={v}" for k, v in sorted(kwargs.items())) + "}"

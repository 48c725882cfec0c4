"""A plan's cells resolved together: what their identities need computed once per plan, not once per cell."""

from __future__ import annotations

import json

from unitta.cell import Cell

__all__ = ["share_resolution"]


def share_resolution(cells: list[Cell]) -> list[Cell]:
    """``cells`` with what their identities resolve computed once per plan, not once per cell: the method's
    config and version per (method, dataset, profile, overrides), the weights' digest per (dataset, model,
    checkpoint_dir). Values set on a cell are those it would compute itself (cached properties), so ids are
    unchanged; a later plan resolves afresh (a method or checkpoint changed in between is seen)."""
    methods: dict[tuple, tuple] = {}
    weights: dict[tuple, tuple] = {}
    for cell in cells:
        key = (cell.method, cell.dataset, cell.profile, json.dumps(cell.method_kwargs, sort_keys=True, default=repr))
        if key not in methods:
            methods[key] = (cell.method_config, cell.method_version)
        cell.__dict__["method_config"], cell.__dict__["method_version"] = methods[key]
        where = (cell.dataset, cell.model_name, cell.checkpoint_dir)
        if where not in weights:
            weights[where] = (cell.weights, cell._reference_weights)
        cell.__dict__["weights"], cell.__dict__["_reference_weights"] = weights[where]
    return cells

"""The search's cell template: the ``cell`` of a tune or select config as a ``Cell``, which every trial's cells
change (tune: the stream factors and the BDN layer; select: the method, setting, seed and hyper-parameters)."""

from __future__ import annotations

from typing import Protocol

from unitta.cell import Cell
from unitta.cell.spec import CellSpec
from unitta.schema import Resources

__all__ = ["base_cell"]


class _SearchConfig(Protocol):
    cell: CellSpec
    resources: Resources


def base_cell(cfg: _SearchConfig) -> Cell:
    """The config's ``cell`` as a ``Cell`` (threads pinned to the resources' CPUs unless it says otherwise)."""
    return cfg.cell.cell(num_threads=cfg.cell.num_threads or cfg.resources.num_threads)

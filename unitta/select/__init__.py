"""Hyper-parameter selection without test labels: ``unitta select`` (docs/selection.md).

``run_select`` runs a selection config on the sweep's executor; ``selection_rows`` turns trial rows into
the protocols' choices (default, oracle, holdout, unsupervised); ``SelectConfig`` is the YAML schema.
"""

from unitta.select.choose import SELECTION_COLUMNS, selection_rows, write_selection
from unitta.select.config import SELECTION_PROTOCOLS, SelectConfig, load_select_config, parse_select_config
from unitta.select.run import main, run_select

__all__ = ["SELECTION_PROTOCOLS", "SELECTION_COLUMNS", "SelectConfig", "load_select_config", "parse_select_config",
           "main", "run_select", "selection_rows", "write_selection"]

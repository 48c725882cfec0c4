"""The one executor under ``unitta.sweep`` and ``unitta.tune`` (docs/results.md).

Planners feed it cells (``GridPlanner``: the sweep's grid; ``unitta.tune``'s searches); it runs them
locally or on Ray and writes each as ``cells/<cell_id>.parquet`` under one output lock, with the
manifest, per-cell logs, resume, retries, node-loss lines and a progress bar.
"""

from unitta.run import exits
from unitta.run.executor import GridPlanner, Planner, RunOptions, RunOutcome, execute_plan

__all__ = ["GridPlanner", "Planner", "RunOptions", "RunOutcome", "execute_plan", "exits"]

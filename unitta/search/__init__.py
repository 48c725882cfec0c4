"""Searching hyper-parameters, the one home of ``unitta tune`` and ``unitta select``'s searches (docs/analysis.md,
docs/selection.md).

- ``planner``: a search as a planner of the one executor (``unitta.run``): points -> trials -> cells -> rows ->
  the searcher; a cell whose row is already there is answered from it, never run twice;
- ``searchers``: where points come from: a grid, or Ray Tune's Optuna searcher (TPE, seeded);
- ``replay``: the one resume rule of a seeded searcher: ask again, tell the done trials' recorded outcomes;
- ``distributions``: a search dimension as an Optuna distribution, a point's identity;
- ``config_dimensions``: a dimension as a config spells it (a list of values, ``{low, high, log, num}``), read into
  the one vocabulary of ``unitta.search_dimensions`` (on the lowest layer: the methods declare their spaces with it);
- ``cell_template``: the config's cell every trial's cells change (``base_cell``).

The front ends say what a trial is (``planner.TrialSpace``): tune's trial is one cell per method at a point of
the stream factors and the BDN layer; select's is a method's point on the test and validation streams.
"""

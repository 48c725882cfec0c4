"""Searching hyper-parameters, the one home of ``unitta tune`` and ``unitta select``'s searches (docs/analysis.md,
docs/selection.md).

- ``planner``: a search as a planner of the one executor (``unitta.run``): points -> trials -> cells -> rows ->
  the searcher; a cell whose row is already there is answered from it, never run twice;
- ``searchers``: where points come from: a grid, or Ray Tune's Optuna searcher (TPE, seeded);
- ``replay``: the one resume rule of a seeded searcher: ask again, tell the done trials' recorded outcomes;
- ``space``: a search space's dimensions as Optuna distributions, a point's identity.

The front ends say what a trial is (``planner.TrialSpace``): tune's trial is one cell per method at a point of
the stream factors and the BDN layer; select's is a method's point on the test and validation streams.
"""

"""Experiment trackers fed by sweeps, tunes and selections: MLflow, Weights & Biases, TensorBoard (docs/tracking.md).

Parquet stays the source of truth; a tracker gets a copy. Each finished cell becomes one run (``cell_run``:
coordinates as parameters, ``unitta.*`` tags, every numeric column as a metric, the error curve over steps,
per-domain errors) under its sweep's parent run. The pieces: the common interface (``tracker``), one module per
tracker (``mlflow_tracker``, ``wandb_tracker``, ``tensorboard_tracker``), the local ledger of the file-based ones
(``ledger``), which trackers a run asks for (``destinations``), the executor's background feed (``feed``) and
``unitta track RESULTS_DIR`` (``command``); the folder's record of where its runs are is
``unitta.results.tracking_record``.
"""

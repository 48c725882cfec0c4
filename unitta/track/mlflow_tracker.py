"""MLflow: one run per cell, nested under one parent run per sweep / tune / select (docs/tracking.md).

Talks to any MLflow tracking server (``http://host:port``) or store URI through ``mlflow.MlflowClient``: three
requests per cell (create the run with its tags, one ``log_batch`` with its parameters and every metric, end it),
so a 1,000-cell folder is logged in well under a minute (``bench/track.py``). A cell's run is found again by its
``unitta.cell_id`` tag: only a run that reached FINISHED counts; one left RUNNING by a tracker that went away
mid-cell is deleted and logged again, so a folder logged twice holds each cell once.

The parent run holds the run's config (parameters and the YAML copy as an artifact) and its summary table as
metrics (``unitta.track.sweep_run``), the heatmaps / tables / report as artifacts when analysis runs on the folder
(overwritten by path: attaching twice duplicates nothing), and MLflow's system metrics while the sweep runs
(``tracking: {system_metrics: false}`` turns them off; they need ``psutil``). A running cell's run is created
(RUNNING) at its first live value, ``error_so_far`` logged over images, and finished with the full row.

Requests time out after ``MLFLOW_HTTP_REQUEST_TIMEOUT`` seconds (10 here unless set; ``unitta track``, which
sends many at once, 60 once the server has answered ``open``) and are retried once
(``MLFLOW_HTTP_REQUEST_MAX_RETRIES``), so a server that is down costs seconds, not MLflow's default minutes.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

from unitta.track.cell_run import CELL_ID_TAG, SWEEP_TAG, CellRun
from unitta.track.sweep_run import LiveValue, SweepRun
from unitta.track.tracker import TrackerError, short_reason

__all__ = ["MlflowTracker", "ROLE_TAG"]

ROLE_TAG = "unitta.role"  # 'sweep' on a parent run, 'cell' on a cell's run
_ENV_DEFAULTS = {
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "10",
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true",  # MLflow 3 prints a line per ended run otherwise
    "MLFLOW_DISABLE_TELEMETRY": "true",  # MLflow 3's usage reports: no request to anyone but the tracking server
}
# MLflow's limits per request (mlflow.utils.validation: MAX_METRICS/PARAMS/ENTITIES_PER_BATCH) and per value
_BATCH_ENTITIES = 1000
_BATCH_PARAMS = 100
_PARAM_LENGTH = 6000
_PAGE = 5000
_BAD_KEY = re.compile(r"[^\w\-. /]")  # MLflow keys: alphanumerics, '_', '-', '.', ' ', '/'


def _key(name: str) -> str:
    return _BAD_KEY.sub("_", name)


class MlflowTracker:
    """Cells as MLflow runs in ``experiment`` on ``tracking_uri``."""

    name = "mlflow"

    def __init__(self, tracking_uri: str, experiment: str, system_metrics: bool = True) -> None:
        self.tracking_uri, self.experiment = tracking_uri, experiment
        self.system_metrics = system_metrics
        self.monitor = None  # MLflow's SystemMetricsMonitor on the parent run while the sweep runs
        self.live_runs: dict[str, str] = {}  # cell id -> the RUNNING run its live values went to
        self.client = None
        self.experiment_id: str | None = None
        self.parents: dict[str, str] = {}  # sweep name -> its parent run id
        self.used: set[str] = set()  # the parent runs this tracker logged cells under (ended by ``finish``)
        self.lock = threading.Lock()

    def _call(self, what: str, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # MlflowException, requests' connection errors, ...
            raise TrackerError(f"{self.tracking_uri}: {what}: {short_reason(exc)}") from None

    def connect(self) -> None:
        """The client, the experiment and its parent runs, and nothing else (``open`` also tidies the cell runs; a
        later ``attach`` must not touch the runs of a sweep that may still be running)."""
        for key, value in _ENV_DEFAULTS.items():
            os.environ.setdefault(key, value)
        from mlflow import MlflowClient

        self.client = MlflowClient(tracking_uri=self.tracking_uri)
        found = self._call("experiment", self.client.get_experiment_by_name, self.experiment)
        if found is None:
            self.experiment_id = self._call("create experiment", self.client.create_experiment, self.experiment)
        else:
            self.experiment_id = found.experiment_id
        for run in self._search(f"tags.`{ROLE_TAG}` = 'sweep'"):
            self.parents.setdefault(run.data.tags.get(SWEEP_TAG, ""), run.info.run_id)

    def open(self) -> set[str]:
        self.connect()
        logged: set[str] = set()
        for run in self._search(f"tags.`{ROLE_TAG}` = 'cell'"):
            cell_id = run.data.tags.get(CELL_ID_TAG)
            if run.info.status == "FINISHED" and cell_id not in logged:
                logged.add(cell_id)
            else:  # cut off mid-cell (or a second copy): logged again in full
                self._call("delete an incomplete run", self.client.delete_run, run.info.run_id)
        return logged

    def _search(self, filter_string: str) -> list:
        runs, token = [], None
        while True:
            page = self._call("search runs", self.client.search_runs, [self.experiment_id], filter_string,
                              max_results=_PAGE, page_token=token)
            runs.extend(page)
            token = page.token
            if not token:
                return runs

    def _parent(self, sweep: str) -> str:
        with self.lock:
            if sweep not in self.parents:
                run = self._call("create the parent run", self.client.create_run, self.experiment_id,
                                 tags={ROLE_TAG: "sweep", SWEEP_TAG: sweep}, run_name=sweep)
                self.parents[sweep] = run.info.run_id
            self.used.add(self.parents[sweep])
            return self.parents[sweep]

    def begin(self, sweep: str) -> None:
        """The sweep starts: its parent run now, with system metrics while it runs (a missing ``psutil``: none)."""
        parent = self._parent(sweep)
        if not self.system_metrics or self.monitor is not None:
            return
        try:
            import psutil  # noqa: F401  (MLflow's monitors need it)
        except ImportError:
            return
        from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

        self.monitor = SystemMetricsMonitor(parent, resume_logging=True, tracking_uri=self.tracking_uri)
        self.monitor.start()

    def live(self, value: LiveValue) -> None:
        """A running cell's error so far: its run created RUNNING at the first value (deleted by ``open`` if the
        sweep dies before the cell ends), then ``error_so_far`` at step = images done."""
        from mlflow.entities import Metric

        run_id = self.live_runs.get(value.cell_id)
        if run_id is None:
            tags = {**value.tags, CELL_ID_TAG: value.cell_id, SWEEP_TAG: value.sweep, ROLE_TAG: "cell",
                    "mlflow.parentRunId": self._parent(value.sweep)}
            created = self._call("create a run", self.client.create_run, self.experiment_id, tags=tags,
                                 run_name=value.name)
            run_id = self.live_runs[value.cell_id] = created.info.run_id
        metric = Metric("error_so_far", value.error, int(time.time() * 1000), value.images)
        self._call("log_batch", self.client.log_batch, run_id, metrics=[metric])

    def log(self, run: CellRun) -> None:
        from mlflow.entities import Metric, Param, RunTag

        parent = self._parent(run.sweep)
        tags = {**run.tags, ROLE_TAG: "cell", "mlflow.parentRunId": parent}
        run_id = self.live_runs.pop(run.cell_id, None)
        pending_tags: list = []
        if run_id is None:
            created = self._call("create a run", self.client.create_run, self.experiment_id,
                                 start_time=run.start_ms, tags=tags, run_name=run.name)
            run_id = created.info.run_id
        else:  # the run the live values went to: the full row's tags go with its values
            pending_tags = [RunTag(_key(k), v) for k, v in tags.items()]
        at = run.end_ms or run.start_ms or 0
        metrics = [Metric(_key(k), v, at, 0) for k, v in run.metrics.items()]
        metrics += [Metric(_key(k), v, at, step) for k, steps in run.curves.items() for step, v in steps]
        params = [Param(_key(k), v[:_PARAM_LENGTH]) for k, v in run.params.items()]
        while metrics or params:  # usually one request
            some_params, params = params[:_BATCH_PARAMS], params[_BATCH_PARAMS:]
            room = _BATCH_ENTITIES - len(some_params)
            some_metrics, metrics = metrics[:room], metrics[room:]
            self._call("log_batch", self.client.log_batch, run_id, metrics=some_metrics, params=some_params,
                       tags=pending_tags)
            pending_tags = []
        self._call("end the run", self.client.set_terminated, run_id, "FINISHED", end_time=run.end_ms)

    def log_sweep(self, run: SweepRun) -> None:
        """The parent run's config (parameters, the YAML copy) and summary metrics (``unitta.track.sweep_run``)."""
        from mlflow.entities import Metric, Param

        parent = self._parent(run.sweep)
        at = int(time.time() * 1000)
        params = [Param(_key(k), v[:_PARAM_LENGTH]) for k, v in run.params.items()]
        metrics = [Metric(_key(k), v, at, 0) for k, v in run.metrics.items()]
        old = self._call("read the parent run", self.client.get_run, parent).data.params
        params = [p for p in params if p.key not in old]  # a resumed sweep's parameters are there already
        while params or metrics:
            some_params, params = params[:_BATCH_PARAMS], params[_BATCH_PARAMS:]
            some_metrics, metrics = metrics[:_BATCH_ENTITIES - len(some_params)], metrics[
                _BATCH_ENTITIES - len(some_params):]
            self._call("log_batch", self.client.log_batch, parent, metrics=some_metrics, params=some_params)
        self.attach(run.sweep, run.files)

    def attach(self, sweep: str, files: list[Path], folder: str | None = None) -> None:
        """Files as artifacts of the parent run (under ``folder``); the same path again overwrites."""
        parent = self._parent(sweep)
        for path in files:
            self._call("log an artifact", self.client.log_artifact, parent, str(path), folder)

    def finish(self) -> None:
        if self.monitor is not None:
            with contextlib.suppress(Exception):
                self.monitor.finish()
            self.monitor = None
        for run_id in sorted(self.used):
            self._call("end the parent run", self.client.set_terminated, run_id, "FINISHED")

    def where(self) -> dict[str, Any]:
        info: dict[str, Any] = {"tracking_uri": self.tracking_uri, "experiment": self.experiment,
                                "experiment_id": self.experiment_id, "parent_runs": dict(self.parents)}
        if self.tracking_uri.startswith(("http://", "https://")) and self.experiment_id is not None:
            info["url"] = f"{self.tracking_uri.rstrip('/')}/#/experiments/{self.experiment_id}"
        return info

    def track_command(self, out: Path) -> str:
        return f"unitta track {out} --mlflow {self.tracking_uri} --experiment {self.experiment}"

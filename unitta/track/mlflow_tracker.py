"""MLflow: one run per cell, nested under one parent run per sweep / tune / select (docs/tracking.md).

Talks to any MLflow tracking server (``http://host:port``) or store URI through ``mlflow.MlflowClient``: three
requests per cell (create the run with its tags, one ``log_batch`` with its parameters and every metric, end it),
so a 1,000-cell folder is logged in well under a minute (``bench/track.py``). A cell's run is found again by its
``unitta.cell_id`` tag: only a run that reached FINISHED counts; one left RUNNING by a tracker that went away
mid-cell is deleted and logged again, so a folder logged twice holds each cell once.

Requests time out after ``MLFLOW_HTTP_REQUEST_TIMEOUT`` seconds (10 here unless set; ``unitta track``, which
sends many at once, 60 once the server has answered ``open``) and are retried once
(``MLFLOW_HTTP_REQUEST_MAX_RETRIES``), so a server that is down costs seconds, not MLflow's default minutes.
"""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path
from typing import Any

from unitta.track.cell_run import CELL_ID_TAG, SWEEP_TAG, CellRun
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

    def __init__(self, tracking_uri: str, experiment: str) -> None:
        self.tracking_uri, self.experiment = tracking_uri, experiment
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

    def open(self) -> set[str]:
        for key, value in _ENV_DEFAULTS.items():
            os.environ.setdefault(key, value)
        from mlflow import MlflowClient

        self.client = MlflowClient(tracking_uri=self.tracking_uri)
        found = self._call("experiment", self.client.get_experiment_by_name, self.experiment)
        if found is None:
            self.experiment_id = self._call("create experiment", self.client.create_experiment, self.experiment)
        else:
            self.experiment_id = found.experiment_id
        logged: set[str] = set()
        for run in self._search(f"tags.`{ROLE_TAG}` = 'sweep'"):
            self.parents.setdefault(run.data.tags.get(SWEEP_TAG, ""), run.info.run_id)
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

    def log(self, run: CellRun) -> None:
        from mlflow.entities import Metric, Param

        parent = self._parent(run.sweep)
        tags = {**run.tags, ROLE_TAG: "cell", "mlflow.parentRunId": parent}
        created = self._call("create a run", self.client.create_run, self.experiment_id, start_time=run.start_ms,
                             tags=tags, run_name=run.name)
        run_id = created.info.run_id
        at = run.end_ms or run.start_ms or 0
        metrics = [Metric(_key(k), v, at, 0) for k, v in run.metrics.items()]
        metrics += [Metric(_key(k), v, at, step) for k, steps in run.curves.items() for step, v in steps]
        params = [Param(_key(k), v[:_PARAM_LENGTH]) for k, v in run.params.items()]
        while metrics or params:  # usually one request
            some_params, params = params[:_BATCH_PARAMS], params[_BATCH_PARAMS:]
            room = _BATCH_ENTITIES - len(some_params)
            some_metrics, metrics = metrics[:room], metrics[room:]
            self._call("log_batch", self.client.log_batch, run_id, metrics=some_metrics, params=some_params)
        self._call("end the run", self.client.set_terminated, run_id, "FINISHED", end_time=run.end_ms)

    def finish(self) -> None:
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

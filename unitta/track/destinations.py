"""Which trackers a run logs to: the config's ``tracking:`` section, ``--track`` flags on top (docs/tracking.md).

``--track mlflow=URI`` (experiment: the run's name unless the config names one), ``--track wandb=MODE``
(online / offline / disabled; project ``unitta``), ``--track tensorboard=DIR``; the flag may be repeated. An
unknown tracker name is one warning line and the run goes on; a tracker whose package is missing is a config
error (exit 2 before any cell), like any mistake in the ``tracking:`` section.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from unitta.schema import TRACKER_PACKAGES, Tracking, hint, validate
from unitta.track.mlflow_tracker import MlflowTracker
from unitta.track.tensorboard_tracker import TensorboardTracker
from unitta.track.tracker import Tracker
from unitta.track.wandb_tracker import WandbTracker

__all__ = ["TRACK_FLAG_HELP", "with_flags", "make_trackers"]

TRACK_FLAG_HELP = ("log each finished cell to an experiment tracker too (repeatable): mlflow=TRACKING_URI, "
                   "wandb=online|offline|disabled, tensorboard=DIR; adds to the config's 'tracking:' "
                   "(docs/tracking.md)")
_FLAG_KEY = {"mlflow": "tracking_uri", "wandb": "mode", "tensorboard": "dir"}


def with_flags(tracking: Tracking | None, flags: list[str] | None, warn: Callable[[str], None]) -> Tracking | None:
    """The config's tracking section with the ``--track NAME=VALUE`` flags applied (see the module docstring)."""
    if not flags:
        return tracking
    data = {k: v for k, v in (tracking.model_dump() if tracking else {}).items() if v is not None}
    for flag in flags:
        name, _, value = flag.partition("=")
        if name not in TRACKER_PACKAGES:
            warn(f"--track {flag}: unknown tracker {name!r}{hint(name, TRACKER_PACKAGES)}; known: "
                 f"{', '.join(TRACKER_PACKAGES)} (not tracked; the run goes on)")
            continue
        if not value:
            warn(f"--track {flag}: give {name}={_FLAG_KEY[name].upper()} (not tracked; the run goes on)")
            continue
        data[name] = {**data.get(name, {}), _FLAG_KEY[name]: value}
    return validate(Tracking, data, "--track") if data else None


def make_trackers(tracking: Tracking | None, out: Path, experiment: str) -> list[Tracker]:
    """The trackers of ``tracking`` (none opened yet); ``experiment``: MLflow's experiment unless it names one."""
    if tracking is None:
        return []
    trackers: list[Tracker] = []
    if tracking.mlflow is not None:
        trackers.append(MlflowTracker(tracking.mlflow.tracking_uri, tracking.mlflow.experiment or experiment,
                                      system_metrics=tracking.system_metrics))
    if tracking.wandb is not None:
        spec = tracking.wandb
        trackers.append(WandbTracker(spec.project, spec.mode, Path(spec.dir) if spec.dir else out, spec.entity,
                                     system_metrics=tracking.system_metrics))
    if tracking.tensorboard is not None:
        trackers.append(TensorboardTracker(Path(tracking.tensorboard.dir or out / "tensorboard")))
    return trackers

"""The pieces of the sweep and tune YAML schemas that both share (pydantic): one error type, one way to
report a mistake, one resources section, one name/output rule, one method check; ``yaml_files`` reads a config
file (YAML 1.2 floats, no duplicate keys, no alias bombs); ``methods`` checks a config's methods against the
registry, their Configs and the model's normalisation kind.

Every mistake in a config becomes a ``ConfigError`` whose message is one line,
``'<file>: <key>: <problem>'``; unknown keys get a "did you mean" hint. The CLIs print it and exit
with code 2 before anything is written (docs/results.md, "Configs").
"""

from __future__ import annotations

import difflib
import hashlib
import importlib.util
import json
import re
import types
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, PrivateAttr, ValidationError, field_validator, model_validator

from unitta.schema.errors import one_line

__all__ = [
    "ConfigError",
    "Strict",
    "Resources",
    "RunConfig",
    "Tracking",
    "MlflowTracking",
    "WandbTracking",
    "TensorboardTracking",
    "TRACKER_PACKAGES",
    "WANDB_MODES",
    "check_tracking_uri",
    "hint",
    "one_line",
    "check_distinct",
]


class ConfigError(ValueError):
    """A config mistake; the message is one line: '<file>: <key>: <problem>'."""


def _edits(a: str, b: str) -> int:
    """Optimal string alignment distance: insertions, deletions, substitutions and swaps of neighbours, 1 each."""
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        row = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            row[j] = min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1]))
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                row[j] = min(row[j], prev2[j - 2] + 1)
        prev2, prev = prev, row
    return prev[-1]


def hint(word: Any, choices: Iterable[Any]) -> str:
    """' (did you mean 'x'?)' for the closest of ``choices``, or ''. Candidates are difflib's close matches; the
    fewest edits wins (a swap of two letters is one: 'tnet' -> 'tent', not 'test'), then difflib's order."""
    word = str(word)
    close = difflib.get_close_matches(word, [str(c) for c in choices], n=5, cutoff=0.6)
    if not close:
        return ""
    best = min(close, key=lambda c: _edits(word, c))  # min keeps difflib's order among equals
    return f" (did you mean {best!r}?)"


def check_distinct(values: list) -> list:
    """``values`` if there is at least one and none comes twice, else a one-line ValueError."""
    if not values:
        raise ValueError("needs at least one value")
    twice = next((v for i, v in enumerate(values) if v in values[:i]), None)
    if twice is not None:
        raise ValueError(f"lists {twice!r} twice; give each value once")
    return values


_NUMBERS = (int, float)


def _bool_for_number(annotation: Any, value: Any, where: str) -> str | None:
    """Where (e.g. 'seeds[1]') a YAML boolean stands for a number in ``value``, or None.

    pydantic's lax mode reads ``S: true`` as 1 and ``batch_size: '64'`` as 64; a number key never means a boolean or a
    string, so both are refused.
    """
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if isinstance(value, (bool, str)):  # a quoted number ('64') too: lax mode would read it as 64, silently
        admitted = set(args) if origin in (typing.Union, types.UnionType) else {annotation}
        if isinstance(value, str) and any(typing.get_origin(a) is typing.Literal for a in admitted):
            return None  # a number or a named value ('auto'): pydantic says which it is not
        return where if admitted & set(_NUMBERS) and type(value) not in admitted and Any not in admitted else None
    if origin in (typing.Union, types.UnionType):
        return next((w for a in args if (w := _bool_for_number(a, value, where))), None)
    if origin in (list, tuple) and isinstance(value, (list, tuple)) and args:
        return next((w for i, v in enumerate(value) if (w := _bool_for_number(args[0], v, f"{where}[{i}]"))), None)
    if origin is dict and isinstance(value, dict) and len(args) == 2:
        return next((w for k, v in value.items() if (w := _bool_for_number(args[1], v, f"{where}.{k}"))), None)
    return None


def _value_at(value: Any, where: str, key: str) -> Any:
    """The item of ``value`` that ``where`` (from ``_bool_for_number``) names."""
    for part in re.findall(r"\[(\d+)\]|\.([^.\[]+)", where[len(key):]):
        value = value[int(part[0])] if part[0] else value[part[1]]
    return value


class Strict(BaseModel):
    """Base of every config section: frozen, and unknown keys refused with a 'did you mean' hint."""

    # inf / nan are never a meaningful number in a config (a count, a factor, a cost): refused where given
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _refuse_unknown(cls, data: Any) -> Any:
        if isinstance(data, dict):
            allowed = list(cls.model_fields)
            for key in data:
                if key not in allowed:
                    raise ValueError(f"unknown key {key!r}{hint(key, allowed)}; allowed keys: {', '.join(allowed)}")
            for key, value in data.items():
                where = _bool_for_number(cls.model_fields[key].annotation, value, key)
                if where:
                    got = _value_at(value, where, key)
                    what = "a YAML boolean" if isinstance(got, bool) else "a string: write the number without quotes"
                    raise ValueError(f"{where}: expected a number, got {got!r} ({what})")
        return data


class Resources(Strict):
    """What one cell (or trial) asks Ray for; num_cpus also pins torch's thread count (at least 1)."""

    num_cpus: float = 1.0
    num_gpus: float = 0.0
    # the Ray workers' niceness (0-19: added to the raylet's, 0 = the same priority). Ray's own default is 15, which
    # makes cells crawl on a node where anything else runs; unitta's is 0 (cluster/README.md, "Worker priority")
    niceness: int = 0

    @field_validator("niceness")
    @classmethod
    def _niceness(cls, value: int) -> int:
        if not 0 <= value <= 19:
            raise ValueError(f"must be 0 (full priority) to 19 (lowest), got {value}")
        return value

    @field_validator("num_cpus")
    @classmethod
    def _cpus(cls, value: float) -> float:
        if value <= 0:
            raise ValueError(f"must be > 0, got {value}")
        return value

    @field_validator("num_gpus")
    @classmethod
    def _gpus(cls, value: float) -> float:
        if value < 0:
            raise ValueError(f"must be >= 0, got {value}")
        if value > 1 and value != int(value):
            raise ValueError(f"a fraction of a GPU must be < 1 (or a whole number of GPUs), got {value}")
        return value

    @property
    def num_threads(self) -> int:
        return max(1, int(self.num_cpus))


# ---------------------------------------------------------------------- tracking (docs/tracking.md)
# tracker name -> the package it needs and the extra that installs it
TRACKER_PACKAGES = {"mlflow": "mlflow", "wandb": "wandb", "tensorboard": "tensorboard"}


def _installed(tracker: str) -> None:
    """A config that asks for a tracker whose package is missing is refused before any cell (one line)."""
    package = TRACKER_PACKAGES[tracker]
    if importlib.util.find_spec(package) is None:
        raise ValueError(f"the {package!r} package is not installed: pip install 'unitta[{tracker}]' "
                         f"(or remove tracking.{tracker})")


class _Tracker(Strict):
    """One tracker's settings; the package of ``tracker`` (``TRACKER_PACKAGES``) must be installed for the config
    to load."""

    tracker: ClassVar[str]

    @model_validator(mode="after")
    def _package(self) -> _Tracker:
        _installed(self.tracker)
        return self


# The URI schemes MLflow's tracking stores take (mlflow.tracking._tracking_service.utils: its store registry; a
# database URI may name its driver, 'postgresql+psycopg2://'), and those of the plugins installed as its entry points.
MLFLOW_SCHEMES = ("http", "https", "file", "sqlite", "postgresql", "mysql", "mssql", "databricks", "databricks-uc",
                  "uc")


def _mlflow_schemes() -> tuple[str, ...]:
    from importlib.metadata import entry_points

    return MLFLOW_SCHEMES + tuple(e.name for e in entry_points(group="mlflow.tracking_store"))


def check_tracking_uri(uri: str) -> str:
    """An MLflow tracking URI a store takes: ``http(s)://host[:port]``, ``file:``, a database URI or a local
    folder; an empty one (MLflow would write ``./mlflow.db`` where the command runs, unasked) is refused."""
    from urllib.parse import urlparse

    fix = "give http://host:port, file:/path, sqlite:///file.db or a folder (docs/tracking.md)"
    if not uri.strip():
        raise ValueError(f"{uri!r}: empty (MLflow would write ./mlflow.db where the command runs); {fix}")
    parsed = urlparse(uri)
    scheme = parsed.scheme.split("+")[0]
    if len(scheme) <= 1:  # no scheme: a local folder (a one-letter 'scheme' is a Windows drive)
        return uri
    if scheme not in _mlflow_schemes():
        raise ValueError(f"{uri!r}: MLflow has no tracking store for '{parsed.scheme}:'; {fix}")
    if scheme in ("http", "https") and not parsed.hostname:
        raise ValueError(f"{uri!r}: no host; {fix}")
    return uri


class MlflowTracking(_Tracker):
    """An MLflow tracking server (``http://host:port``) or file store; experiment: the run's name if not given."""

    tracker: ClassVar[str] = "mlflow"
    tracking_uri: str
    experiment: str | None = None

    @field_validator("tracking_uri")
    @classmethod
    def _uri(cls, value: str) -> str:
        return check_tracking_uri(value)


WANDB_MODES = ("online", "offline", "disabled")


class WandbTracking(_Tracker):
    """Weights & Biases: project, entity, mode (online/offline/disabled) and the folder of its files (``<out>`` if
    not given)."""

    tracker: ClassVar[str] = "wandb"
    project: str = "unitta"
    entity: str | None = None
    mode: str = "offline"
    dir: str | None = None

    @field_validator("mode")
    @classmethod
    def _mode(cls, value: str) -> str:
        if value not in WANDB_MODES:
            raise ValueError(f"{value!r} is not one of {', '.join(WANDB_MODES)}{hint(value, WANDB_MODES)}")
        return value


class TensorboardTracking(_Tracker):
    """TensorBoard event files under ``dir`` (``<out>/tensorboard`` if not given)."""

    tracker: ClassVar[str] = "tensorboard"
    dir: str | None = None


class Tracking(Strict):
    """Where finished cells are logged besides Parquet (``unitta.track``; docs/tracking.md)."""

    mlflow: MlflowTracking | None = None
    wandb: WandbTracking | None = None
    tensorboard: TensorboardTracking | None = None
    # MLflow's system metrics on the parent run and W&B's stats on the sweep's run while it runs (docs/tracking.md)
    system_metrics: bool = True


_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*$")
# File systems take 255 bytes per path component; the name is one, with prefixes and suffixes added.
MAX_NAME_LENGTH = 100


class RunConfig(Strict):
    """What every run (sweep or tune) has: a name, where results go, the resources of one cell, its plugins,
    how often a cell lost with its worker or node is run again."""

    config_file_name: ClassVar[str] = "sweep.yaml"  # the validated config, written beside the results

    name: str
    output: str | None = None
    resources: Resources = Resources()
    # modules or files that register methods of one's own, imported on the driver and every Ray worker
    # (unitta/plugins.py, docs/adding_a_method.md)
    plugins: list[str] = []
    max_retries: int = 3
    # experiment trackers fed as cells finish (docs/tracking.md); Parquet stays the source of truth
    tracking: Tracking | None = None
    # the command line's key=value overrides the config was loaded with (unitta.schema.overrides): already in
    # the values; kept to be named in the output's config copy and manifest
    _overrides: tuple[str, ...] = PrivateAttr(default=())

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        # the name becomes a directory under results/: one path component, never '.', '..' or hidden
        if not _NAME.match(value or "") or value in (".", ".."):
            raise ValueError(
                f"must be one word of letters, digits, '_', '-', '.' or '+' (not starting with '.', no slashes "
                f"or spaces), got {value!r}"
            )
        if len(value) > MAX_NAME_LENGTH:  # it names a folder and files (<name>.json, temp files) in it
            raise ValueError(f"must be at most {MAX_NAME_LENGTH} characters (it names folders and files), "
                             f"got {len(value)}")
        return value

    @field_validator("max_retries")
    @classmethod
    def _retries(cls, value: int) -> int:
        if value < 0:
            raise ValueError(f"must be >= 0, got {value}")
        return value

    @property
    def overrides(self) -> tuple[str, ...]:
        """The ``key=value`` overrides of the command line that the values include (none for a file alone)."""
        return self._overrides

    def with_overrides(self, overrides: Iterable[str]) -> RunConfig:
        """This config, noting the command line's ``overrides`` it was loaded with (their values are in it)."""
        self._overrides = tuple(overrides)
        return self

    def output_dir(self) -> Path:
        """Where results go: ``output``, or ``results/<name>``."""
        return Path(self.output) if self.output else Path("results") / self.name

    def config_hash(self) -> str:
        """A 16-hex-digit hash of the whole validated config (output and placement included)."""
        # where the rows are also logged does not change what is computed: configs from before tracking keep their hash
        text = json.dumps(self.model_dump(mode="json", exclude={"tracking"}), sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def validate(model: type[BaseModel], data: Any, source: str) -> Any:
    """``model.model_validate(data)``, any mistake a one-line ``ConfigError`` prefixed with ``source``."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{source}: {one_line(exc)}") from None
    except ValueError as exc:  # raised by a 'before' validator outside pydantic's error wrapping
        raise ConfigError(f"{source}: {exc}".replace("\n", " ")) from None

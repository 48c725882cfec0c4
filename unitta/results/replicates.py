"""Which result rows are the same cell but for the seed: the one grouping every analysis uses.

Two rows are *replicates* (their mean and ± interval are taken over seeds) only when every coordinate of
their cell's identity (``Cell.identity``) but the seed is equal. The coordinates are derived from
``Cell``'s fields, so a field added later is grouped by without anyone remembering (docs/results.md,
"Seeds and replicates"). Where a result folder holds rows that differ in such a coordinate (weights,
protocol, cost, forgetting, profile, precision, method config...), the analysis splits them (one panel
per value) or asks for ``--where KEY=VALUE``; nothing is averaged that should not be.

No torch, no polars at import: the polars helpers import it on use.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterable, Sequence
from typing import Any

from unitta.cell import FIELDS, LATER_FIELDS, PLACEMENT_FIELDS, Cell
from unitta.cell.fields import RESOLVED_COLUMNS

__all__ = ["METHOD_KEYS", "SEED", "S_CELL", "apply_where", "fixed_keys", "method_label", "normalise_rows",
           "replicate_keys", "varying", "where_hint", "with_method_labels"]

SEED = "seed"

# The row's S column holds the cap the official sampler used, which follows the setting by default (ImageNet-C:
# 100, 50 or 10 per setting); the cell's own S (None: that default) is derived from it (``normalise_rows``).
S_CELL = "S_cell"

# Cell fields whose result column has another name (docs/results.md): the table's renamed columns (the
# overrides kept as JSON: factor_overrides), the real-time cost model, written only for the real-time protocol
# (an online cell's cost does not enter its identity either), and S.
_COLUMN_OF = {**{f.name: f.column_name for f in FIELDS if f.column_name}, "cost": "realtime_cost", "S": S_CELL}

# Identity entries that ``Cell.identity`` resolves from the fields (the table's resolved columns but the id and its
# hash): what the method, the model (its weights, a builder's code) and the data really were (an image folder's
# digest: two folders in one output are two datasets, never seeds of one).
_RESOLVED = tuple(name for name, _ in RESOLVED_COLUMNS if name not in ("cell_id", "config_hash"))

# The coordinates that name the method variant (a row of a table), not the experiment around it.
METHOD_KEYS = ("method", "method_kwargs", "method_config", "method_version")


def replicate_keys() -> tuple[str, ...]:
    """The result columns two rows must share to be seeds of one cell: every field of ``Cell`` that enters
    its identity except the seed (placement fields never do), plus the identity's resolved entries."""
    names = [f.name for f in dataclasses.fields(Cell) if f.name != SEED and f.name not in PLACEMENT_FIELDS]
    return tuple(_COLUMN_OF.get(n, n) for n in names) + _RESOLVED


def _defaults() -> dict[str, Any]:
    """Column -> the value a row written before that column existed means (the Cell field's default)."""
    later = {*LATER_FIELDS, "profile", "precision"}  # the fields older folders may lack
    out: dict[str, Any] = {}
    for f in dataclasses.fields(Cell):
        if f.name in later and f.name not in _COLUMN_OF and f.default is not None:
            out[f.name] = f.default
    out["method_kwargs"] = out["factor_overrides"] = "{}"
    return out


def normalise_rows(df):
    """``df`` with every replicate coordinate present and older rows' nulls read as the Cell default (a folder
    written before ``protocol`` existed holds online cells), so that old and new rows of one cell group together.
    List coordinates (corruptions, criteria, an image folder's domains...) compare and print as 'a,b,c'."""
    import polars as pl

    defaults = {k: ",".join(map(str, v)) if isinstance(v, (tuple, list)) else v for k, v in _defaults().items()}
    df = _with_cell_s(df)
    lists = [k for k in replicate_keys() if k in df.columns and isinstance(df.schema[k], pl.List)]
    if lists:
        df = df.with_columns(pl.col(k).cast(pl.List(pl.String)).list.join(",") for k in lists)
    cols = []
    for key in replicate_keys():
        if key not in df.columns:
            value = defaults.get(key)
            cols.append(pl.lit(value, dtype=None if value is not None else pl.String).alias(key))
        elif key in defaults and df.schema[key] != pl.Null and defaults[key] is not None:
            cols.append(pl.col(key).fill_null(pl.lit(defaults[key], dtype=df.schema[key])))
    return df.with_columns(cols) if cols else df


def _with_cell_s(df):
    """``df`` with ``S_cell``: the row's S where it differs from the cap its setting gets by default (the cell
    set S), else null (the cell left S to the setting; ``unitta.evaluate.inputs.build_stream``)."""
    import polars as pl

    from unitta.data.records import RECORDS
    from unitta.streams.settings import default_state_cap

    if "S" not in df.columns:
        return df.with_columns(pl.lit(None, dtype=pl.Int64).alias(S_CELL))
    keys = [k for k in ("dataset", "setting", "n_per_domain", "sampler", "S") if k in df.columns]
    combos = df.select(keys).unique()
    cells = []
    for row in combos.iter_rows(named=True):
        used, default = row["S"], None
        if row.get("sampler", "official") in (None, "official") and row.get("setting") and used is not None:
            try:
                default = default_state_cap(row["setting"], row["dataset"])
            except (KeyError, ValueError):  # a dataset or setting this version does not know: keep S as it is
                default = None
            n, record = row.get("n_per_domain"), RECORDS.get(row["dataset"])
            if default is not None and n is not None and record is not None:
                default = min(default, max(1, n // record.num_classes))
        cells.append({**row, S_CELL: None if used == default else used})
    mapping = pl.DataFrame(cells, schema={**{k: df.schema[k] for k in keys}, S_CELL: pl.Int64})
    out = df.drop(S_CELL) if S_CELL in df.columns else df
    return out.join(mapping, on=keys, how="left", nulls_equal=True, maintain_order="left")


def fixed_keys(df, free: Iterable[str] = ()) -> list[str]:
    """The replicate coordinates of ``df`` that one table/figure holds fixed: all but ``free`` (its axes)."""
    free = set(free)
    return [k for k in replicate_keys() if k in df.columns and k not in free]


def varying(df, keys: Sequence[str]) -> dict[str, list[Any]]:
    """The coordinates among ``keys`` with more than one value in ``df``: key -> its values (sorted, as text)."""
    out = {}
    for key in keys:
        values = df[key].unique().to_list()
        if len(values) > 1:
            out[key] = sorted(values, key=lambda v: (v is None, str(v)))
    return out


def where_hint(spread: dict[str, list[Any]]) -> str:
    """'protocol (online, realtime); choose one with --where protocol=online' for a ``varying`` result."""
    parts = [f"{k} ({', '.join(_text(v) for v in values)})" for k, values in spread.items()]
    key, values = next(iter(spread.items()))
    return f"{'; '.join(parts)}; choose one with --where {key}={_text(values[0])}"


def _text(value: Any) -> str:
    return "null" if value is None else str(value)


def apply_where(df, where: Sequence[str] | None):
    """The rows of ``df`` whose column KEY equals VALUE for every ``KEY=VALUE`` of ``where`` (compared as text;
    'null' matches a missing value). A malformed term, an unknown column or a value no row has is a ValueError
    naming what the rows hold."""
    import polars as pl

    for term in where or ():
        key, sep, value = term.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"--where {term!r}: expected KEY=VALUE, e.g. --where protocol=realtime")
        if key not in df.columns:
            raise ValueError(f"--where {key}: no such result column; replicate coordinates: "
                             f"{', '.join(k for k in replicate_keys() if k in df.columns)}")
        text = pl.col(key).cast(pl.String)
        if df.schema[key] == pl.Boolean:
            text = text.str.to_lowercase()
            value = value.lower()
        cond = pl.col(key).is_null() if value in ("null", "None") else (text == value)
        kept = df.filter(cond)
        if kept.height == 0:
            held = sorted({_text(v) for v in df[key].unique().to_list()})
            raise ValueError(f"--where {key}={value}: no row has it; the rows hold {key} = {', '.join(held)}")
        df = kept
    return df


def method_label(method: str, method_kwargs: str | None) -> str:
    """'tent', or 'tent{lr=0.0005}' when the cell overrode hyper-parameters."""
    if not method_kwargs or method_kwargs in ("{}", "null"):
        return method
    try:
        kwargs = json.loads(method_kwargs)
    except json.JSONDecodeError:
        return f"{method}{{{method_kwargs}}}"
    if not kwargs:
        return method
    return method + "{" + ",".join(f"{k}={v}" for k, v in sorted(kwargs.items())) + "}"


def with_method_labels(df):
    """``df`` with a ``method_label`` column: 'tent{lr=0.0005}', and where one such label ran with several
    method versions or resolved configs (a default changed between runs), each variant its own label
    ('tent{version=2}', 'tent{config=1a2b3c}'), so that no mean or interval mixes them."""
    import polars as pl

    keys = [k for k in METHOD_KEYS if k in df.columns]
    variants = df.select(keys).unique()
    labels: dict[tuple, str] = {}
    by_label: dict[str, list[dict]] = {}
    for v in variants.iter_rows(named=True):
        by_label.setdefault(method_label(v["method"], v.get("method_kwargs")), []).append(v)
    for base, group in by_label.items():
        versions = {v.get("method_version") for v in group}
        for v in group:
            extra = ""
            if len(group) > 1:
                extra = (f"version={v.get('method_version')}" if len(versions) == len(group)
                         else f"config={_short(v.get('method_config'))}")
            labels[tuple(v[k] for k in keys)] = _append(base, extra)
    mapping = pl.DataFrame([{**dict(zip(keys, k)), "method_label": lab} for k, lab in labels.items()],
                           schema={**{k: df.schema[k] for k in keys}, "method_label": pl.String})
    out = df.drop("method_label") if "method_label" in df.columns else df
    return out.join(mapping, on=keys, how="left", nulls_equal=True, maintain_order="left")


def _short(config: Any) -> str:
    return hashlib.sha256(str(config).encode()).hexdigest()[:6]


def _append(label: str, extra: str) -> str:
    if not extra:
        return label
    return label[:-1] + "," + extra + "}" if label.endswith("}") else label + "{" + extra + "}"

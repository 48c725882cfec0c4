"""Stream orders side by side: the UniTTA streams (official / exact sampler) and the other benchmark's correlated
orders (``sorted``, ``dirichlet``; docs/streams.md) of one run in one table and one heatmap.

The per-panel tables of analysis/heatmaps.py split rows by sampler (a sorted stream and an official one are not
the same grid), so without this no figure compares them. Here every group of sweep rows that differs only in its
stream (sampler, delta, S, length) and holds more than one order gets ``orders_<group>.md`` and
``orders_<group>.png``: methods x streams, a stream named ``<setting>:<sampler>`` (``@<delta>`` for dirichlet),
as in the sweep's summary table (``unitta.results.summary.column_label``).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from analysis.common import Panel, sweep_panels
from analysis.tables import cell_status, paper_table, to_markdown
from unitta.results.summary import column_label

__all__ = ["order_groups", "write_orders"]

_STREAM_KEYS = ("sampler", "delta", "S", "length")


def order_groups(rows: pl.DataFrame) -> list[Panel]:
    """The groups of sweep ``rows`` (analysis.common panels merged across their stream keys) that hold more than one
    stream order, as panels whose rows' ``setting`` is the stream's label (``i111:official``,
    ``n1i1:dirichlet@0.01``)."""
    if rows.height == 0 or "sampler" not in rows.columns:
        return []
    panels = sweep_panels(rows)
    keys = [k for k in _STREAM_KEYS if k in rows.columns]
    merged: dict[tuple, list[pl.DataFrame]] = {}
    for panel in panels:
        rest = tuple(panel.rows.drop([*keys, "method_label"], strict=False).select(
            [c for c in ("dataset", "model", "batch_size", "n_per_domain", "severity", "factor_overrides")
             if c in panel.rows.columns]).row(0))
        merged.setdefault(rest, []).append(panel.rows)
    groups = []
    for i, parts in enumerate(merged.values()):
        group = pl.concat(parts, how="diagonal_relaxed")
        orders = group.select(pl.col("sampler").fill_null("official"), *[c for c in ("delta",) if c in keys])
        if orders.unique().height < 2:
            continue
        group = group.with_columns(_stream_label(group).alias("setting"))
        dataset = group["dataset"][0]
        name = dataset if len(merged) == 1 else f"{dataset}_{i + 1}"
        orders = ", ".join(sorted(set(group["setting"].to_list())))
        caption = f"{dataset} ({group['model'][0]}): stream orders compared ({orders}); mean over seeds"
        groups.append(Panel(name, caption, group))
    return groups


def _stream_label(group: pl.DataFrame) -> pl.Expr:
    """``<setting>:<sampler>[@delta]`` for every row, official streams included (the comparison is the point)."""
    mixed = group.with_columns(pl.col("sampler").fill_null("official"))
    if mixed["sampler"].n_unique() == 1:  # one sampler, several deltas: column_label leaves official bare
        return pl.col("setting") + ":" + pl.col("sampler")
    return column_label(group)


def write_orders(rows: pl.DataFrame, out: Path, label: str = "Error (%)") -> list[Path]:
    """``orders_<group>.md`` and ``.png`` for every group of ``order_groups(rows)``; the paths written."""
    from analysis import plots

    written = []
    for group in order_groups(rows):
        table = paper_table(cell_status(group.rows), caption=group.caption, rows=group.rows, label=label)
        md = out / f"orders_{group.name}.md"
        md.write_text(to_markdown(table))
        written.append(md)
        written.append(plots.heatmap(table, out / f"orders_{group.name}.png",
                                     f"{label} per method and stream order — {group.caption}", label))
    return written

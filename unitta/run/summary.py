"""The method x setting table a sweep prints when it ends (mean error over seeds, batch sizes, factors)."""

from __future__ import annotations

from unitta.evaluate import STATUS_FAILED, STATUS_OK
from unitta.labels import method_label

__all__ = ["summary_table", "column_label"]


def summary_table(df, value: str = "error") -> str:
    """Method x setting table of mean ``value`` (over seeds, batch sizes, factors), one block per dataset; a method
    with hyper-parameter overrides is its own row, labelled with them (``unitta.labels.method_label``).

    The sorted / dirichlet orders get their own columns (e.g. ``n1i1:dirichlet@0.1``), as do the samplers of a
    sweep that lists several.
    """
    import polars as pl

    if df.height == 0:
        return "(no results)"
    # a method run with overrides keeps its own row (``tent{lr=0.0005}``), never averaged with the plain one
    kwargs = pl.col("method_kwargs") if "method_kwargs" in df.columns else pl.lit(None, pl.String)
    df = df.with_columns(
        column_label(df),
        pl.struct(pl.col("method"), kwargs.alias("method_kwargs"))
        .map_elements(lambda r: method_label(r["method"], r["method_kwargs"]), return_dtype=pl.String)
        .alias("method"),
    )
    blocks = []
    for (dataset, model), part in df.sort("dataset").group_by(["dataset", "model"], maintain_order=True):
        settings = list(dict.fromkeys(part["column"].to_list()))
        methods = list(dict.fromkeys(part["method"].to_list()))
        ok = part.filter(pl.col("status") == STATUS_OK)
        means = {
            (r["method"], r["column"]): r[value]
            for r in ok.group_by(["method", "column"]).agg(pl.col(value).mean()).iter_rows(named=True)
        }
        failed = {
            (r["method"], r["column"])
            for r in part.filter(pl.col("status") == STATUS_FAILED).select("method", "column").iter_rows(named=True)
        }
        width = max(6, *(len(s) for s in settings))
        mwidth = max(6, *(len(m) for m in methods))
        lines = [f"{dataset} ({model}): {value} (%) per method x setting", ""]
        lines.append(" ".join([f"{'method':<{mwidth}}", *(f"{s:>{width}}" for s in settings), f"{'avg':>{width}}"]))
        for m in methods:
            cells = []
            vals = []
            for s in settings:
                if (m, s) in means:
                    cells.append(f"{means[(m, s)]:>{width}.2f}")
                    vals.append(means[(m, s)])
                elif (m, s) in failed:
                    cells.append(f"{'failed':>{width}}")
                else:
                    cells.append(f"{'-':>{width}}")
            avg = f"{sum(vals) / len(vals):>{width}.2f}" if len(vals) == len(settings) else f"{'-':>{width}}"
            lines.append(" ".join([f"{m:<{mwidth}}", *cells, avg]))
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def column_label(df):
    """The table column of each row: its setting, plus ``:sampler`` (``@delta``) for the sorted / dirichlet orders,
    and for official / exact streams too when the sweep mixes samplers."""
    import polars as pl

    label = pl.col("setting")
    if "sampler" in df.columns:
        sampler = pl.col("sampler").fill_null("official")
        delta = pl.col("delta").cast(pl.String) if "delta" in df.columns else pl.lit(None, pl.String)
        plain = sampler.is_in(["official", "exact"]) if df["sampler"].n_unique() == 1 else pl.lit(False)
        with_delta = sampler + pl.when(delta.is_null()).then(pl.lit("")).otherwise(pl.lit("@") + delta)
        label = label + pl.when(plain).then(pl.lit("")).otherwise(pl.lit(":") + with_delta)
    return label.alias("column")

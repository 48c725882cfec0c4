"""The method x setting table a sweep prints when it ends (mean error over seeds only)."""

from __future__ import annotations

from unitta.results import STATUS_FAILED, STATUS_OK
from unitta.results.replicates import METHOD_KEYS, fixed_keys, normalise_rows, with_method_labels
from unitta.streams.settings import setting_order

__all__ = ["failure_lines", "summary_table", "column_label"]


def summary_table(df, value: str = "error") -> str:
    """Method x setting table of mean ``value`` over seeds, one block per dataset and model, and per value of any
    other coordinate the rows differ in (batch size, factors, protocol...; ``unitta.results.replicates``), named in
    the block's title. Nothing but seeds is averaged.

    The other benchmark's orders get their own columns (e.g. ``n1i1:dirichlet@0.1``, ``i111:gradual``), as do the
    samplers of a sweep that lists several.
    """
    import polars as pl

    if df.height == 0:
        return "(no results)"
    df = with_method_labels(normalise_rows(df)).with_columns(column_label(df))
    others = [k for k in fixed_keys(df, (*METHOD_KEYS, "setting", "sampler", "delta")) if k not in ("dataset", "model")]
    spread = [k for k in others if df[k].cast(pl.String).n_unique() > 1]
    keys = ["dataset", "model", *spread]
    blocks = []
    for key, part in df.sort("dataset").group_by(keys, maintain_order=True):
        dataset, model = key[0], key[1]
        title = f"{dataset} ({model})" + "".join(f", {k}={v}" for k, v in zip(spread, key[2:]))
        part = part.with_columns(pl.col("method_label").alias("method"))
        settings = setting_order(part["column"].to_list())
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
        lines = [f"{title}: {value} (%) per method x setting", ""]
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
    """The table column of each row: its setting, plus ``:sampler`` (``@delta``) for the other benchmark's orders,
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


def failure_lines(failed, logs_dir) -> list[str]:
    """One line per kind of failure (the exception type of ``error_text``) among the ``failed`` rows, with how
    many cells, the first one's message and where the logs are (docs/results.md, "Exit codes")."""
    kinds: dict[str, list[dict]] = {}
    for r in failed.iter_rows(named=True):
        text = (r.get("error_text") or "no error text").strip().splitlines()[-1]
        kinds.setdefault(text.split(":", 1)[0] if ":" in text else text, []).append({**r, "_text": text})
    lines = []
    for rows in sorted(kinds.values(), key=len, reverse=True):
        first = rows[0]
        more = f" and {len(rows) - 1} more in {logs_dir}/" if len(rows) > 1 else ""
        log = f"{logs_dir}/{first['cell_id']}.log"
        lines.append(f"failed: {len(rows)} cell(s) with {first['_text']} (log: {log}{more})")
    return lines

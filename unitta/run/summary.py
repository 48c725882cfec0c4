"""The method x setting table a sweep prints when it ends (mean error over seeds, batch sizes, factors)."""

from __future__ import annotations

from unitta.evaluate import STATUS_FAILED, STATUS_OK

__all__ = ["summary_table"]


def summary_table(df, value: str = "error") -> str:
    """Method x setting table of mean ``value`` (over seeds, batch sizes, factors), one block per dataset."""
    import polars as pl

    if df.height == 0:
        return "(no results)"
    blocks = []
    for (dataset, model), part in df.sort("dataset").group_by(["dataset", "model"], maintain_order=True):
        settings = list(dict.fromkeys(part["setting"].to_list()))
        methods = list(dict.fromkeys(part["method"].to_list()))
        ok = part.filter(pl.col("status") == STATUS_OK)
        means = {
            (r["method"], r["setting"]): r[value]
            for r in ok.group_by(["method", "setting"]).agg(pl.col(value).mean()).iter_rows(named=True)
        }
        failed = {
            (r["method"], r["setting"])
            for r in part.filter(pl.col("status") == STATUS_FAILED).select("method", "setting").iter_rows(named=True)
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

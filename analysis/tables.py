"""Paper-style tables and per-setting rankings from sweep rows (UniTTA paper, Tables 2-4 layout).

Every (method, setting) pair of a panel gets one *cell status*:

* ``ok``: every seed ran; the value is the mean error (%) over seeds;
* ``partial``: some seeds failed; the value is the mean over the seeds that ran (marked ``*``);
* ``failed``: every seed failed (shown as 'failed');
* ``missing``: no row at all although the panel has the setting (shown as '—').

Nothing is dropped: the average column says over how many settings it was taken (``†`` when some
were failed or missing), and the ranking lists the methods it could not rank.

Where a cell ran with several seeds its value is shown as mean ± the half-width of the 95 % t-interval over
the seeds (analysis/stats.py); the average column's interval is taken over the seeds' own averages.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import polars as pl

from analysis.common import SETTING_CAPTION, half_notation, method_order
from analysis.stats import t_interval
from unitta.streams.settings import setting_order

__all__ = ["tex_escape", "cell_status", "PaperTable", "paper_table", "to_markdown", "to_latex", "ranking",
           "ranking_markdown", "per_domain_errors", "per_domain_markdown"]


def cell_status(rows: pl.DataFrame) -> pl.DataFrame:
    """One row per (method_label, setting) of the panel, missing pairs included.

    Columns: method_label, setting, error (mean over the seeds that ran, null if none), ci (half-width of
    the 95 % t-interval over those seeds, null for fewer than 2), n_samples (mean stream length of those
    seeds), n_ok, n_failed, status ('ok' | 'partial' | 'failed' | 'missing'), error_text (a failure's last line).
    """
    last_line = pl.col("error_text").fill_null("").str.strip_chars().str.split("\n").list.last()
    is_ok = pl.col("status") == "ok"
    agg = rows.group_by("method_label", "setting").agg(
        pl.col("error").filter(is_ok).mean().alias("error"),
        pl.col("error").filter(is_ok).alias("_errors"),
        (pl.col("n_samples").filter(is_ok).mean() if "n_samples" in rows.columns else pl.lit(None, pl.Float64))
        .alias("n_samples"),
        (pl.col("status") == "ok").sum().cast(pl.Int64).alias("n_ok"),
        (pl.col("status") != "ok").sum().cast(pl.Int64).alias("n_failed"),
        last_line.filter(pl.col("status") != "ok").first().alias("error_text")
        if "error_text" in rows.columns
        else pl.lit(None, pl.String).alias("error_text"),
    )
    grid = pl.DataFrame(
        [
            (m, s)
            for m in method_order(rows["method_label"].to_list())
            for s in setting_order(rows["setting"].to_list())
        ],
        schema=[("method_label", pl.String), ("setting", pl.String)],
        orient="row",
    )
    out = grid.join(agg, on=["method_label", "setting"], how="left", maintain_order="left")
    status = (
        pl.when(pl.col("n_ok").is_null())
        .then(pl.lit("missing"))
        .when(pl.col("n_ok") == 0)
        .then(pl.lit("failed"))
        .when(pl.col("n_failed") > 0)
        .then(pl.lit("partial"))
        .otherwise(pl.lit("ok"))
    )
    ci = pl.col("_errors").map_elements(lambda xs: t_interval(list(xs))[1], return_dtype=pl.Float64)
    return out.with_columns(
        status.alias("status"), pl.col("n_ok").fill_null(0), pl.col("n_failed").fill_null(0),
        pl.when(pl.col("_errors").list.len() >= 2).then(ci).otherwise(None).alias("ci"),
    ).drop("_errors")


@dataclass(frozen=True)
class PaperTable:
    """The numbers of a paper-style table: methods x settings, plus the average column.

    values[m][s]: error or None; status[m][s]: cell status; avg[m]: mean over the settings with a
    value; avg_n[m]: how many settings that mean covers; best[s]: the lowest error of column s;
    ci[m][s]: half-width of the 95 % t-interval over seeds (None with one seed); avg_ci[m]: the same over
    the seeds' averages (every seed must have every setting of the row).
    """

    methods: list[str]
    settings: list[str]
    values: dict[str, dict[str, float | None]]
    status: dict[str, dict[str, str]]
    avg: dict[str, float | None]
    avg_n: dict[str, int]
    best: dict[str, float | None]
    best_avg: float | None
    caption: str
    ci: dict[str, dict[str, float | None]] = field(default_factory=dict)
    avg_ci: dict[str, float | None] = field(default_factory=dict)
    label: str = "Error (%)"  # what the values are (analysis.common.METRICS)

    @property
    def has_seeds(self) -> bool:
        """Some cell has a seed interval (then every text shows mean ± half-width)."""
        return any(v is not None for row in self.ci.values() for v in row.values())


def paper_table(
    cells: pl.DataFrame, caption: str = "", rows: pl.DataFrame | None = None, label: str = "Error (%)"
) -> PaperTable:
    """Build the table from ``cell_status`` output; ``rows`` (the panel's result rows) gives the average
    column its interval over seeds."""
    methods = method_order(cells["method_label"].to_list())
    settings = setting_order(cells["setting"].to_list())
    values: dict[str, dict[str, float | None]] = {m: {} for m in methods}
    status: dict[str, dict[str, str]] = {m: {} for m in methods}
    ci: dict[str, dict[str, float | None]] = {m: {} for m in methods}
    for r in cells.iter_rows(named=True):
        values[r["method_label"]][r["setting"]] = r["error"]
        status[r["method_label"]][r["setting"]] = r["status"]
        ci[r["method_label"]][r["setting"]] = r.get("ci")
    avg, avg_n = {}, {}
    for m in methods:
        got = [v for v in values[m].values() if v is not None]
        avg[m] = sum(got) / len(got) if got else None
        avg_n[m] = len(got)
    best = {s: _min([values[m].get(s) for m in methods]) for s in settings}
    complete = [avg[m] for m in methods if avg_n[m] == len(settings)]
    avg_ci = {m: _avg_ci(rows, m, [s for s in settings if values[m].get(s) is not None]) for m in methods}
    return PaperTable(methods, settings, values, status, avg, avg_n, best, _min(complete), caption, ci, avg_ci, label)


def _avg_ci(rows: pl.DataFrame | None, method: str, settings: list[str]) -> float | None:
    """95 % t half-width over seeds of the per-seed average over ``settings``; None unless >= 2 seeds have all."""
    if rows is None or not settings or "seed" not in rows.columns:
        return None
    ok = rows.filter((pl.col("method_label") == method) & (pl.col("status") == "ok")
                     & pl.col("setting").is_in(settings))
    per_seed = ok.group_by("seed").agg(pl.col("error").mean(), pl.col("setting").n_unique().alias("n"))
    complete = per_seed.filter(pl.col("n") == len(settings))["error"].to_list()
    return t_interval(complete)[1] if len(complete) >= 2 else None


def _min(xs) -> float | None:
    got = [x for x in xs if x is not None and not math.isnan(x)]
    return min(got) if got else None


def _is_best(v: float | None, best: float | None) -> bool:
    return v is not None and best is not None and round(v, 1) == round(best, 1)


def _cell_text(t: PaperTable, m: str, s: str, bold, star: str = "*") -> str:
    st = t.status[m].get(s, "missing")
    if st == "missing":
        return "—"
    if st == "failed":
        return "failed"
    v = t.values[m][s]
    text = f"{v:.1f}" + _pm(t.ci.get(m, {}).get(s), t.has_seeds) + (star if st == "partial" else "")
    return bold(text) if _is_best(v, t.best[s]) else text


def _pm(halfwidth: float | None, has_seeds: bool) -> str:
    """' ± 1.2' after a value when the table has seed intervals ('± ?' for a single-seed cell among them)."""
    if not has_seeds:
        return ""
    return " ± ?" if halfwidth is None else f" ± {halfwidth:.1f}"


def _avg_text(t: PaperTable, m: str, bold) -> str:
    if t.avg[m] is None:
        return "—"
    text = f"{t.avg[m]:.1f}" + _pm(t.avg_ci.get(m), t.has_seeds)
    if t.avg_n[m] < len(t.settings):
        return text + f"† ({t.avg_n[m]}/{len(t.settings)})"
    return bold(text) if _is_best(t.avg[m], t.best_avg) else text


def _notes(t: PaperTable) -> list[str]:
    notes = [f"{t.label}, lower is better; best per column in bold. " + SETTING_CAPTION]
    flat = [st for m in t.methods for st in t.status[m].values()]
    if "partial" in flat:
        notes.append("(*) some seeds failed: mean over the seeds that ran.")
    if "failed" in flat or "missing" in flat:
        notes.append("failed = every seed of the cell failed; — = no result for the cell; "
                     "† average over the settings with a result (count in brackets), not comparable.")
    if t.has_seeds:
        notes.append("mean ± half-width of the 95 % t-interval over seeds (± ? = one seed only); the average's "
                     "interval is over the seeds' own averages.")
    return notes


def to_markdown(t: PaperTable) -> str:
    """A Markdown table (GitHub style), caption first, notes below."""
    bold = lambda x: f"**{x}**"  # noqa: E731
    lines = [f"**{t.caption}**", ""] if t.caption else []
    lines.append("| method | " + " | ".join(t.settings) + " | Avg |")
    lines.append("|---|" + "---:|" * (len(t.settings) + 1))
    for m in t.methods:
        cells = [_cell_text(t, m, s, bold, star="\\*") for s in t.settings]
        lines.append(f"| {m} | " + " | ".join(cells) + f" | {_avg_text(t, m, bold)} |")
    lines.append("")
    lines += [f"{n}  " for n in _notes(t)]
    return "\n".join(lines) + "\n"


def tex_escape(text: str) -> str:
    """Escape text for LaTeX; the table's own markers become math superscripts."""
    out = []
    for ch in text:
        out.append({
            "\\": r"\textbackslash{}", "_": r"\_", "{": r"\{", "}": r"\}", "%": r"\%", "&": r"\&", "#": r"\#",
            "$": r"\$", "<": r"\textless{}", ">": r"\textgreater{}", "—": "--", "†": r"$^\dagger$", "*": r"$^*$",
            "±": r"$\pm$",
        }.get(ch, ch))
    return "".join(out)


def to_latex(t: PaperTable) -> str:
    """A LaTeX table in the paper's layout: class setting over its domain settings, booktabs rules."""
    # Bold spans are marked with \0 ... \1 and rendered by _tex_cell, so tex_escape cannot mangle \textbf.
    mark_bold = lambda x: "\0" + x + "\1"  # noqa: E731
    # Group consecutive settings by their class half (first two characters).
    groups: list[tuple[str, list[str]]] = []
    for s in t.settings:
        if groups and groups[-1][0] == s[:2]:
            groups[-1][1].append(s)
        else:
            groups.append((s[:2], [s]))
    cols = "l" + "".join("|" + "c" * len(g) for _, g in groups) + "|c"
    head1 = " & ".join(
        [r"\multicolumn{1}{l}{Class}"]
        + [rf"\multicolumn{{{len(g)}}}{{c|}}{{{half_notation(c)}}}" for c, g in groups]
        + [r"\multicolumn{1}{c}{}"]
    )
    head2 = " & ".join(["Domain"] + [half_notation(s[2:]) for _, g in groups for s in g] + ["Avg"])
    lines = [r"\begin{table}[t]", r"\centering", r"\scriptsize", rf"\begin{{tabular}}{{{cols}}}", r"\toprule",
             head1 + r" \\", head2 + r" \\", r"\midrule"]
    for m in t.methods:
        cells = [_tex_cell(_cell_text(t, m, s, mark_bold)) for s in t.settings]
        avg = _tex_cell(_avg_text(t, m, mark_bold))
        lines.append(" & ".join([tex_escape(m)] + cells + [avg]) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    caption = (t.caption + ". " if t.caption else "") + " ".join(_notes(t))
    lines += [rf"\caption{{{tex_escape(caption)}}}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def _tex_cell(text: str) -> str:
    # \0 ... \1 mark the bold span (escaped separately so that \textbf survives _tex)
    if text.startswith("\0"):
        return r"\textbf{" + tex_escape(text[1:-1]) + "}"
    return tex_escape(text)


def ranking(cells: pl.DataFrame) -> pl.DataFrame:
    """Per setting, the methods by increasing error: setting, rank, method_label, error (ranked cells
    only: status ok or partial), plus one row per unranked method with rank null and its status."""
    ranked = (
        cells.filter(pl.col("error").is_not_null())
        .sort(["setting", "error", "method_label"])
        .with_columns(pl.col("error").rank("min").over("setting").cast(pl.Int64).alias("rank"))
    )
    unranked = cells.filter(pl.col("error").is_null()).with_columns(pl.lit(None, pl.Int64).alias("rank"))
    cols = ["setting", "rank", "method_label", "error", "status"]
    out = pl.concat([ranked.select(cols), unranked.select(cols)])
    order = {s: i for i, s in enumerate(setting_order(cells["setting"].to_list()))}
    return out.with_columns(pl.col("setting").replace_strict(order, return_dtype=pl.Int64).alias("_o")).sort(
        ["_o", "rank"], nulls_last=True
    ).drop("_o")


def ranking_markdown(rank: pl.DataFrame, caption: str = "", top: int = 5, label: str = "Error (%)") -> str:
    """'Which method for a stream like yours': per setting the top methods, then the mean rank."""
    lines = [f"**{caption}**", ""] if caption else []
    top = max(1, min(top, rank["method_label"].n_unique()))
    lines.append("| setting | class | domain | " + " | ".join(f"#{i + 1}" for i in range(top)) + " | not ranked |")
    lines.append("|---|---|---|" + "---|" * (top + 1))
    for setting in rank["setting"].unique(maintain_order=True).to_list():
        sub = rank.filter(pl.col("setting") == setting)
        ok = sub.filter(pl.col("rank").is_not_null())
        picks = [f"{r['method_label']} ({r['error']:.1f})" for r in ok.head(top).iter_rows(named=True)]
        picks += [""] * (top - len(picks))
        unranked = sub.filter(pl.col("rank").is_null())
        bad = [f"{r['method_label']} ({r['status']})" for r in unranked.iter_rows(named=True)]
        lines.append(
            f"| {setting} | {half_notation(setting[:2])} | {half_notation(setting[2:])} | "
            + " | ".join(picks) + f" | {', '.join(bad) or '—'} |"
        )
    mean_rank = (
        rank.filter(pl.col("rank").is_not_null())
        .group_by("method_label")
        .agg(pl.col("rank").mean().alias("mean_rank"), pl.len().alias("n_settings"))
        .sort(["mean_rank", "method_label"])
    )
    n_settings = rank["setting"].n_unique()
    lines += ["", "| method | mean rank | settings ranked |", "|---|---:|---:|"]
    for r in mean_rank.iter_rows(named=True):
        lines.append(f"| {r['method_label']} | {r['mean_rank']:.2f} | {r['n_settings']}/{n_settings} |")
    lines += ["", f"{label} in brackets; rank 1 = lowest. " + SETTING_CAPTION]
    return "\n".join(lines) + "\n"


def per_domain_errors(rows: pl.DataFrame) -> pl.DataFrame:
    """Error (%) per method and domain (a corruption, or a folder's domain): over every ok row of the panel (all
    settings and seeds), the images of that domain counted together, i.e. the mean of the rows' ``per_domain``
    errors weighted by their image counts ``n``. Columns: method_label, domain, error, n; in table order."""
    ok = rows.filter((pl.col("status") == "ok") & pl.col("per_domain").is_not_null())
    if ok.height == 0:
        return pl.DataFrame(schema={"method_label": pl.String, "domain": pl.String, "error": pl.Float64,
                                    "n": pl.Int64})
    long = ok.select("method_label", "per_domain").explode("per_domain").unnest("per_domain")
    table = long.group_by("method_label", pl.col("name").alias("domain"), "key").agg(
        ((pl.col("error") * pl.col("n")).sum() / pl.col("n").sum()).alias("error"), pl.col("n").sum())
    order = {m: i for i, m in enumerate(method_order(table["method_label"].to_list()))}
    return table.with_columns(pl.col("method_label").replace_strict(order, return_dtype=pl.Int64).alias("_rank")) \
        .sort("_rank", "key").drop("_rank", "key")


def per_domain_markdown(table: pl.DataFrame, caption: str = "") -> str:
    """Markdown: methods x domains (in the stream's domain order), error (%), the best per domain in bold."""
    domains = table["domain"].unique(maintain_order=True).to_list()
    best = {d: table.filter(pl.col("domain") == d)["error"].min() for d in domains}
    lines = ([f"Error (%) per domain — {caption}", ""] if caption else []) + [
        "| method | " + " | ".join(domains) + " |", "|---|" + "---:|" * len(domains)]
    for method in table["method_label"].unique(maintain_order=True).to_list():
        values = dict(table.filter(pl.col("method_label") == method).select("domain", "error").iter_rows())
        cells = ["–" if values.get(d) is None else (f"**{values[d]:.2f}**" if values[d] == best[d]
                                                     else f"{values[d]:.2f}") for d in domains]
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"

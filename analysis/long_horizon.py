"""Long-horizon readings of a sweep (docs/long_horizon.md): per stream, every method's error curve against the
source model's (the TEST cell of the same stream), its collapse point and its error per round.

Example::

    python -m unitta.sweep sweeps/long_horizon.yaml
    python analysis/long_horizon.py results/long_horizon            # -> results/long_horizon/long_horizon/

A *stream* is the rows that share every replicate coordinate (``unitta.results.replicates``: dataset and an image
folder's digest, model and weights, sampler, setting, factors, length / S, rounds, the ccc settings, batch size,
subset, severity, curve points...) and the seed, but how the method ran: the method and its hyper-parameters, the
reset, the protocol and forgetting, which are its rows (labelled apart: ``tent [realtime]``, ``tent [forgetting]``).
The source row is the stream's online TEST cell without resets.
The collapse point (RDumb, Press et al. NeurIPS'23, fig. 1: methods that end below the non-adapting model) is
the first batch after which the method's error stays above the source model's in every later part of the
curve (``error_curve``: ``curve_points`` equal parts of the stream; its resolution is that of the curve). No
collapse: the method's last part is not above the source's.

Writes ``long_horizon.md`` (one table per stream: error, source error, collapse batch, round errors, resets)
and per stream ``curves_<n>.png/.pdf`` and, with rounds, ``rounds_<n>.png/.pdf``.
"""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import polars as pl
from matplotlib.lines import Line2D

from analysis.common import AnalysisError, add_sweep_argument, load_dirs, method_order, run_analysis
from unitta.results.replicates import METHOD_KEYS, fixed_keys, normalise_rows, with_method_labels

__all__ = ["METHOD_AXES", "collapse_point", "stream_keys", "stream_tables", "summary_table", "analyse", "main"]

# The coordinates that tell one stream's rows apart (how the method ran on it); every other one fixes the stream.
METHOD_AXES = (*METHOD_KEYS, "reset", "protocol", "realtime_cost", "forgetting")


def stream_keys(df: pl.DataFrame) -> list[str]:
    """The columns whose values make one stream: the replicate coordinates but ``METHOD_AXES``, and the seed."""
    return [*fixed_keys(df, METHOD_AXES), "seed"]


def collapse_point(curve: list[float], source: list[float]) -> int | None:
    """Index of the first part from which ``curve`` stays above ``source`` to the end; None if it ends below."""
    first = None
    for k in range(len(curve) - 1, -1, -1):
        if curve[k] is None or source[k] is None or curve[k] <= source[k]:
            break
        first = k
    return first


def _label(row: dict) -> str:
    """'tent', 'tent{lr=0.0005} [reset each_shift]', 'tent [realtime]', 'tent [forgetting]'."""
    reset = row.get("reset") or "none"
    notes = ([f"reset {reset}"] if reset != "none" else []) + (
        [row["protocol"]] if (row.get("protocol") or "online") != "online" else []) + (
        ["forgetting"] if row.get("forgetting") else [])
    return row["method_label"] + "".join(f" [{note}]" for note in notes)


def _is_source(row: dict) -> bool:
    return (row["method"] == "test" and (row.get("reset") or "none") == "none"
            and (row.get("protocol") or "online") == "online")


def _ccc_text(ccc: str | None) -> str:
    """' at 60 % source error, transitions of 1,500 images' from the row's ccc JSON ('' without)."""
    if not ccc:
        return ""
    spec = json.loads(ccc)
    parts = [f"at {spec['target_error']:g} % source error"] if "target_error" in spec else []
    parts += [f"transitions of {int(spec['transition']):,} images"] if "transition" in spec else []
    parts += [f"{k} {v}" for k, v in sorted(spec.items()) if k not in ("target_error", "transition")]
    return " " + ", ".join(parts)


def _stream_name(row: dict) -> str:
    ccc = _ccc_text(row.get("ccc"))
    size = f"length {row['length']}" if row.get("length") else f"S {row.get('S')}"
    data = f" (data {row['data_digest'][:12]})" if row.get("data_digest") else ""  # which image folder
    return (f"{row['dataset']}{data} {row['sampler']} {row['setting']}{ccc}, {size} x {row.get('rounds') or 1} rounds, "
            f"batch {row['batch_size']}, seed {row['seed']}")


def stream_tables(df: pl.DataFrame) -> list[tuple[str, dict, list[dict]]]:
    """[(stream name, source row, method rows with 'label', 'collapse_part', 'collapse_batch')] per stream with a
    TEST cell; streams without one are skipped (their curves have nothing to be compared with)."""
    ok = with_method_labels(normalise_rows(df.filter(pl.col("status") == "ok")))
    out = []
    for _, group in ok.group_by(stream_keys(ok), maintain_order=True):
        rows = group.sort(pl.col("forgetting").fill_null(False), maintain_order=True).to_dicts()
        source = next((r for r in rows if _is_source(r)), None)  # without forgetting first: its error is the same
        if source is None:
            continue
        methods = []
        for row in rows:
            if row is source:
                continue
            part = collapse_point(row["error_curve"], source["error_curve"])
            batches = -(-row["n_samples"] // row["batch_size"])
            above = [k for k, (a, b) in enumerate(zip(row["error_curve"], source["error_curve"]))
                     if a is not None and b is not None and a > b]
            row["label"] = _label(row)
            row["collapse_part"] = part
            row["collapse_batch"] = None if part is None else round(part * batches / len(row["error_curve"]))
            row["first_above_batch"] = round(above[0] * batches / len(row["error_curve"])) if above else None
            row["parts_above"] = (len(above), len(row["error_curve"]))
            methods.append(row)
        out.append((_stream_name(source), source, sorted(methods, key=lambda r: r["error"])))
    return out


COLLAPSE_NOTE = ("Against the source model (TEST on the same stream, not adapting): *above the source* counts the "
                 "parts of the error curve where the method is worse; *first above* is the first batch where it is; "
                 "*collapse* is the batch from which it stays above to the end ('-': it ends at or below the "
                 "source). A collapse late in the stream after being above from the start is not a late collapse.")


def _table(source: dict, rows: list[dict]) -> list[str]:
    lines = ["| method | error (%) | vs source | above the source (parts) | first above (batch) | collapse (batch) "
             "| error per round (%) | resets |", "|---|---|---|---|---|---|---|---|"]
    for row in [source, *rows]:
        rounds = ", ".join(f"{e:.1f}" for e in row.get("round_errors") or [row["error"]])
        resets = "" if row.get("resets") is None else str(row["resets"])
        if row is source:
            lines.append(f"| test (source) | {row['error']:.1f} | | | | | {rounds} | {resets} |")
            continue
        above, parts = row["parts_above"]
        first = "-" if row["first_above_batch"] is None else str(row["first_above_batch"])
        collapse = "-" if row["collapse_batch"] is None else str(row["collapse_batch"])
        lines.append(f"| {row['label']} | {row['error']:.1f} | {row['error'] - source['error']:+.1f} | "
                     f"{above} of {parts} | {first} | {collapse} | {rounds} | {resets} |")
    return lines


def _reset_batches(row: dict, n_batches: int) -> list[int]:
    """The batches where a method reset itself on its own schedule (RDumb: every ``reset_every`` adapted batches)."""
    config = json.loads(row["method_config"]) if row.get("method_config") else {}
    every = config.get("reset_every") if row.get("method") == "rdumb" else None
    return list(range(int(every), n_batches, int(every))) if every else []


def _transition_batches(source: dict, n_batches: int) -> list[float]:
    """The batches where CCC's walk starts its next transition (every ``transition`` images, each round)."""
    spec = json.loads(source["ccc"]) if source.get("ccc") else {}
    if "transition" not in spec:
        return []
    step = spec["transition"] / source["batch_size"]
    return [k * step for k in range(1, int(n_batches / step) + 1) if k * step < n_batches]


def _curves(name: str, source: dict, rows: list[dict], path: Path) -> list[Path]:
    """Top: error per part of the stream, the source model dashed; bottom: the method's minus the source's (above
    0: worse than not adapting). Marked, each with a legend entry: round boundaries (grey), CCC's transitions
    (blue, dash-dot), a method's own resets (its colour, short ticks at the bottom), collapse points (its colour,
    dotted)."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(7.5, 6.4), sharex=True, height_ratios=(3, 2))
    n_batches = -(-source["n_samples"] // source["batch_size"])

    def xs(curve):
        return [(k + 0.5) * n_batches / len(curve) for k in range(len(curve))]

    marks: dict[str, Line2D] = {}
    top.plot(xs(source["error_curve"]), source["error_curve"], "k--", lw=2, label="source (TEST)")
    for row in rows:
        (line,) = top.plot(xs(row["error_curve"]), row["error_curve"], lw=1.3, label=row["label"])
        colour = line.get_color()
        gap = [None if a is None or b is None else a - b for a, b in zip(row["error_curve"], source["error_curve"])]
        bottom.plot(xs(gap), gap, lw=1.3, color=colour)
        if row["collapse_batch"] is not None:
            for ax in (top, bottom):
                ax.axvline(row["collapse_batch"], color=colour, ls=":", lw=1)
            marks["collapse"] = Line2D([], [], color="0.3", ls=":", lw=1,
                                       label="collapse: above the source from here on")
        for batch in _reset_batches(row, n_batches):
            bottom.axvline(batch, ymax=0.08, color=colour, lw=2)
            marks["reset"] = Line2D([], [], color="0.3", lw=2, label="the method's own reset (ticks)")
    for ax in (top, bottom):
        for r in range(1, source.get("rounds") or 1):
            ax.axvline(r * n_batches / source["rounds"], color="0.7", lw=0.8)
            marks["round"] = Line2D([], [], color="0.7", lw=0.8, label="round boundary")
        for batch in _transition_batches(source, n_batches):
            ax.axvline(batch, color="tab:blue", ls="-.", lw=0.6, alpha=0.5)
            marks["ccc"] = Line2D([], [], color="tab:blue", ls="-.", lw=0.6, alpha=0.5, label="CCC transition")
    bottom.axhline(0, color="k", lw=1)
    top.set_ylabel("error (%)")
    bottom.set_ylabel("method - source (pts)")
    bottom.set_xlabel("batch")
    top.set_title(textwrap.fill(name, 100), fontsize=8)
    handles, _ = top.get_legend_handles_labels()
    legend = fig.legend(handles=handles + list(marks.values()), fontsize=7, ncol=3, loc="lower center",
                        bbox_to_anchor=(0.5, 0.0))
    fig.tight_layout(rect=(0, 0.035 * (len(legend.get_texts()) + 2) / 3 + 0.02, 1, 1))
    return _save(fig, path)


def _rounds(name: str, source: dict, rows: list[dict], path: Path) -> list[Path]:
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    for row in [source, *rows]:
        errors = row.get("round_errors") or []
        style = {"color": "k", "ls": "--", "lw": 2} if row is source else {"lw": 1.3}
        ax.plot(range(1, len(errors) + 1), errors, marker="o", label=row.get("label", "source (TEST)"), **style)
    ax.set_xlabel("round")
    ax.set_ylabel("error (%)")
    ax.set_xticks(range(1, (source.get("rounds") or 1) + 1))
    ax.set_title(textwrap.fill(name, 80), fontsize=8)
    ax.legend(fontsize=7, ncol=2, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return _save(fig, path)


def _save(fig, path: Path) -> list[Path]:
    paths = [path.with_suffix(".png"), path.with_suffix(".pdf")]
    for p in paths:
        fig.savefig(p, dpi=150)
    plt.close(fig)
    return paths


def analyse(dirs: list[str], out: Path, sweep: str | None = None) -> list[Path]:
    """Write the tables and figures of every stream with a TEST cell under ``out``; returns the files written."""
    df = load_dirs(dirs, sweep)
    if "error_curve" not in df.columns:
        raise AnalysisError(f"{dirs[0]}: the rows have no error_curve column (written before the metrics existed)")
    streams = stream_tables(df)
    if not streams:
        raise AnalysisError(f"{', '.join(dirs)}: no stream has a finished TEST cell (the source model to compare "
                            "with); add 'test' to the sweep's methods")
    out.mkdir(parents=True, exist_ok=True)
    lines, written = ["# Long horizons", "", COLLAPSE_NOTE, ""], []
    for i, (name, source, rows) in enumerate(streams, 1):
        lines += [f"## {i}. {name}", "", *_table(source, rows), ""]
        written += _curves(name, source, rows, out / f"curves_{i}")
        if (source.get("rounds") or 1) > 1:
            written += _rounds(name, source, rows, out / f"rounds_{i}")
    report = out / "long_horizon.md"
    report.write_text("\n".join(lines))
    for stale in sorted({*out.glob("curves_*.*"), *out.glob("rounds_*.*")} - set(written)):
        if stale.suffix in (".png", ".pdf"):  # an earlier run's figure of a stream this run numbers otherwise
            stale.unlink()
    return [report, *written]


def summary_table(streams: list[tuple[str, dict, list[dict]]]) -> str:
    """Markdown: one row per stream, one column per method (the source first), each cell the error per round
    ('a / b / c'; the whole stream's for one round) and the resets where there were any; 'not run' where the
    stream has no such row. The table docs/long_horizon.md shows (bench/docs_tables.py makes it)."""
    def cell(row: dict) -> str:
        rounds = " / ".join(f"{e:.1f}" for e in row.get("round_errors") or [row["error"]])
        return rounds + (f" ({row['resets']} resets)" if row.get("resets") else "")

    labels = method_order([row["label"] for _, _, rows in streams for row in rows])
    lines = ["| stream | source (TEST) | " + " | ".join(labels) + " |", "|---|---|" + "---|" * len(labels)]
    for name, source, rows in streams:
        by_label = {row["label"]: row for row in rows}
        cells = [cell(by_label[label]) if label in by_label else "not run" for label in labels]
        lines.append(f"| {name} | {cell(source)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python analysis/long_horizon.py",
        description="Error curves against the source model, collapse points and errors per round.",
        epilog="example: python analysis/long_horizon.py results/long_horizon",
    )
    parser.add_argument("dirs", nargs="+", metavar="RESULTS_DIR", help="sweep result directories")
    parser.add_argument("--out", type=Path, help="output directory (default: <first RESULTS_DIR>/long_horizon)")
    add_sweep_argument(parser)
    args = parser.parse_args(argv)
    out = args.out or Path(args.dirs[0]) / "long_horizon"

    def body() -> int:
        for path in analyse(args.dirs, out, args.sweep):
            print(path)
        return 0

    return run_analysis(body)


if __name__ == "__main__":
    sys.exit(main())


"""Our results side by side with the other TTA benchmark's published errors (``compare_paper.py --reference
mariodoebler``; the figures: ``unitta.paper.mariodoebler``).

Each cell of ours (a panel's method and setting, mean over seeds) is matched with a published figure by

* protocol: a ULMM stream (official or exact sampler) at ``i111`` = "Continual", at ``i1i1`` = "Mixed domains";
  the ``sorted`` sampler = "Correlated"; the ``dirichlet`` sampler = "Mixed domains, correlated" with the same
  delta (published: 0.01 for ImageNet-C). Other settings have no counterpart and are counted, not listed;
* dataset: cifar10-c / cifar100-c / imagenet-c with CIFAR10-C / CIFAR100-C / ImageNet-C; fmnist-c (no published
  figures) with CIFAR10-C as a *dataset proxy*, or any panel with ``--paper-dataset``;
* architecture: the figure of the same network (robustbench Standard = WRN-28, Hendrycks2020AugMix_ResNeXt =
  ResNext-29, Standard_R50 = ResNet-50) when it is published for that protocol, else the dataset's usual one
  (WRN-28, ResNext-29, ResNet-50), else the first printed (e.g. RN-26 GN for CIFAR-10-C "Correlated"): an
  *architecture proxy*;
* method: the registry name (``unitta.paper.mariodoebler.MARIODOEBLER_METHODS``: Source = test, BN-1 = bn, ...);
  a run with hyper-parameter overrides (``tent{lr=...}``) is matched with the method's published figure.

Its headline is ``spearman_rho[<protocol>]=`` per protocol (one protocol, its reference architectures named);
``spearman_rho_pooled=`` over every matched cell is labelled as what it is, a pool of different protocols and
possibly different reference networks (CIFAR10-C "Correlated" is published for a GroupNorm ResNet-26 only). It
prints the Markdown once and writes ``reference_mariodoebler.md`` / ``.csv`` (one row per our cell of a reference
protocol, unmatched ones with the reason) into ``--out``. Absolute errors agree only where nothing is a proxy and the
stream is the same protocol: the reference's streams are its own orders (seeds 1-5, batch 200 / 64), ours are
the same protocol drawn by this project's samplers (continual and correlated streams run the corruptions in
the UniTTA reference's order, the other benchmark in Hendrycks'); compare the methods' order first.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from pathlib import Path

import polars as pl
from scipy.stats import spearmanr

from analysis.common import AnalysisError, Panel, load_dirs, method_order, split_rows, sweep_panels
from analysis.rank_stats import p_kind_text, spearman_p
from analysis.tables import cell_status
from unitta.paper.mariodoebler import (
    MARIODOEBLER_ARCHITECTURES,
    MARIODOEBLER_DATASETS,
    MARIODOEBLER_PROTOCOLS,
    load_mariodoebler_table,
    protocol_of,
)
from unitta.streams import PROTOCOL_SAMPLERS

__all__ = ["REFERENCE_NAME", "ProtocolRho", "MariodoeblerComparison", "compare_mariodoebler", "not_ulmm",
           "to_markdown", "run"]

REFERENCE_NAME = "mariodoebler"

#: The architecture each dataset is usually reported with (the robustbench models of the reference's cfgs/).
_USUAL_ARCHITECTURE = {"cifar10-c": "WRN-28", "cifar100-c": "ResNext-29", "imagenet-c": "ResNet-50"}
#: Datasets without published figures -> the proxy they are compared with by default.
_PROXY_DATASET = {"fmnist-c": "cifar10-c"}

_COLUMNS = {
    "protocol": pl.String,
    "dataset": pl.String,
    "model": pl.String,
    "sampler": pl.String,
    "delta": pl.Float64,
    "method": pl.String,
    "ours": pl.Float64,
    "n_seeds": pl.Int64,
    "ref_dataset": pl.String,
    "ref_architecture": pl.String,
    "reference": pl.Float64,
    "diff": pl.Float64,
    "proxy": pl.String,
    "note": pl.String,
}


@dataclass
class ProtocolRho:
    """Spearman's rho of one protocol's matched cells (nan for fewer than 3), their count, its two-sided p-value
    and how it was computed (analysis/rank_stats.py), and the reference architectures and proxies it mixes."""

    rho: float
    n: int
    p: float = math.nan
    p_kind: str = "none"
    architectures: tuple[str, ...] = ()
    proxies: tuple[str, ...] = ()


@dataclass
class MariodoeblerComparison:
    """cells: one row per our cell of a reference protocol (columns _COLUMNS); rho_per_protocol: the headline,
    Spearman's rho per protocol; rho / rho_p: pooled over every matched cell, across protocols and reference
    architectures (labelled so); skipped: notes on panels and cells left out."""

    cells: pl.DataFrame
    rho: float
    n_matched: int
    rho_per_protocol: dict[str, ProtocolRho]
    skipped: list[str]
    rho_p: float = math.nan  # two-sided permutation p-value of the pooled rho (analysis/rank_stats.py)
    rho_p_kind: str = "none"


def _rho(a: list[float], b: list[float]) -> float:
    """Spearman's rho of paired lists; nan for fewer than 3 pairs or a constant side (scipy warns there)."""
    if len(a) < 3:
        return math.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(spearmanr(a, b).statistic)


def _first(rows: pl.DataFrame, column: str, default=None):
    return rows[column][0] if column in rows.columns else default


def not_ulmm(panel: Panel) -> str | None:
    """The panel's sampler when it is one of the other benchmark's orders (sorted, dirichlet), else None: such
    streams have a setting code but no counterpart in the UniTTA paper's tables."""
    sampler = _first(panel.rows, "sampler", "official")
    return sampler if sampler in PROTOCOL_SAMPLERS else None


def _architecture(candidates: pl.DataFrame, model: str, target: str) -> str:
    """The published architecture to compare ``model`` with (module docstring, "architecture")."""
    archs = list(dict.fromkeys(candidates["architecture"].to_list()))
    same = [a for a in archs if MARIODOEBLER_ARCHITECTURES.get(a) == model]
    if same:
        return same[0]
    usual = _USUAL_ARCHITECTURE.get(target)
    return usual if usual in archs else archs[0]


def _panel_cells(panel: Panel, target: str, ref: pl.DataFrame) -> tuple[list[dict], int]:
    """(rows of the comparison, number of our cells in settings that are no reference protocol)."""
    rows = panel.rows
    dataset, model = rows["dataset"][0], rows["model"][0]
    sampler, delta = _first(rows, "sampler", "official"), _first(rows, "delta")
    ref_name = {v: k for k, v in MARIODOEBLER_DATASETS.items()}[target]
    out, other = [], 0
    for cell in cell_status(rows).iter_rows(named=True):
        protocol = protocol_of(sampler, cell["setting"], delta)
        if protocol is None:
            other += 1
            continue
        method = cell["method_label"].split("{", 1)[0]
        row = dict(
            protocol=protocol,
            dataset=dataset,
            model=model,
            sampler=sampler,
            delta=delta,
            method=cell["method_label"],
            ours=cell["error"],
            n_seeds=cell["n_ok"],
            ref_dataset=ref_name,
            ref_architecture=None,
            reference=None,
            diff=None,
            proxy="",
            note="",
        )
        candidates = ref.filter((pl.col("dataset_name") == target) & (pl.col("protocol") == protocol))
        if candidates.height == 0:
            out.append({**row, "note": f"no published figure for {protocol} on {ref_name}"})
            continue
        if protocol == "Mixed domains, correlated":
            published = ", ".join(f"{d:g}" for d in sorted(set(candidates["delta"].to_list())))
            candidates = candidates.filter((pl.col("delta") - (delta or math.nan)).abs() < 1e-12)
            if candidates.height == 0:
                out.append({**row, "note": f"published for delta {published} only"})
                continue
        arch = _architecture(candidates, model, target)
        proxies = ["dataset"] if target != dataset else []
        if MARIODOEBLER_ARCHITECTURES.get(arch) != model:
            proxies.append("architecture")
        hit = candidates.filter((pl.col("architecture") == arch) & (pl.col("method_name") == method))["error"]
        row.update(ref_architecture=arch, proxy="+".join(proxies))
        if hit.len() == 0:
            known = method in ref["method_name"].to_list()
            row["note"] = f"no published {method} figure here" if known else "method not in the other benchmark"
        else:
            row["reference"] = float(hit[0])
            row["diff"] = None if cell["error"] is None else cell["error"] - row["reference"]
            if cell["error"] is None:
                row["note"] = f"ours {cell['status']}"
        out.append(row)
    return out, other


def _ordered(cells: pl.DataFrame) -> pl.DataFrame:
    """Rows by protocol (the reference's order), then our panel, then method (analysis.common.method_order)."""
    protocol_rank = {p: i for i, p in enumerate(MARIODOEBLER_PROTOCOLS)}
    method_rank = {m: i for i, m in enumerate(method_order(cells["method"].to_list()))}
    ranks = [
        pl.col("protocol").replace_strict(protocol_rank, return_dtype=pl.Int64).alias("_p"),
        pl.col("method").replace_strict(method_rank, return_dtype=pl.Int64).alias("_m"),
    ]
    keys = ["_p", "dataset", "model", "sampler", "delta", "_m"]
    return cells.with_columns(ranks).sort(keys, nulls_last=True, maintain_order=True).drop("_p", "_m")


def compare_mariodoebler(dirs: list[str | Path], paper_dataset: str | None = None,
                         sweep: str | None = None, where: list[str] | None = None) -> MariodoeblerComparison:
    """Match every sweep panel of ``dirs`` with the other benchmark's figures (module docstring)."""
    if paper_dataset is not None and paper_dataset not in MARIODOEBLER_DATASETS.values():
        raise AnalysisError(
            f"--paper-dataset {paper_dataset!r}: the other benchmark publishes "
            f"{', '.join(MARIODOEBLER_DATASETS.values())}"
        )
    rows, _ = split_rows(load_dirs(dirs, sweep, where))
    panels = sweep_panels(rows)
    if not panels:
        raise AnalysisError("no sweep rows to compare (tune rows are not compared with published figures)")
    ref = load_mariodoebler_table()
    rows, skipped = [], []
    for panel in panels:
        if "protocol" in panel.rows.columns:  # the TTA protocol of a run (unitta.evaluate.realtime): theirs is online
            online = panel.rows.filter(pl.col("protocol").fill_null("online") == "online")
            if online.height < panel.rows.height:
                skipped.append(
                    f"{panel.name}: {panel.rows.height - online.height} row(s) of the realtime protocol "
                    "left out (the other benchmark's figures are online TTA)"
                )
            if online.height == 0:
                continue
            panel = Panel(panel.name, panel.caption, online)
        dataset = panel.rows["dataset"][0]
        published = dataset in MARIODOEBLER_DATASETS.values()
        target = paper_dataset or (dataset if published else _PROXY_DATASET.get(dataset))
        if target is None:
            skipped.append(
                f"{panel.name}: the other benchmark publishes no {dataset} figures; "
                "compare with a proxy: --paper-dataset cifar10-c"
            )
            continue
        found, other = _panel_cells(panel, target, ref)
        rows += found
        if other:
            skipped.append(
                f"{panel.name}: {other} cell(s) in settings that are none of the other benchmark's "
                "protocols (it runs i111, i1i1 and the sorted / dirichlet orders)"
            )
    cells = _ordered(pl.DataFrame(rows, schema=_COLUMNS))
    if cells.height == 0:
        raise AnalysisError(
            "no cell matches a protocol of the other benchmark: run i111 / i1i1 settings or "
            "the sorted / dirichlet samplers (sweeps/fmnist_reference_protocols.yaml); " + " ".join(skipped)
        )
    both = cells.filter(pl.col("diff").is_not_null())
    per_protocol = {}
    for protocol in dict.fromkeys(cells["protocol"].to_list()):  # in the reference's order
        per_protocol[protocol] = _protocol_rho(both.filter(pl.col("protocol") == protocol))
    rho = _rho(both["ours"].to_list(), both["reference"].to_list())
    p_value, p_kind = spearman_p(both["ours"].to_list(), both["reference"].to_list())
    return MariodoeblerComparison(cells, rho, both.height, per_protocol, skipped, p_value, p_kind)


def _protocol_rho(sub: pl.DataFrame) -> ProtocolRho:
    ours, ref = sub["ours"].to_list(), sub["reference"].to_list()
    p, kind = spearman_p(ours, ref)
    return ProtocolRho(_rho(ours, ref), sub.height, p, kind, tuple(dict.fromkeys(sub["ref_architecture"].to_list())),
                       tuple(sorted({x for x in sub["proxy"].to_list() if x})))


def _protocol_line(protocol: str, r: ProtocolRho) -> str:
    """'spearman_rho[Continual]=1.000 (4 cells, ...)': the headline line of one protocol."""
    if not r.n:
        return f"spearman_rho[{protocol}]=nan (no matched cell)"
    detail = f"{r.n} cells, rho_p={_fmt(r.p, 3)} ({p_kind_text(r.p_kind)}), reference {', '.join(r.architectures)}"
    return f"spearman_rho[{protocol}]={r.rho:.3f} ({detail}; proxy: {', '.join(r.proxies) or 'none'})"


def _pooled_line(c: MariodoeblerComparison) -> str:
    archs = sorted({a for r in c.rho_per_protocol.values() for a in r.architectures})
    protocols = [p for p, r in c.rho_per_protocol.items() if r.n]
    return (f"spearman_rho_pooled={c.rho:.3f} (pooled over {c.n_matched} cells of {len(protocols)} protocols and "
            f"reference architectures {', '.join(archs) or 'none'}: different streams and networks in one rank "
            f"correlation, read the per-protocol values first; rho_p={_fmt(c.rho_p, 3)}, "
            f"{p_kind_text(c.rho_p_kind)}, two-sided)")


def _fmt(v, digits: int = 1) -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


def to_markdown(c: MariodoeblerComparison) -> str:
    """The side-by-side table with a summary above it naming every proxy."""
    proxies = sorted({p for p in c.cells["proxy"].to_list() if p})
    lines = [
        "# Ours vs the other benchmark (mariodoebler/test-time-adaptation, classification/benchmark.md)",
        "",
        "Spearman's rho of ours vs the published errors, per protocol:",
        "",
    ]
    lines += [_protocol_line(p, r) + "  " for p, r in c.rho_per_protocol.items()]
    lines += ["", _pooled_line(c) + ".", ""]
    if proxies:
        lines.append(
            "**Proxy comparison** (" + ", ".join(proxies) + "): a dataset proxy compares our dataset with "
            "another dataset's published figures (e.g. Fashion-MNIST-C with CIFAR10-C), an architecture "
            "proxy our model with another network; absolute errors are not expected to agree there, "
            "compare the methods' order.  "
        )
    lines.append(
        "The streams are the same protocols, not the same images: the other benchmark's own orders, seeds "
        "1-5, batch 200 (CIFAR) / 64 (ImageNet), the corruptions in Hendrycks' order where ours follow the "
        "UniTTA reference's (docs/streams.md).  "
    )
    lines += [f"Note: {s}.  " for s in c.skipped]
    lines += [
        "",
        "| protocol | ours: dataset / model / sampler | method | ours | seeds | reference: dataset / "
        "architecture | reference | ours - ref. | proxy | note |",
        "|---|---|---|---:|---:|---|---:|---:|---|---|",
    ]
    for r in c.cells.iter_rows(named=True):
        sampler = r["sampler"] + (f" delta={r['delta']:g}" if r["delta"] is not None else "")
        diff = _fmt(r["diff"])
        diff = "+" + diff if r["diff"] is not None and r["diff"] >= 0 else diff
        proxy = r["proxy"] or ("no" if r["ref_architecture"] else "—")
        lines.append(
            f"| {r['protocol']} | {r['dataset']} / {r['model']} / {sampler} | {r['method']} | "
            f"{_fmt(r['ours'])} | {r['n_seeds'] or 0} | {r['ref_dataset']} / {r['ref_architecture'] or '—'} "
            f"| {_fmt(r['reference'])} | {diff} | {proxy} | {r['note']} |"
        )
    return "\n".join(lines) + "\n"


def run(dirs: list[str | Path], out: Path, paper_dataset: str | None = None, log=print,
        sweep: str | None = None, where: list[str] | None = None) -> MariodoeblerComparison:
    """Compare, write ``reference_mariodoebler.md`` / ``.csv`` into ``out``, print the table and the rho lines."""
    c = compare_mariodoebler(dirs, paper_dataset, sweep, where)
    out.mkdir(parents=True, exist_ok=True)
    md = to_markdown(c)
    (out / f"reference_{REFERENCE_NAME}.md").write_text(md)
    c.cells.write_csv(out / f"reference_{REFERENCE_NAME}.csv")
    log(md.rstrip("\n"))  # every note and rho once: the summary lines are the Markdown's own
    log(str(out / f"reference_{REFERENCE_NAME}.md"))
    return c

"""Which TTA method to deploy for a stream like yours: ``python -m unitta.recommend``.

The recommend package: the recommendation and its command (this module; ``__main__`` runs it) and what
a stream is compared with (``inputs``: a sweep's results, a Tune sweep's factor points, the paper's table).


Examples::

    python -m unitta.recommend --classes labels.npy --domains domains.npy --paper cifar10-c
    python -m unitta.recommend --classes preds.txt --label-error 0.2 --results results/full_grid --json

Estimates the stream's factors (``unitta.streams.estimate_factors``: correlation alpha_1 and imbalance
beta of classes and domains, with intervals, and the nearest setting code), finds the nearest benchmark
cells (a sweep's settings or a Tune sweep's factor points, or the paper's published table), and ranks the
methods by their error there, with a one-line reason. Warnings come first: a ULMM that does not fit the
stream, drift, a nearest benchmark point far away, an estimate near a setting cut-off (then the ranking at
each candidate setting is shown). Intervals say whether they come from seeds or from stream sampling only.
docs/recommend.md explains the distance, the intervals and the checks.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from unitta.recommend.inputs import (
    RANK_METRICS,
    RATE_METRICS,
    SEEDS_BASIS,
    STREAM_BASIS,
    UsageError,
    benchmark_table,
    read_labels,
)
from unitta.streams.estimate import (
    AttributeFactors,
    Factors,
    corr_position,
    estimate_factors,
    imb_position,
    reference_factors,
)
from unitta.streams.fit import drift, transition_fit
from unitta.streams.settings import FACTOR_KEYS, default_factors

__all__ = [
    "FAR_DISTANCE", "Recommendation", "UsageError", "assess", "main", "read_labels", "recommend",
    "threshold_alternatives",
]

_TIE = 1e-9  # points this close to the nearest distance count as equally near
# A nearest benchmark point further than this (in ladder steps: 1 = from one setting character to the next) is
# an extrapolation: half the step between two settings, where the nearest setting code itself changes.
FAR_DISTANCE = 0.5


@dataclass(frozen=True)
class Recommendation:
    """The estimated factors, the nearest benchmark points and the methods ranked by their ``metric`` there."""

    factors: Factors
    points: list[dict[str, Any]]  # the nearest points: setting and the 4 factors
    distance: float
    methods: list[dict[str, Any]]  # best first: method, error (the metric's value), se, interval95, n_points, basis
    source: str
    warnings: tuple[str, ...] = ()  # what limits the recommendation (``assess``), one line each
    alternatives: tuple[tuple[str, Recommendation], ...] = ()  # (why, the ranking there) near a threshold
    metric: str = "error"  # the result column ranked by (lower is better; RANK_METRICS)

    def runner_up(self) -> dict[str, Any] | None:
        """How far the second method is behind the first: gap (points), its standard error and z = gap / se."""
        if len(self.methods) < 2:
            return None
        a, b = self.methods[0], self.methods[1]
        gap = b["error"] - a["error"]
        se = math.sqrt(a["se"] ** 2 + b["se"] ** 2) if math.isfinite(a["se"]) and math.isfinite(b["se"]) else math.nan
        z = gap / se if se and math.isfinite(se) else math.nan
        basis = SEEDS_BASIS if a.get("basis") == b.get("basis") == SEEDS_BASIS else STREAM_BASIS
        return {"method": b["method"], "gap": gap, "gap_se": _none(se), "z": _none(z),
                "within_noise": bool(math.isfinite(z) and z < 2.0), "basis": basis}

    def to_json(self) -> dict[str, Any]:
        return {
            "factors": self.factors.as_dict(),
            "setting": self.factors.setting,
            "metric": self.metric,
            "methods": [{k: _none(v) if isinstance(v, float) else v for k, v in m.items()} for m in self.methods],
            "factor_details": _nan_to_none(self.factors.summary()),
            "nearest": {"points": self.points, "distance": self.distance},
            "runner_up": self.runner_up(),
            "source": self.source,
            "reason": self.reason(),
            "warnings": list(self.warnings),
            "alternatives": [{"why": why, "setting": alt.factors.setting, "reason": alt.reason(),
                              "methods": [m["method"] for m in alt.methods]} for why, alt in self.alternatives],
        }

    def reason(self) -> str:
        """One line: why the first method is recommended, and how sure that is."""
        if not self.methods:
            return "no method has results at the nearest benchmark point"
        best = self.methods[0]
        pts = ", ".join(p["setting"] for p in self.points)
        value = f"{best['error']:.2f} %" if self.metric in RATE_METRICS else f"{best['error']:.4g}"
        text = (f"{best['method']} has the lowest mean {self.metric} ({value}) at the nearest benchmark "
                f"point{'s' if len(self.points) > 1 else ''} {pts} (distance {self.distance:.2f})")
        ru = self.runner_up()
        if ru is None:
            return text + "; no other method to compare with"
        z = f"z = {ru['z']:.1f}" if ru["z"] is not None else "no interval"
        verdict = "within noise" if ru["within_noise"] else "a clear gap"
        return text + f"; {ru['method']} is {self.gap_text(ru['gap'])} behind ({z} from {ru['basis']}: {verdict})"

    def gap_text(self, gap: float) -> str:
        """A difference in the ranked metric: percentage points for the error rates, the plain value otherwise."""
        return f"{gap:+.2f} points" if self.metric in RATE_METRICS else f"{gap:+.4g}"


def _none(x: float) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None


def _nan_to_none(obj: Any) -> Any:
    if isinstance(obj, float):
        return _none(obj)
    if isinstance(obj, dict):
        return {k: _nan_to_none(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_nan_to_none(v) for v in obj]
    return obj


def _coordinates(f: dict[str, float | None], factors: Factors) -> list[float]:
    """The point's position on the ladders of ``corr_position`` / ``imb_position`` (only the estimated attributes)."""
    out = [corr_position(float(f["class_alpha"]), "class", factors.classes.n_states),
           imb_position(float(f["class_beta"]), "class")]
    if factors.domains is not None:
        out += [corr_position(float(f["domain_alpha"]), "domain", factors.domains.n_states),
                imb_position(float(f["domain_beta"]), "domain")]
    return out


def recommend(factors: Factors, table: Any, source: str = "", *, top: int | None = None,
              metric: str = "error") -> Recommendation:
    """Rank the methods of ``table`` (``benchmark_table``) by their mean error at the points nearest ``factors``.

    ``metric`` names what the table's ``error`` column holds (``benchmark_table(metric=...)``), for the report.

    Distance: Euclidean over the estimated attributes' positions on the correlation ladder (i = 0, n = 1,
    continual = 2; log mean run length between them) and the imbalance ladder (log beta / log beta_u).
    Without domains only the class coordinates count, so every domain setting at the nearest class point is
    equally near and the ranking averages over them. Methods are ranked on the points every one of them has
    (all methods if none has them all).
    """
    if table.height == 0:
        raise UsageError("no benchmark points to compare with")
    est = _coordinates(factors.as_dict(), factors)
    points: dict[tuple, float] = {}
    for r in table.select(["setting", *FACTOR_KEYS]).unique().iter_rows(named=True):
        coords = _coordinates(r, factors)
        points[(r["setting"], *(r[k] for k in FACTOR_KEYS))] = math.dist(coords, est)
    d_min = min(points.values())
    nearest = sorted(p for p, d in points.items() if d <= d_min + _TIE)
    by_method: dict[str, dict[tuple, tuple[float, float]]] = {}
    for r in table.iter_rows(named=True):
        key = (r["setting"], *(r[k] for k in FACTOR_KEYS))
        if key in nearest:
            by_method.setdefault(r["method"], {})[key] = (r["error"], r["se"], r.get("basis", STREAM_BASIS))
    complete = {m: v for m, v in by_method.items() if len(v) == len(nearest)} or by_method
    methods = []
    for m, cells in complete.items():
        errs = [e for e, _, _ in cells.values()]
        ses = [s for _, s, _ in cells.values()]
        basis = SEEDS_BASIS if all(b == SEEDS_BASIS for _, _, b in cells.values()) else STREAM_BASIS
        mean = float(np.mean(errs))
        se = math.sqrt(sum(s**2 for s in ses)) / len(ses) if all(math.isfinite(s) for s in ses) else math.nan
        methods.append({"method": m, "error": mean, "se": se,
                        "interval95": [mean - 1.96 * se, mean + 1.96 * se] if math.isfinite(se) else None,
                        "n_points": len(cells), "basis": basis})
    methods.sort(key=lambda x: (x["error"], x["method"]))
    pts = [{"setting": p[0], **dict(zip(FACTOR_KEYS, p[1:]))} for p in nearest]
    return Recommendation(factors=factors, points=pts, distance=d_min, methods=methods[:top] if top else methods,
                          source=source, metric=metric)


def _imb_cut(attribute: str) -> float:
    """The beta where the nearest imbalance character changes ('1' below, 'u' above): imb_position = 0.5."""
    return math.sqrt(reference_factors(attribute, 2)["beta_u"])


def _corr_cut(attribute: str, n: int) -> float:
    """The alpha_1 where the nearest correlation character changes ('i' below, 'n' above): corr_position = 0.5."""
    ref = reference_factors(attribute, n)
    lo, hi = -math.log(1.0 - ref["alpha_i"]), -math.log(1.0 - ref["alpha_n"])
    return 1.0 - math.exp(-(lo + hi) / 2.0)


def _flips(a: AttributeFactors) -> list[tuple[str, AttributeFactors]]:
    """The attribute's estimate moved to the far end of a 95 % interval that straddles a setting cut-off."""
    out = []
    lo, hi = a.interval("beta")
    cut = _imb_cut(a.attribute)
    if math.isfinite(a.beta_se) and lo < cut < hi:
        other = "1" if a.imb == "u" else "u"
        why = (f"{a.attribute} beta = {a.beta:.2f}, its 95 % interval [{lo:.2f}, {hi:.2f}] straddles the cut-off "
               f"{cut:.2f} between imbalance '1' and 'u'")
        out.append((why, dataclasses.replace(a, beta=lo if a.imb == "u" else hi, imb=other)))
    lo, hi = a.interval("alpha")
    cut = _corr_cut(a.attribute, a.n_states)
    if a.family == "markov" and math.isfinite(a.alpha_se) and lo < cut < hi:
        other = "i" if a.corr == "n" else "n"
        why = (f"{a.attribute} alpha_1 = {a.alpha:.3f}, its 95 % interval [{lo:.3f}, {hi:.3f}] straddles the "
               f"cut-off {cut:.3f} between correlation 'i' and 'n'")
        out.append((why, dataclasses.replace(a, alpha=lo if a.corr == "n" else hi, corr=other)))
    return out


def threshold_alternatives(factors: Factors) -> list[tuple[str, Factors]]:
    """(why, factors) for every estimate whose 95 % interval straddles the cut-off between two setting
    characters: the same factors with that one moved to the other side, at the far end of its interval."""
    out = [(why, dataclasses.replace(factors, classes=alt)) for why, alt in _flips(factors.classes)]
    if factors.domains is not None:
        out += [(why, dataclasses.replace(factors, domains=alt)) for why, alt in _flips(factors.domains)]
    return out


def assess(rec: Recommendation, table: Any, classes: Any, domains: Any = None,
           label_error: float = 0.0) -> Recommendation:
    """``rec`` with the warnings a reader needs before trusting it, and the rankings of the other candidate
    settings near a threshold: a ULMM that does not fit the stream (``unitta.streams.fit.transition_fit``),
    drift (``fit.drift``), a nearest benchmark point further than ``FAR_DISTANCE``, an estimate whose
    interval straddles a setting cut-off (``threshold_alternatives``)."""
    warnings = []
    attrs = ((classes, rec.factors.classes, label_error), (domains, rec.factors.domains, 0.0))
    for seq, attr, noise in attrs:
        if attr is None:
            continue
        fit = transition_fit(seq, attr, label_error=noise)
        if "would need" in fit.detail:  # too many states to simulate: said, not silently skipped
            need = fit.detail.removeprefix("not tested: ")
            warnings.append(f"fit not checked for the {attr.attribute} sequence: {need}")
        if fit.warns:
            warnings.append(f"misfit: the {attr.attribute} sequence is not the ULMM that was fitted to it "
                            f"({fit.detail}); its factors, nearest setting and ranking may not transfer")
        moved = drift(seq, attr, label_error=noise)
        if moved.warns:
            warnings.append(f"drift: {attr.attribute} frequencies change along the stream (p = {moved.p_value:.2g}; "
                            f"{moved.detail}); the benchmark's streams do not drift, so no setting describes it")
    if rec.distance > FAR_DISTANCE:
        warnings.append(f"far from the benchmark: the nearest point is {rec.distance:.2f} ladder steps away "
                        f"(more than {FAR_DISTANCE:g}, half the step between two settings): the ranking is an "
                        "extrapolation")
    alternatives = []
    for why, factors in threshold_alternatives(rec.factors):
        alt = recommend(factors, table, rec.source, top=len(rec.methods) or None, metric=rec.metric)
        if {p["setting"] for p in alt.points} == {p["setting"] for p in rec.points}:
            continue
        alternatives.append((why, alt))
        warnings.append(f"near a threshold: {why}; candidate settings {rec.factors.setting} and "
                        f"{factors.setting}: both rankings are shown")
    return dataclasses.replace(rec, warnings=tuple(warnings), alternatives=tuple(alternatives))


def _fmt_attr(name: str, a: Any) -> list[str]:
    lo_a, hi_a = a.interval("alpha")
    lo_b, hi_b = a.interval("beta")
    fixed = f"  (fixed: {a.family})"
    alpha = f"{a.alpha:.4f}" + (f"  [{lo_a:.4f}, {hi_a:.4f}]" if math.isfinite(a.alpha_se) else fixed)
    beta = f"{a.beta:.3f}" + (f"  [{lo_b:.3f}, {hi_b:.3f}]" if math.isfinite(a.beta_se) else "")
    return [f"  {name:<7} {a.family:<9} ({a.corr},{a.imb})  alpha_1 = {alpha}   beta = {beta}"]


def format_report(rec: Recommendation) -> str:
    """The human-readable report: warnings first, factors with 95% intervals, nearest setting, top methods,
    runner-up gap, the one-line reason, and the ranking at every other candidate setting."""
    f = rec.factors
    lines = [f"warning: {w}" for w in rec.warnings]
    lines.append(f"stream factors (95% intervals), {f.classes.length} positions:")
    lines += _fmt_attr("classes", f.classes)
    if f.domains is not None:
        lines += _fmt_attr("domains", f.domains)
    else:
        lines.append("  domains  not given: the ranking averages over the domain settings")
    lines.append(f"nearest setting: {f.setting}")
    pts = ", ".join(p["setting"] if not _overridden(p) else f"{p['setting']}{_factor_text(p)}" for p in rec.points)
    lines.append(f"nearest benchmark point(s) in {rec.source}: {pts} (distance {rec.distance:.3f})")
    lines.append("")
    lines += _ranking_lines(rec)
    lines.append(f"reason: {rec.reason()}")
    for why, alt in rec.alternatives:
        pts = ", ".join(p["setting"] for p in alt.points)
        lines += ["", f"alternative setting {alt.factors.setting} ({why}), nearest point(s) {pts}:"]
        lines += _ranking_lines(alt)
        lines.append(f"reason: {alt.reason()}")
    return "\n".join(lines)


def _ranking_lines(rec: Recommendation) -> list[str]:
    lines = [f"{'rank':>4}  {'method':<16} {rec.metric[:8]:>8}  {'95% interval':>17}  points  interval from"]
    for i, m in enumerate(rec.methods, 1):
        iv = f"[{m['interval95'][0]:6.2f}, {m['interval95'][1]:6.2f}]" if m["interval95"] else f"{'-':>17}"
        basis = m.get("basis", STREAM_BASIS)
        lines.append(f"{i:>4}  {m['method']:<16} {m['error']:8.2f}  {iv:>17}  {m['n_points']:>6}  {basis}")
    if any(m.get("basis") != SEEDS_BASIS for m in rec.methods):
        lines.append("(stream sampling only: one run per cell, so seed-to-seed variation is not in the interval; "
                     "it is often larger)")
    ru = rec.runner_up()
    if ru is not None:
        z = f"z = {ru['z']:.1f}" if ru["z"] is not None else "no interval"
        verdict = "within noise" if ru["within_noise"] else "a clear gap"
        if ru["z"] is None:  # e.g. ECE / NLL from one run per point: nothing to test the gap against
            verdict = "not tested: one run per point and no binomial interval for this metric"
        lines.append(f"runner-up {ru['method']} is {rec.gap_text(ru['gap'])} behind ({z} from {ru['basis']}: "
                     f"{verdict})")
    return lines


def _overridden(p: dict[str, Any]) -> bool:
    """True for a point off the setting's default factors (a Tune point); the i.i.d. alpha (1/n) varies by dataset."""
    try:
        d = default_factors(p["setting"])
    except ValueError:
        return True
    iid = {f"{a}_alpha" for a, c in (("class", p["setting"][0]), ("domain", p["setting"][2])) if c == "i"}
    return any(abs(float(p[k]) - d[k]) > 1e-6 for k in FACTOR_KEYS if k not in iid)


def _factor_text(p: dict[str, Any]) -> str:
    return "(" + ", ".join(f"{k}={p[k]:g}" for k in FACTOR_KEYS) + ")"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2 (argparse prints the usage as well)
        print(f"unitta.recommend: error: {message}", file=sys.stderr)
        raise SystemExit(2)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="python -m unitta.recommend", description=__doc__.split("\n\n")[0])
    p.add_argument("--classes", required=True,
                   help="class label per stream position: .npy, .csv or one integer per line")
    p.add_argument("--domains", help="domain id per stream position (same formats); omit to estimate classes only")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--results", nargs="+", metavar="DIR", help="sweep / Tune result directories")
    src.add_argument("--paper", metavar="DATASET", help="the paper's table: cifar10-c, cifar100-c or imagenet-c")
    p.add_argument("--dataset", help="with --results holding several datasets: the one to use")
    p.add_argument("--num-classes", type=int, help="number of classes (default: largest label + 1)")
    p.add_argument("--num-domains", type=int, help="number of domains (default: largest id + 1)")
    p.add_argument("--label-error", type=float, default=0.0,
                   help="error rate of predicted class labels, to undo their flattening (default 0: true labels)")
    p.add_argument("--metric", default="error", choices=RANK_METRICS,
                   help="the result column to rank by (default error; docs/results.md, Metrics)")
    p.add_argument("--sweep", metavar="NAME",
                   help="with --results: only the cells of this sweep's grid (docs/results.md, One sweep's rows)")
    p.add_argument("--where", metavar="KEY=VALUE", action="append",
                   help="with --results: only the rows whose column KEY has this value, e.g. protocol=realtime "
                        "(repeatable; needed where the results differ in such a coordinate; docs/analysis.md)")
    p.add_argument("--top", type=int, default=5, help="methods to show (default 5; --json lists all)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the report")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.top < 1:
            raise UsageError(f"--top {args.top}: must be >= 1 (the number of methods to show)")
        classes = read_labels(args.classes, "--classes")
        domains = read_labels(args.domains, "--domains") if args.domains else None
        if domains is not None and len(domains) != len(classes):
            raise UsageError(f"--domains has {len(domains)} labels but --classes has {len(classes)}")
        try:
            factors = estimate_factors(classes, domains, num_classes=args.num_classes, num_domains=args.num_domains,
                                       label_error=args.label_error)
        except ValueError as err:
            raise UsageError(str(err)) from None
        table, source = benchmark_table(results=args.results, paper=args.paper, dataset=args.dataset,
                                        metric=args.metric, sweep=args.sweep, where=args.where)
        rec = recommend(factors, table, source, top=None if args.json else args.top, metric=args.metric)
        rec = assess(rec, table, classes, domains, label_error=args.label_error)
    except UsageError as err:
        print(f"unitta.recommend: error: {err}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(rec.to_json()))
    else:
        print(format_report(rec))
    return 0

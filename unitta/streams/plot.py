"""Draw a stream: domain and class over time (like the paper's sampling figure) plus their marginals."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from unitta.streams.stream import Stream


def _palette(plt, n: int):
    """n distinct colours: tab10 up to 10 states, tab20 up to 20, then a continuous map."""
    if n <= 10:
        return [plt.get_cmap("tab10")(i) for i in range(n)]
    if n <= 20:
        return [plt.get_cmap("tab20")(i) for i in range(n)]
    return [plt.get_cmap("turbo")(i / max(n - 1, 1)) for i in range(n)]


def _legend(ax, plt, colours, names: Sequence[str], title: str) -> None:
    from matplotlib.patches import Patch

    handles = [Patch(color=c, label=name) for c, name in zip(colours, names)]
    ax.legend(handles=handles, title=title, fontsize=6.5, title_fontsize=7, loc="upper left",
              bbox_to_anchor=(1.01, 1.0), frameon=False, ncol=1 if len(handles) <= 15 else 2)


def _plot_zoom(ax, stream: Stream, names: dict[str, list[str]], length: int) -> None:
    """The first ``length`` positions as two step lines: domain (left axis) and class (right axis)."""
    z = np.arange(length)
    ax.step(z, stream.domains[z], where="post", color="tab:blue", lw=1.2, label="domain")
    ax.set_ylabel("domain", color="tab:blue")
    ax.set_ylim(-0.5, stream.num_domains - 0.5)
    ax.set_yticks(range(stream.num_domains), names["domain"], fontsize=6.5 if stream.num_domains > 10 else 8)
    ax.invert_yaxis()
    ax2 = ax.twinx()
    ax2.step(z, stream.classes[z], where="post", color="tab:orange", lw=1.0, label="class")
    ax2.set_ylabel("class", color="tab:orange")
    ax2.set_ylim(-0.5, stream.num_classes - 0.5)
    ax2.set_yticks(range(stream.num_classes), names["class"], fontsize=8)
    ax2.invert_yaxis()
    ax.set_xlim(0, len(z))
    ax.set_xlabel("stream position")
    lines = [ax.get_lines()[0], ax2.get_lines()[0]]
    ax.legend(lines, ["domain (left axis)", "class (right axis)"], fontsize=7, loc="lower right", framealpha=0.9)
    ax.set_title(f"first {len(z)} positions", fontsize=9)


def _plot_quarter_mix(fig, ax, summary: dict, class_names: list[str]) -> None:
    """Each class's share of each quarter of the stream, as a heat map."""
    quarters = np.asarray(summary["class_counts_per_quarter"], dtype=float)
    quarters /= np.maximum(quarters.sum(axis=1, keepdims=True), 1)
    mix = ax.imshow(quarters.T, aspect="auto", cmap="viridis", interpolation="nearest")
    fig.colorbar(mix, ax=ax, label="share of the quarter", shrink=0.9)
    ax.set_xticks(range(4), [f"Q{i + 1}" for i in range(4)])
    ax.set_yticks(range(len(class_names)), class_names, fontsize=8)
    ax.set_ylabel("class")
    ax.set_title(f"class mix per quarter (drift TV {summary['class_quarter_drift_tv']:.3f})", fontsize=9)


def plot_stream(stream: Stream, path: str | Path, *, max_points: int = 60_000, zoom: int = 400,
                domain_names: Sequence[str] | None = None, class_names: Sequence[str] | None = None) -> Path:
    """Write a PNG: domain and class over the whole stream with their histograms, and a zoom on the first
    ``zoom`` positions where individual runs are visible.

    The domain timeline's points are coloured by class and the class timeline's by domain, each with its
    legend; ``domain_names`` (e.g. the corruption names) and ``class_names`` label the axes and legends
    (default: the ids). Long streams are thinned to ``max_points`` evenly spaced positions for the timelines
    (the histograms use every position). matplotlib is imported here only, so ``unitta.streams`` stays light.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(stream)
    step = max(1, n // max_points)
    t = np.arange(0, n, step)
    names = {
        "domain": list(domain_names) if domain_names is not None else [str(i) for i in range(stream.num_domains)],
        "class": list(class_names) if class_names is not None else [str(i) for i in range(stream.num_classes)],
    }
    for attr, count in (("domain", stream.num_domains), ("class", stream.num_classes)):
        if len(names[attr]) != count:
            raise ValueError(f"{attr}_names: {len(names[attr])} names for {count} {attr}s")
    colours = {"domain": _palette(plt, stream.num_domains), "class": _palette(plt, stream.num_classes)}
    fig, axes = plt.subplots(
        3, 2, figsize=(14, 9.5), gridspec_kw={"width_ratios": [4, 1]}, constrained_layout=True
    )
    summary = stream.summary()
    title = (
        f"{stream.setting} [{stream.sampler}] {stream.dataset}: {n:,} samples, "
        f"run lengths domain {summary['domain_mean_run_length']:.1f} / class {summary['class_mean_run_length']:.1f}"
    )
    fig.suptitle(title, fontsize=11)
    for row, (attr, seq, count) in enumerate(
        (("domain", stream.domains, stream.num_domains), ("class", stream.classes, stream.num_classes))
    ):
        ax = axes[row, 0]
        other, other_seq = ("domain", stream.domains) if attr == "class" else ("class", stream.classes)
        palette = np.asarray(colours[other])
        ax.scatter(t, seq[t], c=palette[other_seq[t]], s=2.5, marker="s", linewidths=0, rasterized=True)
        _legend(ax, plt, colours[other], names[other], f"colour: {other}")
        ax.set_xlim(0, n)
        ax.set_ylim(-0.5, count - 0.5)
        ax.set_yticks(range(count), names[attr], fontsize=6.5 if count > 10 else 8)
        ax.invert_yaxis()
        ax.set_ylabel(attr)
        ax.set_xlabel("stream position" + (f" (1 in {step} positions shown)" if step > 1 else ""))
        for q in (n // 4, n // 2, 3 * n // 4):
            ax.axvline(q, color="0.6", lw=0.6, ls="--")
        hist = np.bincount(seq, minlength=count)
        axes[row, 1].barh(np.arange(count), hist, color="tab:blue" if attr == "domain" else "tab:orange")
        axes[row, 1].set_yticks(range(count), names[attr], fontsize=6.5 if count > 10 else 8)
        axes[row, 1].set_ylim(-0.5, count - 0.5)
        axes[row, 1].invert_yaxis()
        axes[row, 1].set_xlabel(f"{attr} count (head/tail {summary[f'{attr}_head_tail_ratio']:.2f})")
    _plot_zoom(axes[2, 0], stream, names, min(zoom, n))
    _plot_quarter_mix(fig, axes[2, 1], summary, names["class"])
    axes[0, 0].set_title("domain over time (colour: class)", fontsize=9)
    axes[1, 0].set_title("class over time (colour: domain)", fontsize=9)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out

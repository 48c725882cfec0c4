"""Draw a stream: domain and class over time (like the paper's sampling figure) plus their marginals."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from unitta.streams.stream import Stream


def plot_stream(stream: Stream, path: str | Path, *, max_points: int = 60_000, zoom: int = 400) -> Path:
    """Write a PNG: domain and class over the whole stream with their histograms, and a zoom on the first
    ``zoom`` positions where individual runs are visible.

    Long streams are thinned to ``max_points`` evenly spaced positions for the timelines (the histograms
    use every position). matplotlib is imported here only, so ``unitta.streams`` stays light.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(stream)
    step = max(1, n // max_points)
    t = np.arange(0, n, step)
    fig, axes = plt.subplots(
        3, 2, figsize=(13, 9), gridspec_kw={"width_ratios": [4, 1]}, constrained_layout=True
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
        colour = stream.domains[t] if attr == "class" else stream.classes[t]
        ax.scatter(t, seq[t], c=colour, s=2.5, marker="s", linewidths=0, cmap="tab10", rasterized=True)
        ax.set_xlim(0, n)
        ax.set_ylim(-0.5, count - 0.5)
        ax.invert_yaxis()
        ax.set_ylabel(f"{attr} id (head at top)")
        ax.set_xlabel("stream position" + (f" (1 in {step} positions shown)" if step > 1 else ""))
        for q in (n // 4, n // 2, 3 * n // 4):
            ax.axvline(q, color="0.6", lw=0.6, ls="--")
        hist = np.bincount(seq, minlength=count)
        axes[row, 1].barh(np.arange(count), hist, color="tab:blue" if attr == "domain" else "tab:orange")
        axes[row, 1].set_ylim(-0.5, count - 0.5)
        axes[row, 1].invert_yaxis()
        axes[row, 1].set_xlabel(f"{attr} count (head/tail {summary[f'{attr}_head_tail_ratio']:.2f})")
    z = np.arange(min(zoom, n))
    ax = axes[2, 0]
    ax.step(z, stream.domains[z], where="post", color="tab:blue", lw=1.2, label="domain")
    ax.set_ylabel("domain id", color="tab:blue")
    ax.set_ylim(-0.5, stream.num_domains - 0.5)
    ax.invert_yaxis()
    ax2 = ax.twinx()
    ax2.step(z, stream.classes[z], where="post", color="tab:orange", lw=1.0, label="class")
    ax2.set_ylabel("class id", color="tab:orange")
    ax2.set_ylim(-0.5, stream.num_classes - 0.5)
    ax2.invert_yaxis()
    ax.set_xlim(0, len(z))
    ax.set_xlabel("stream position")
    ax.set_title(f"first {len(z)} positions (blue: domain, orange: class)", fontsize=9)
    quarters = np.asarray(summary["class_counts_per_quarter"], dtype=float)
    quarters /= np.maximum(quarters.sum(axis=1, keepdims=True), 1)
    axes[2, 1].imshow(quarters.T, aspect="auto", cmap="viridis", interpolation="nearest")
    axes[2, 1].set_xticks(range(4), [f"Q{i + 1}" for i in range(4)])
    axes[2, 1].set_ylabel("class id")
    axes[2, 1].set_title(f"class mix per quarter (drift TV {summary['class_quarter_drift_tv']:.3f})", fontsize=9)
    axes[0, 0].set_title("domain over time (colour: class)", fontsize=9)
    axes[1, 0].set_title("class over time (colour: domain)", fontsize=9)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out

"""analysis/plots.py: figure sizes follow the cell count and stay legible in the report; grids collapse to the
settings present; panel averages carry the table's interval; tune factor plots have error bars."""

from __future__ import annotations

import struct
from pathlib import Path

import polars as pl
import pytest

from analysis import plots
from analysis.common import load_dirs, split_rows, sweep_panels
from analysis.stats import binomial_halfwidth, t_interval
from analysis.tables import cell_status, paper_table
from tests.analysis.conftest import SEEDED_SETTINGS
from unitta.results import load_results
from unitta.streams import SETTING_CODES_24

REPORT_WIDTH_PX = 1250  # what the report (max-width 1,300 px, body margins) gives an image


def _png_size(path: Path) -> tuple[int, int]:
    width, height = struct.unpack(">II", path.read_bytes()[16:24])
    return width, height


def _value_px(png_width: int) -> float:
    """The em size in CSS pixels of a heatmap value once the report scales the image into its width."""
    return plots.VALUE_PT / 72 * plots.DPI * min(1.0, REPORT_WIDTH_PX / png_width)


@pytest.fixture(scope="module")
def seeded_table(seeded_dir: Path):
    (panel,) = sweep_panels(split_rows(load_dirs([seeded_dir]))[0])
    return paper_table(cell_status(panel.rows), panel.caption, panel.rows)


def _widened(t, settings):
    """The seeded table's values spread over more settings (same numbers, for the geometry only)."""
    first = t.settings[0]
    values = {m: {s: t.values[m][first] for s in settings} for m in t.methods}
    status = {m: {s: t.status[m][first] for s in settings} for m in t.methods}
    ci = {m: {s: t.ci[m][first] for s in settings} for m in t.methods}
    return type(t)(
        t.methods,
        list(settings),
        values,
        status,
        t.avg,
        {m: len(settings) for m in t.methods},
        {s: t.best[first] for s in settings},
        t.best_avg,
        t.caption,
        ci,
        t.avg_ci,
    )


def test_seeded_heatmap_values_stay_legible_in_the_report(seeded_table, tmp_path: Path) -> None:
    assert seeded_table.has_seeds
    small = plots.heatmap(seeded_table, tmp_path / "small.png", "3 settings")
    full = plots.heatmap(_widened(seeded_table, SETTING_CODES_24), tmp_path / "full.png", "24 settings " * 20)
    (w3, h3), (w24, h24) = _png_size(small), _png_size(full)
    assert w3 < w24 <= 1.15 * REPORT_WIDTH_PX  # the footnote and the long title wrap instead of widening it
    assert h24 > 1.4 * h3  # 24 settings wrap into two rows of panels
    assert _value_px(w24) >= 13  # an em of 13 px: digits about 9 px tall


def test_grid_collapses_to_the_settings_present_and_averages_carry_the_interval(seeded_table, tmp_path) -> None:
    assert plots.grid_halves(list(SEEDED_SETTINGS)) == (["11"], ["i1", "n1", "nu"])
    assert plots.grid_halves(list(SETTING_CODES_24)) == (list(plots.DOMAIN_HALVES), list(plots.CLASS_HALVES))
    for m in seeded_table.methods:
        title = plots._avg_title(seeded_table, m)
        assert title == f"(avg {seeded_table.avg[m]:.1f} ± {seeded_table.avg_ci[m]:.1f})"
    png = plots.setting_grids(seeded_table, tmp_path / "grid.png", "grids")
    w, h = _png_size(png)
    full = plots.setting_grids(_widened(seeded_table, SETTING_CODES_24), tmp_path / "grid24.png", "grids")
    assert h < _png_size(full)[1]  # 1 x 3 cells per panel, not the 6 x 4 grid
    assert w <= 1.15 * REPORT_WIDTH_PX


def test_factor_points_have_seed_or_binomial_error_bars(seeded_dir: Path) -> None:
    rows = load_results(seeded_dir).filter((pl.col("method") == "bn") & (pl.col("status") == "ok"))
    rows = rows.with_columns(pl.when(pl.col("setting") == "i111").then(0.2).otherwise(0.9).alias("class_alpha"))
    one = rows.filter(~((pl.col("class_alpha") == 0.2) & (pl.col("seed") != rows["seed"].min())))
    xs, ys, hws = plots.factor_points(one, "class_alpha")
    assert xs == [0.2, 0.9]
    i111 = one.filter(pl.col("class_alpha") == 0.2).row(0, named=True)  # one run: the binomial interval
    assert ys[0] == pytest.approx(i111["error"]) and hws[0] == pytest.approx(
        binomial_halfwidth(i111["error"], i111["n_samples"])
    )
    many = one.filter(pl.col("class_alpha") == 0.9)["error"].to_list()  # 2 settings x 2 seeds: the t-interval
    mean, hw = t_interval(many)
    assert ys[1] == pytest.approx(mean) and hws[1] == pytest.approx(hw)


def _relabelled(t, labels: dict[str, str]):
    """The seeded table with its methods renamed (e.g. to long override labels), values unchanged."""
    rename = lambda d: {labels.get(m, m): v for m, v in d.items()}  # noqa: E731
    return type(t)([labels.get(m, m) for m in t.methods], t.settings, rename(t.values), rename(t.status),
                   rename(t.avg), rename(t.avg_n), t.best, t.best_avg, t.caption, rename(t.ci), rename(t.avg_ci))


def test_grid_titles_overlap_no_tick_label_and_long_labels_do_not_squash_the_panels(seeded_table, tmp_path) -> None:
    """The per-method grid as the report shows it: every panel title, tick label and the suptitle apart, and
    every heatmap as wide as the others even when one method carries a long override label."""
    import matplotlib.pyplot as plt

    long = {"tent": "tent{lr=0.0005,min_update_batch=16,optimizer=sgd,steps=2}"}
    for table in (_relabelled(seeded_table, long), _relabelled(_widened(seeded_table, SETTING_CODES_24), long)):
        fig = plots.grid_figure(table, "a long caption " * 12)
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        axes = [ax for ax in fig.axes if ax.get_title()]
        assert len(axes) == 3
        titles = [ax.title.get_window_extent(renderer) for ax in axes]
        ticks_of = [[t.get_window_extent(renderer) for t in ax.get_xticklabels() + ax.get_yticklabels()
                     if t.get_visible() and t.get_text()] for ax in axes]
        ticks = [tick for own in ticks_of for tick in own]
        heatmaps = [ax.get_window_extent(renderer) for ax in axes]
        suptitle = fig._suptitle.get_window_extent(renderer)
        for i, title in enumerate(titles):
            assert not any(title.overlaps(tick) for tick in ticks)
            assert not title.overlaps(suptitle)
            assert not any(title.overlaps(other) for j, other in enumerate(titles) if j != i)
            assert not any(title.overlaps(box) for box in heatmaps)
        for i, own in enumerate(ticks_of):  # a panel's tick labels stay off its neighbours' heatmaps
            assert not any(tick.overlaps(box) for tick in own for j, box in enumerate(heatmaps) if j != i)
        widths = [box.width for box in heatmaps]
        assert max(widths) - min(widths) < 1.0  # pixels: the long label squashes no panel
        plt.close(fig)


def test_a_log_axis_over_a_narrow_range_has_readable_labels():
    """The cost plot's x (time relative to TEST) often spans 1 .. 2.5: labelled at 1, 1.5, 2 (it showed a lone
    1 and 2); a wide range keeps the decades."""
    import matplotlib.pyplot as plt

    from analysis.plots import log_axis, log_ticks

    assert log_ticks(0.9, 2.6) == [1.0, 1.5, 2.0]
    assert log_ticks(1.0, 1000.0) == [1.0, 10.0, 100.0, 1000.0]
    assert log_ticks(0.05, 0.3) == [0.05, 0.1, 0.2]
    fig, ax = plt.subplots()
    ax.plot([1.0, 1.3, 2.4], [10, 20, 30], "o")
    log_axis(ax, [1.0, 1.3, 2.4])
    fig.canvas.draw()
    labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    plt.close(fig)
    assert labels == ["1", "1.5", "2"], labels

"""analysis/report.py: one self-contained HTML page from a real seeded sweep (and a headless-browser look)."""

from __future__ import annotations

import base64
import re
import shutil
import struct
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from analysis.report import main


@pytest.fixture(scope="module")
def report(seeded_dir: Path, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report")
    assert main([str(seeded_dir), "--out", str(out)]) == 0
    return out / "report.html"


def test_page_is_self_contained_with_every_section(report: Path) -> None:
    page = report.read_text(encoding="utf-8")
    images = re.findall(r'<img alt="([^"]+)" src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert {alt for alt, _ in images} == {"heatmap fmnist-c", "grids fmnist-c", "ours vs paper fmnist-c_vs_cifar10-c",
                                          "balanced error heatmap fmnist-c", "error vs cost fmnist-c",
                                          "error per domain fmnist-c"}
    assert all(len(data) > 10_000 for _, data in images)
    assert not re.search(r'(src|href)="(https?:|file:|/)', page)  # nothing outside the page
    for needed in ("Best vs runner-up", "Wilcoxon", "spearman_rho=", "Proxy comparison", " ± ", "ranking per setting"):
        assert needed in page
    assert page.count("<table>") >= 4
    # 40 images per domain, S = 4: continual segments of 40 images, warned with the S that lengthens them
    assert "warning: fmnist-c i111 (official, n_per_domain 40, S 4, batch 64): a continual domain segment" in page


def test_heatmap_values_are_legible_at_1300_pixels(report: Path) -> None:
    """The page shows images at most 1,300 px wide (about 1,250 inside the body): each heatmap and grid is
    drawn at most ~1.15 x that, so its 8 pt values (analysis.plots.VALUE_PT at DPI) stay >= 13 px per em,
    digits about 9-11 px tall (measured in a chromium screenshot of a 24-setting seeded report)."""
    from analysis import plots

    page = report.read_text(encoding="utf-8")
    for alt, data in re.findall(r'<img alt="((?:heatmap|grids) [^"]+)" src="data:image/png;base64,([^"]+)"', page):
        width = struct.unpack(">I", base64.b64decode(data)[16:20])[0]
        em_px = plots.VALUE_PT / 72 * plots.DPI * min(1.0, 1250 / width)
        assert em_px >= 13, f"{alt}: {width} px wide, values {em_px:.1f} px per em"


@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs Debian's chromium (apt-get install chromium)")
def test_page_renders_in_headless_chromium(report: Path, tmp_path: Path) -> None:
    shot = tmp_path / "shot.png"
    subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--screenshot={shot}", "--window-size=1300,3000", report.as_uri()], check=True,
                   capture_output=True, timeout=120)
    head = shot.read_bytes()
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000
    assert struct.unpack(">II", head[16:24]) == (1300, 3000)


class _Tables(HTMLParser):
    """Every <table> of a page as a list of rows, each a list of cell texts (th and td)."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[list[list[str]]] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append("".join(self._cell).strip())
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def test_every_table_parses_back_with_as_many_cells_as_headers(report: Path) -> None:
    """A '|' inside a cell (the paper comparison's 'mean |diff|') must not split it into two columns."""
    parser = _Tables()
    parser.feed(report.read_text(encoding="utf-8"))
    assert len(parser.tables) >= 4
    for table in parser.tables:
        head, *rows = table
        assert all(len(row) == len(head) for row in rows), head
    per_method = [t for t in parser.tables if "mean |diff|" in t[0]]
    assert len(per_method) == 1 and per_method[0][0] == [
        "method", "settings", "mean ours - paper", "sd", "mean |diff|", "rank ours", "rank paper"]
    assert {row[0] for row in per_method[0][1:]} == {"test", "bn", "tent"}


def test_data_that_is_not_the_papers_is_not_compared_with_the_paper_unless_asked(tmp_path) -> None:
    """A folder of the user's own images is no proxy of CIFAR-10-C: the report says so instead of comparing."""
    import polars as pl

    from analysis.report import _paper_section

    parts = _paper_section([], tmp_path, pl.DataFrame({"dataset": ["folder"]}), None, 2.0, None, None)
    assert len(parts) == 1 and "none of the paper's datasets" in parts[0] and "--paper-dataset" in parts[0]

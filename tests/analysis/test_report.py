"""analysis/report.py: one self-contained HTML page from a real seeded sweep (and a headless-browser look)."""

from __future__ import annotations

import re
import shutil
import subprocess
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
    assert {alt for alt, _ in images} == {"heatmap fmnist-c", "grids fmnist-c", "ours vs paper fmnist-c_vs_cifar10-c"}
    assert all(len(data) > 10_000 for _, data in images)
    assert not re.search(r'(src|href)="(https?:|file:|/)', page)  # nothing outside the page
    for needed in ("Best vs runner-up", "Wilcoxon", "spearman_rho=", "Proxy comparison", " ± ", "ranking per setting"):
        assert needed in page
    assert page.count("<table>") >= 4


@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs Debian's chromium (apt-get install chromium)")
def test_page_renders_in_headless_chromium(report: Path, tmp_path: Path) -> None:
    shot = tmp_path / "shot.png"
    subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", f"--screenshot={shot}",
                    "--window-size=1400,2000", report.as_uri()], check=True, capture_output=True, timeout=120)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000

"""docs/own_data.md's five commands, run as written on a tiny folder (20 Fashion-MNIST-C images per corruption
instead of 100): export, check, sweep (the docs' own.yaml, in-process with --local), heatmaps, recommend."""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path

import numpy as np
import pytest

from unitta.__main__ import main as unitta_main

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "own_data.md").read_text()

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]


def _block(language: str, after: str) -> str:
    start = DOC.index(after)
    found = re.search(rf"```{language}\n(.*?)```", DOC[start:], re.S)
    assert found, f"no {language} block after {after!r}"
    return found.group(1)


def test_five_commands(tmp_path, monkeypatch):
    commands = [shlex.split(line) for line in _block("bash", "five commands").strip().splitlines()]
    assert len(commands) == 5
    config = "\n".join(line.strip() for line in _block("yaml", "own.yaml").splitlines())
    monkeypatch.chdir(tmp_path)
    (tmp_path / "own.yaml").write_text(config)
    from unitta.streams import make_stream

    labels = np.tile(np.arange(10), 30)
    domains = np.repeat(np.arange(3), 100)
    stream = make_stream(labels, domains, "nui1", sampler="exact", length=300, seed=1)
    np.savetxt(tmp_path / "my_stream.txt", stream.classes, fmt="%d")

    export, check, sweep, heatmaps, recommend = commands
    assert export[:3] == ["unitta", "data", "export-folder"]
    export[export.index("--n-per-domain") + 1] = "20"  # tiny: 2 images per class and corruption
    assert unitta_main(export[1:]) == 0
    assert unitta_main(check[1:]) == 0
    assert unitta_main([*sweep[1:], "--local"]) == 0
    assert (tmp_path / "results" / "own" / "results.parquet").is_file()
    assert heatmaps[:2] == ["python", "analysis/heatmaps.py"]
    sys.path.insert(0, str(ROOT))
    try:
        from analysis.heatmaps import main as heatmaps_main
    finally:
        sys.path.remove(str(ROOT))
    assert heatmaps_main(heatmaps[2:]) == 0
    assert any((tmp_path / "results" / "own" / "figures").iterdir())
    assert unitta_main(recommend[1:]) == 0

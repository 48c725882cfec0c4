"""The python blocks of docs/results.md run as written on a real result folder (the seeded sweep of conftest.py)."""

from __future__ import annotations

import re
from pathlib import Path

import polars as pl

DOC = Path(__file__).resolve().parents[2] / "docs" / "results.md"
DOCS_FOLDER = "results/quick"  # the folder the blocks name; replaced by the real one


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def test_every_python_block_of_results_md_runs(seeded_dir: Path, capsys) -> None:
    blocks = _python_blocks(DOC.read_text(encoding="utf-8"))
    assert blocks, "docs/results.md has no python block"
    for block in blocks:
        assert DOCS_FOLDER in block, "a block should read the folder the page's examples use"
        namespace: dict = {}
        exec(compile(block.replace(DOCS_FOLDER, str(seeded_dir)), str(DOC), "exec"), namespace)  # noqa: S102
        if "per_domain" in namespace:  # one row per (cell, domain), the struct's fields renamed
            per_domain = namespace["per_domain"]
            assert isinstance(per_domain, pl.DataFrame) and per_domain.height == 18 * 15
            assert {"domain", "domain_name", "domain_n", "domain_error"} <= set(per_domain.columns)
    assert "domain_error" in capsys.readouterr().out


def test_the_one_liner_the_docs_warn_about_still_fails(seeded_dir: Path) -> None:
    """What the page says not to do really fails (so the advice stays true with the polars in use)."""
    import pytest

    from unitta.results import load_results

    with pytest.raises(pl.exceptions.DuplicateError):
        load_results(seeded_dir).explode("per_domain").unnest("per_domain")

"""bench/docs_tables.py: every generated block of docs/ names a registered table and every registered table has
exactly one block; a block is replaced whole and a second run finds it up to date. The numbers themselves are
checked against a fresh selection run in tests/analysis/test_selection.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.bench_scripts import load_bench_script

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def docs_tables():
    return load_bench_script("docs_tables")


def test_every_block_is_registered_and_every_table_has_one_block(docs_tables) -> None:
    found: dict[str, list[str]] = {}
    for doc in sorted((ROOT / "docs").glob("*.md")):
        for name in docs_tables.blocks(doc.read_text()):
            found.setdefault(name, []).append(f"docs/{doc.name}")
    assert set(found) == set(docs_tables.TABLES), "a block without a table, or a table without a block"
    for name, docs in found.items():
        assert docs == [docs_tables.TABLES[name].doc], f"{name}: blocks in {docs}"


def test_a_block_is_replaced_whole_and_nothing_else_moves(docs_tables) -> None:
    text = "intro\n<!-- docs_tables: a -->\n| old |\n| stale |\n<!-- /docs_tables -->\noutro\n"
    new = docs_tables.replace_block(text, "a", "| new |\n")
    assert new == "intro\n<!-- docs_tables: a -->\n| new |\n<!-- /docs_tables -->\noutro\n"
    assert docs_tables.replace_block(new, "a", "| new |") == new
    with pytest.raises(ValueError, match="0 blocks"):
        docs_tables.replace_block(text, "b", "| x |")


def test_missing_results_leave_the_doc_and_name_the_command(docs_tables, tmp_path: Path, capsys) -> None:
    assert docs_tables.main(["selection_quick", "--check", "--results-root", str(tmp_path)]) == 0
    assert "unitta select sweeps/select_quick.yaml" in capsys.readouterr().out
    assert docs_tables.main(["nope"]) == 2


def test_check_allows_another_machines_rounding_and_nothing_more(docs_tables) -> None:
    """The selection table's numbers moved by 0.02-0.04 points on another CPU (a prediction or two of a 735-image
    stream): within 3 predictions of the smallest cell they agree; a larger move, a changed name or a changed
    shape does not; column padding and a moved best-value marker are not differences."""
    tolerance = 100.0 * docs_tables.FLIPS / 735  # 0.41 points
    old = "| method | default |\n|---|---|\n| roid | **62.87** |\n| tent | 64.15 |\n"
    assert docs_tables.differences(old, old.replace("62.87", "62.83").replace("64.15", "64.13"), tolerance) == []
    assert docs_tables.differences(old, old.replace("**62.87**", "62.87  "), tolerance) == []
    assert docs_tables.differences(old, old.replace("64.15", "64.65"), tolerance) == ["64.15 vs 64.65 (more than 0.41 apart)"]
    assert docs_tables.differences(old, old.replace("tent", "eata"), tolerance)
    assert docs_tables.differences(old, old + "| bn | 70.00 |\n", tolerance)

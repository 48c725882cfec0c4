"""The official sampler's i.i.d. alpha_1 on streams with fewer domains than the reference's default assumes
(``unitta.evaluate.inputs.iid_overrides``): a selection's validation stream on the four held-out corruptions."""

from __future__ import annotations

from unitta.cell import Cell
from unitta.data import HELD_OUT_CORRUPTIONS
from unitta.evaluate import run_cell

SMALL = {"dataset": "fmnist-c", "method": "test", "n_per_domain": 40, "S": 4, "batch_size": 32, "seed": 425}


def test_a_domain_iid_stream_of_four_corruptions_uses_one_quarter():
    row = run_cell(Cell(setting="nuiu", corruptions=HELD_OUT_CORRUPTIONS, **SMALL))
    # the reference's 0.067 (1/15) is below 1/4: no uniformly-leaving chain exists there (paper Cor. 1)
    assert row["status"] == "ok", row.get("error_text")
    assert row["domain_alpha"] == 0.25 and row["class_alpha"] == 0.95


def test_all_fifteen_corruptions_keep_the_references_factor():
    row = run_cell(Cell(setting="nuiu", **SMALL))
    assert row["status"] == "ok" and row["domain_alpha"] == 0.067


def test_the_cells_own_factor_wins():
    row = run_cell(Cell(setting="i1i1", corruptions=HELD_OUT_CORRUPTIONS, factors={"domain_alpha": 0.5}, **SMALL))
    assert row["status"] == "ok" and row["domain_alpha"] == 0.5

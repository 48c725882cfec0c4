"""Cell options that change how, not what, a cell computes: precision (fp32 / tf32 / bf16) and compile.

On the CPU: bf16 autocast runs every method family and stays within a few points of fp32 (the issue's
GPU figures are in docs/benchmarks.md); ``compile: true`` gives the same predictions as eager.
"""

from __future__ import annotations

import dataclasses
import math

import pytest

from unitta.cell import Cell
from unitta.evaluate import evaluate
from unitta.sweep.config import parse_config

SMALL = dict(dataset="fmnist-c", n_per_domain=200, S=5, setting="nui1", num_threads=1)


def test_precision_is_part_of_the_identity_and_compile_is_not():
    base = Cell(**SMALL)
    assert dataclasses.replace(base, precision="bf16").cell_id() != base.cell_id()
    assert dataclasses.replace(base, compile=True).cell_id() == base.cell_id()
    with pytest.raises(ValueError, match="precision: unknown precision 'fp16'"):
        Cell(precision="fp16")
    cfg = parse_config({"name": "p", "datasets": ["fmnist-c"], "methods": ["bn"], "settings": ["i111"],
                        "precision": "bf16", "compile": True})
    assert {(c.precision, c.compile) for c in cfg.cells()} == {("bf16", True)}


@pytest.mark.parametrize("method", ["bn", "unitta"])
def test_bf16_stays_close_to_fp32(method):
    fp32 = evaluate(Cell(method=method, **SMALL))
    bf16 = evaluate(Cell(method=method, precision="bf16", **SMALL))
    assert bf16["precision"] == "bf16" and math.isfinite(bf16["error"])
    # n ~ 100-400 images: bf16 rounding flips a few borderline predictions, a few points at most
    n = fp32["n_samples"]
    assert abs(bf16["error"] - fp32["error"]) <= 100 * max(4 / n, 0.03), (fp32["error"], bf16["error"], n)


@pytest.mark.slow
def test_compiled_model_gives_the_same_predictions():
    eager = evaluate(Cell(method="bn", **SMALL))
    compiled = evaluate(Cell(method="bn", compile=True, **SMALL))
    assert compiled["error"] == eager["error"]
    assert compiled["per_class"] == eager["per_class"]

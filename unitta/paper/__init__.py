"""The UniTTA paper's published error tables, as package data.

`paper_tables.csv` holds every error (%) the paper (Du et al., "UniTTA: Unified Benchmark and Versatile
Framework Towards Realistic Test-Time Adaptation") publishes for its benchmark: its appendix tables
"Average error (%) on CIFAR10-C / CIFAR100-C / ImageNet-C within the UniTTA benchmark", one row per
(dataset, method, setting). Columns and the two quirks of the source tables are described in docs/analysis.md
("The paper's tables"). ``load_mariodoebler_table`` gives a second anchor, the other TTA benchmark's published
errors (``unitta.paper.mariodoebler``).
"""

from __future__ import annotations

from importlib import resources

import polars as pl

from unitta.data.records import RECORDS
from unitta.paper.mariodoebler import load_mariodoebler_table

__all__ = ["PAPER_DATASETS", "PAPER_AVG_SETTING", "load_paper_table", "load_mariodoebler_table"]

#: The datasets the paper publishes, with the model each was run on (paper, section 5.1).
PAPER_DATASETS: dict[str, str] = {n: r.paper_table for n, r in RECORDS.items() if r.paper_table}

#: The `setting` value of the paper's own printed "Avg." column (its mean over 24 settings, as printed).
PAPER_AVG_SETTING = "avg24"

_SCHEMA = {"dataset": pl.String, "method": pl.String, "setting": pl.String, "error": pl.Float64, "source": pl.String}


def load_paper_table(dataset: str | None = None, *, include_avg: bool = False) -> pl.DataFrame:
    """The paper's errors (%) as a DataFrame with columns dataset, method, setting, error, source.

    `dataset` ("cifar10-c", "cifar100-c" or "imagenet-c") keeps one dataset; `include_avg` keeps the rows of
    the paper's printed "Avg." column (setting "avg24"), which for a few methods differs from the mean of
    the 24 printed cells.
    """
    with resources.files(__package__).joinpath("paper_tables.csv").open("rb") as fh:
        df = pl.read_csv(fh, schema=_SCHEMA)
    if dataset is not None:
        if dataset not in PAPER_DATASETS:
            raise ValueError(f"the paper has no table for dataset {dataset!r}; choose one of {sorted(PAPER_DATASETS)}")
        df = df.filter(pl.col("dataset") == dataset)
    if not include_avg:
        df = df.filter(pl.col("setting") != PAPER_AVG_SETTING)
    return df

"""Long horizons (docs/long_horizon.md): recurring rounds, reset protocols, the resets count, the ccc sampler, on
real cells of the embedded Fashion-MNIST-C and the embedded ResNet-20."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from unitta.cell import Cell
from unitta.evaluate import evaluate
from unitta.evaluate.horizon import batch_bounds, reset_points
from unitta.schema import ConfigError
from unitta.sweep.config import parse_config

pytestmark = pytest.mark.usefixtures("one_thread")

SMALL = dict(dataset="fmnist-c", n_per_domain=20)


def test_cells_at_the_new_defaults_keep_their_ids():
    # computed on the code before rounds / reset / ccc / curve_points existed (commit bce7cb4)
    assert Cell().cell_id() == "fmnist-c__test__i111__b30060e13390447c"
    tent = Cell(method="tent", setting="nui1", sampler="exact", length=5000)
    assert tent.cell_id() == "fmnist-c__tent__nui1__e3e8c11cafb1fad6"
    assert Cell(rounds=1, reset="none", curve_points=10).cell_id() == Cell().cell_id()
    assert len({Cell(rounds=2).cell_id(), Cell(reset="each_batch").cell_id(), Cell(curve_points=5).cell_id()}) == 3


def test_batches_are_cut_at_rounds_and_domain_changes():
    domains = np.array([0, 0, 0, 1, 1, 2, 2, 2, 2, 2])
    bounds = batch_bounds(10, 2, 4, domains)
    assert bounds.tolist() == [0, 3, 5, 9, 10, 13, 15, 19, 20]
    assert batch_bounds(10, 2, 4).tolist() == [0, 4, 8, 10, 14, 18, 20]
    flags = reset_points(bounds, "each_shift", np.tile(domains, 2))
    assert flags.tolist() == [False, True, True, False, True, True, True, False]  # round 2 starts in domain 0 again
    assert reset_points(bounds, "each_batch", None).tolist() == [False] + [True] * 7


def test_test_with_three_rounds_plays_the_same_stream_three_times():
    one = evaluate(Cell(method="test", batch_size=64, **SMALL))
    three = evaluate(Cell(method="test", batch_size=64, rounds=3, curve_points=6, **SMALL))
    assert three["n_samples"] == 3 * one["n_samples"]
    assert three["round_errors"] == [one["error"]] * 3 and one["round_errors"] == [one["error"]]
    assert len(three["error_curve"]) == 6 and three["resets"] == 0 and three["rounds"] == 3


@pytest.mark.slow
def test_tent_reset_each_shift_starts_every_round_from_the_same_state():
    cell = dict(method="tent", setting="i111", batch_size=16, rounds=2, **SMALL)
    shift = evaluate(Cell(reset="each_shift", **cell))
    assert shift["round_errors"][0] == shift["round_errors"][1]
    assert shift["resets"] == 2 * 15 - 1  # every domain change, the round boundary included
    assert shift["forwards_per_batch"] > 0  # the cost counters survive the resets
    none = evaluate(Cell(reset="none", **cell))
    assert none["round_errors"][0] != none["round_errors"][1] and none["resets"] == 0


def test_episodic_reset_counts_every_batch_but_the_first():
    row = evaluate(Cell(method="tent", setting="i111", batch_size=100, reset="each_batch", **SMALL))
    assert row["resets"] == -(-row["n_samples"] // 100) - 1


def test_rdumb_counts_its_own_resets():
    # the interval lowered so that the stream is short: 60 batches, a reset every 25 adapted batches
    row = evaluate(Cell(method="rdumb", sampler="exact", length=240, batch_size=4,
                        method_kwargs={"reset_every": 25}, **SMALL))
    assert row["resets"] == 2


@pytest.mark.slow
def test_rdumb_resets_after_reset_every_adapted_batches():
    assert Cell(method="rdumb").method_config["reset_every"] == 1000  # RDumb's reference interval
    # at 100 (a cell at the default interval, 1,002 batches, cost 7 s of CPU for the same count)
    row = evaluate(Cell(method="rdumb", sampler="exact", length=204, batch_size=2, method_kwargs={"reset_every": 100},
                        **SMALL))
    assert row["resets"] == 1  # 102 batches: the interval passed once


def test_ccc_stream_keeps_the_source_error_near_the_target():
    row = evaluate(Cell(method="test", sampler="ccc", length=2000, batch_size=100,
                        ccc={"target_error": 50, "transition": 500}))
    # 2,000 images: standard error 1.1 points; the calibration's 500 images: 2.2 points per severity level;
    # together 2.5 points, so 5 points is two standard errors.
    assert abs(row["error"] - 50) < 5
    assert row["n_samples"] == 2000 and len(json.loads(row["ccc_severities"])) >= 2


def test_ccc_streams_are_reproducible_and_generated_lazily():
    from unitta.data.ccc import ccc_images
    from unitta.streams import make_ccc_stream

    labels = np.repeat(np.arange(10), 5)
    images = np.random.default_rng(0).integers(0, 255, size=(50, 32, 32, 3), dtype=np.uint8)
    streams = [make_ccc_stream(labels, "n111", eligible=np.array([2, 5, 11]), num_domains=15, length=300,
                               transition=100, seed=1) for _ in range(2)]
    assert np.array_equal(streams[0].domains, streams[1].domains)
    assert set(np.unique(streams[0].domains)) <= {2, 5, 11}
    source = ccc_images(streams[0], images, {2: 1.5, 5: 0.75, 11: 3.25}, "fmnist-c")
    batch = source.get_batch_uint8(np.arange(40, 60))
    assert np.array_equal(batch[5:], source.get_batch_uint8(np.arange(45, 60)))  # independent of the batch


def test_continuous_severities_match_the_tables_at_integers():
    from unitta.data.corruptions import CONTINUOUS, corrupt, corrupt_at, parameter
    from unitta.data.records import CORRUPTIONS

    images = np.random.default_rng(1).integers(0, 255, size=(4, 32, 32, 3), dtype=np.uint8)
    for name in CONTINUOUS:
        rngs = [np.random.default_rng((0, CORRUPTIONS.index(name), 3, i)) for i in range(4)]
        assert np.array_equal(corrupt_at(images, name, 3.0, rngs), corrupt(images, name, 3))
    assert parameter("gaussian_noise", 0.5) == pytest.approx(0.02)
    assert parameter("contrast", 4.5) == pytest.approx(0.225)


BASE = {"name": "b", "datasets": ["fmnist-c"], "methods": ["test"], "settings": ["i111"]}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"rounds": 0}, "rounds: expected a whole number >= 1, got 0"),
        ({"reset": "always"}, "reset:"),
        ({"ccc": {"target_error": 50}}, "only the ccc sampler takes ccc settings"),
        ({"sampler": "ccc", "ccc": {"target_error": 100}}, "strictly between 0 and 100"),
        ({"sampler": "ccc", "length": 100, "ccc": {"transition": 500}}, "longer than the stream"),
        ({"sampler": "ccc", "settings": ["nui1"]}, "settings are <class corr><class imb>11"),
        ({"sampler": ["exact", "ccc"], "reset": "each_shift"}, "no domain shifts"),
        ({"sampler": "ccc", "factors": {"domain_beta": 2.0}}, "domain_beta: the ccc sampler .* class factors only"),
        ({"sampler": "ccc", "n_per_domain": 20}, "n_per_domain: the ccc sampler"),
    ],
)
def test_bad_long_horizon_keys_are_one_line_errors(extra, message):
    with pytest.raises(ConfigError, match=message) as info:
        parse_config({**BASE, **extra})
    assert "\n" not in str(info.value)


def test_a_cell_refuses_bad_long_horizon_fields():
    with pytest.raises(ValueError, match="rounds: expected a whole number >= 1, got 0"):
        Cell(rounds=0)
    with pytest.raises(ValueError, match="reset: unknown reset 'sometimes'"):
        Cell(reset="sometimes")
    with pytest.raises(ValueError, match="only the ccc sampler"):
        Cell(ccc={"target_error": 50})


def test_older_result_files_read_with_the_new_columns_filled(tmp_path):
    from unitta.results import load_results

    (tmp_path / "cells").mkdir()
    old = pa.table({"cell_id": ["old"], "status": ["ok"], "error": [12.5]})  # a file from before the columns
    pq.write_table(old, tmp_path / "cells" / "old.parquet")
    row = load_results(tmp_path).row(0, named=True)
    assert (row["rounds"], row["reset"], row["curve_points"], row["round_errors"]) == (1, "none", 10, [12.5])
    assert row["resets"] is None

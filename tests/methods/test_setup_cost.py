"""One-off set-up (``TTAMethod.one_off``) is counted apart from the stream: EATA's Fisher estimate, RMT's
prototypes and warm-up, SANTA's prototypes go to ``setup_cost``; ``cost``, the real-time k and
``forwards_per_batch`` cover the stream only (docs/results.md, "Cost")."""

from __future__ import annotations

import math

import pytest
import torch

from tests.methods.fmnist_cnn import grey_shift, source_set
from unitta.evaluate import Cell, evaluate
from unitta.evaluate.realtime import Schedule
from unitta.methods import get_method


@pytest.fixture(scope="module")
def source():
    return source_set(256)


@pytest.fixture(scope="module")
def batches(fmnist_cnn) -> list[torch.Tensor]:
    return list(grey_shift(fmnist_cnn.x[:192], seed=4).split(64))


def test_eata_fisher_is_set_up_not_the_first_batch(fmnist_cnn, source, batches):
    eata = get_method("eata", fmnist_cnn.model, fmnist_cnn.info, source=source, num_source_samples=256)
    assert (eata.setup_cost.forwards, eata.cost.forwards) == (0, 0)  # the Fisher waits for the batch size
    eata(batches[0])
    # 256 source images in batches of 64: 4 forward + 4 backward passes, none of them the batch's
    assert (eata.setup_cost.forwards, eata.setup_cost.backwards) == (4, 4)
    assert eata.cost.forwards == 1 and eata.cost.backwards <= 1
    assert eata.setup_cost.seconds > 0


def test_eata_realtime_k_equals_its_passes_per_batch(fmnist_cnn, source, batches):
    """Under 'passes' every adapted batch costs 1 forward + 2 x (0 or 1) backward: the Fisher is not charged."""
    eata = get_method("eata", fmnist_cnn.model, fmnist_cnn.info, source=source, num_source_samples=256)
    schedule = Schedule("realtime", "passes")
    for x in batches:
        assert schedule.adapts()
        forwards, backwards = eata.cost.forwards, eata.cost.backwards
        eata(x)
        passes = (eata.cost.forwards - forwards) + 2 * (eata.cost.backwards - backwards)
        schedule.adapted(eata.cost.forwards - forwards, eata.cost.backwards - backwards, 0.0)
        assert schedule.ks[-1] == passes <= 3
        while not schedule.adapts():
            schedule.skipped()


def test_rmt_lazy_set_up_is_counted_apart(fmnist_cnn, source, batches):
    rmt = get_method("rmt", fmnist_cnn.model, fmnist_cnn.info, source=source, warmup_samples=128)
    rmt(batches[0])  # prototypes (256 / 64 = 4 encoder passes) and 2 warm-up steps at the test batch size
    prototype_passes, warmup_steps = 4, 128 // 64
    assert rmt.setup_cost.backwards == warmup_steps
    assert rmt.setup_cost.forwards == prototype_passes + 2 * warmup_steps  # student + teacher per step
    one_batch = rmt.cost.forwards
    rmt(batches[1])
    assert rmt.cost.forwards == 2 * one_batch  # the first batch cost what the second did


def test_santa_prototypes_are_set_up(fmnist_cnn, source):
    santa = get_method("santa", fmnist_cnn.model, fmnist_cnn.info, source=source, source_batch_size=100)
    assert santa.setup_cost.forwards == math.ceil(256 / 100) and santa.cost.forwards == 0


def test_one_off_nests_and_restores_the_stream_counters(fmnist_cnn):
    tent = get_method("tent", fmnist_cnn.model, fmnist_cnn.info)
    stream_cost = tent.cost
    with pytest.raises(RuntimeError), tent.one_off():
        with tent.one_off():
            tent.model(fmnist_cnn.x[:8])
        raise RuntimeError("set-up failed")
    assert tent.cost is stream_cost and tent.cost.forwards == 0 and tent.setup_cost.forwards == 1
    tent.reset()
    assert tent.setup_cost.forwards == 0 and tent.setup_cost.seconds > 0  # setup() itself is timed


def test_eata_cell_rows_split_set_up_from_the_stream(one_thread):
    small = dict(dataset="fmnist-c", setting="nu11", n_per_domain=40, batch_size=32, method="eata",
                 method_kwargs={"num_source_samples": 320})
    online = evaluate(Cell(**small))
    assert (online["setup_forwards"], online["setup_backwards"]) == (10, 10)  # 320 source images / 32
    assert online["forwards_per_batch"] == 1.0 and online["setup_time_s"] > 0
    realtime = evaluate(Cell(protocol="realtime", **small))
    assert realtime["realtime_k"] == pytest.approx(realtime["forwards_per_batch"] + 2 * realtime["backwards_per_batch"])
    assert realtime["realtime_k"] <= 3 and realtime["adapted_fraction"] >= 1 / 3


def test_old_result_files_without_set_up_columns_still_read(tmp_path):
    """A cell file written before the set-up columns existed reads beside a new one: its set-up is null."""
    import pyarrow.parquet as pq

    from unitta.results import SCHEMA, cell_path, load_results, write_cell_result

    base = {"status": "ok", "method": "eata", "error": 20.0}
    write_cell_result(tmp_path, {**base, "cell_id": "new", "setup_forwards": 63, "setup_backwards": 63,
                                 "setup_time_s": 1.5})
    write_cell_result(tmp_path, {**base, "cell_id": "old"})
    old = cell_path(tmp_path, "old")
    table = pq.read_table(old)
    pq.write_table(table.drop_columns(["setup_forwards", "setup_backwards", "setup_time_s"]), old)
    assert SCHEMA.field("setup_forwards").type == "int64" and SCHEMA.field("setup_time_s").type == "double"
    df = load_results(tmp_path).sort("cell_id")
    assert df["cell_id"].to_list() == ["new", "old"]
    assert df["setup_forwards"].to_list() == [63, None] and df["setup_time_s"].to_list() == [1.5, None]

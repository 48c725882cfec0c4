"""The real-time protocol (``unitta.evaluate.realtime``), ``TTAMethod.predict`` and the forgetting check, on real cells."""

from __future__ import annotations

import pytest
import torch

from tests.methods.fmnist_cnn import grey_shift
from tests.methods.test_contract import FAST
from unitta.cell import Cell
from unitta.contract import check_source
from unitta.evaluate import evaluate
from unitta.evaluate.realtime import Schedule
from unitta.methods import get_method, list_methods, method_class

SMALL = dict(dataset="fmnist-c", setting="nu11", n_per_domain=40, batch_size=32)


pytestmark = pytest.mark.usefixtures("one_thread")


def test_schedule_with_k_3_adapts_one_batch_in_three():
    schedule = Schedule("realtime", "passes")
    adapted = []
    for _ in range(9):
        if schedule.adapts():
            adapted.append(True)
            schedule.adapted(forwards=1, backwards=1, seconds=0.0)  # TENT: 1 + 2 x 1 = 3 units
        else:
            adapted.append(False)
            schedule.skipped()
    assert adapted == [True, False, False] * 3
    assert schedule.columns() == {
        "protocol": "realtime",
        "realtime_cost": "passes",
        "realtime_k": 3.0,
        "adapted_fraction": 1 / 3,
    }


def test_measured_cost_rounds_up_to_whole_batches():
    schedule = Schedule("realtime", "measured", source_seconds=0.1)
    assert schedule.units(1, 0, 0.1) == 1 and schedule.units(1, 0, 0.25) == 3


def test_test_costs_one_unit_even_when_measured_slower():
    """TEST is the source model: a measured time above the unit is noise, not adaptation work."""
    schedule = Schedule("realtime", "measured", source_seconds=0.1, never_adapts=True)
    assert schedule.units(1, 0, 0.13) == 1
    row = evaluate(Cell(method="test", protocol="realtime", cost="measured", **SMALL))
    assert row["realtime_k"] == 1.0 and row["adapted_fraction"] == 1.0


def test_realtime_tent_cell_records_k_3_and_adapts_a_third():
    row = evaluate(Cell(method="tent", protocol="realtime", **SMALL))
    batches = -(-row["n_samples"] // SMALL["batch_size"])
    assert row["protocol"] == "realtime" and row["realtime_k"] == 3.0
    assert row["adapted_fraction"] == pytest.approx(len(range(0, batches, 3)) / batches)
    online = evaluate(Cell(method="tent", **SMALL))
    assert online["protocol"] == "online" and online["adapted_fraction"] == 1.0 and online["realtime_k"] is None
    assert row["error"] != online["error"]  # skipping two batches in three changes TENT's trajectory


@pytest.mark.parametrize("method", ["test", "bn"])
def test_k_1_methods_give_the_online_rows(method):
    online, realtime = (
        evaluate(Cell(method=method, **SMALL)),
        evaluate(Cell(method=method, protocol="realtime", **SMALL)),
    )
    assert realtime["realtime_k"] == 1.0 and realtime["adapted_fraction"] == 1.0
    for key in ("error", "balanced_error", "worst_class_error", "ece", "nll", "domain_errors", "error_curve"):
        assert realtime[key] == online[key], key


@pytest.mark.parametrize("name", list_methods())
def test_predict_changes_no_state(name, fmnist_cnn):
    """Two identical methods see the same batches; one also scores a skipped batch with ``predict``.
    Their states and their next outputs must stay identical (parameters, buffers, memories, random streams)."""
    x = fmnist_cnn.x
    batches = [grey_shift(x[16 * i : 16 * (i + 1)], seed=1) for i in range(3)]
    source = check_source(fmnist_cnn.model, x[:128]) if method_class(name).needs_source else None
    a, b = (
        get_method(name, fmnist_cnn.model, fmnist_cnn.info, seed=3, source=source, **FAST.get(name, {}))
        for _ in range(2)
    )
    a(batches[0]), b(batches[0])
    scores = a.predict(batches[1])
    assert scores.shape == (16, fmnist_cnn.info.num_classes) and torch.isfinite(scores).all()
    if a.scores == "probabilities":
        assert torch.allclose(scores.sum(dim=1), torch.ones(16), atol=1e-4)
    assert (a.cost.forwards, a.cost.backwards, a.cost.batches) == (b.cost.forwards, b.cost.backwards, b.cost.batches)
    state_a, state_b = a.model.state_dict(), b.model.state_dict()
    assert all(torch.equal(state_a[k], state_b[k]) for k in state_b), f"{name}: predict changed the model"
    out_a, out_b = a(batches[2]), b(batches[2])
    assert torch.equal(out_a, out_b), f"{name}: predict changed what the method does next"
    if a.scores == "probabilities":  # the declared kind of scores is what forward returns
        assert (out_a >= 0).all() and torch.allclose(out_a.sum(dim=1), torch.ones(16), atol=1e-4), name


def test_forgetting_scores_the_adapted_model_on_clean_images():
    row = evaluate(Cell(method="tent", forgetting=True, **SMALL))
    assert 0 <= row["source_error_before"] <= 30  # the source model on clean Fashion-MNIST (about 9 % error)
    assert row["source_error_after"] is not None and row["source_error_after"] != row["source_error_before"]
    plain = evaluate(Cell(method="tent", **SMALL))
    assert plain["source_error_before"] is None and plain["error"] == row["error"]  # no extra adaptation
    test = evaluate(Cell(method="test", forgetting=True, **SMALL))
    assert test["source_error_after"] == test["source_error_before"]  # TEST never changes


def test_new_fields_keep_old_cell_ids():
    assert Cell(method="tent").cell_id() == Cell(method="tent", protocol="online", cost="passes").cell_id()
    assert Cell(method="tent").cell_id() != Cell(method="tent", protocol="realtime").cell_id()

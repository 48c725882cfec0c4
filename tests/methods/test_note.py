"""NOTE: cost and update cadence, the optimiser, and the prediction-balanced memory on a label-sorted stream."""

from __future__ import annotations

import pytest
import torch

from tests.methods.fmnist_cnn import grey_shift
from unitta.methods import get_method


def test_cost_one_forward_per_batch_plus_one_per_update(fmnist_cnn):
    stream = grey_shift(fmnist_cnn.x[:32], seed=1)
    note = get_method("note", fmnist_cnn.model, fmnist_cnn.info, update_every=16)
    for i in range(4):
        note(stream[8 * i : 8 * (i + 1)])
    assert (note.cost.forwards, note.cost.backwards, note.updates) == (6, 2, 2)


@pytest.mark.parametrize("name", ["note", "rotta"])  # both memory-bank methods update every N samples
def test_update_cadence_counts_samples_not_batches(fmnist_cnn, name):
    stream = grey_shift(fmnist_cnn.x[:40], seed=1)
    ones = get_method(name, fmnist_cnn.model, fmnist_cnn.info, update_every=8, memory_size=16)
    for i in range(40):
        ones(stream[i : i + 1])
    thirteens = get_method(name, fmnist_cnn.model, fmnist_cnn.info, update_every=8, memory_size=16)
    for start in (0, 13, 26, 39):
        thirteens(stream[start : min(start + 13, 40)])
    assert ones.updates == thirteens.updates == 5


def test_optimiser_and_bad_hyper_parameters(fmnist_cnn):
    note = get_method("note", fmnist_cnn.model, fmnist_cnn.info)
    assert isinstance(note.optimizer, torch.optim.Adam) and note.cfg.lr == 1e-4
    with pytest.raises(ValueError, match="bn_momentum"):
        get_method("note", fmnist_cnn.model, fmnist_cnn.info, bn_momentum=-0.1)


def test_note_pbrs_keeps_its_class_balance_on_a_label_sorted_stream(fmnist_cnn):
    xs, y = grey_shift(fmnist_cnn.x[:2000], seed=5), fmnist_cnn.y[:2000]
    order = torch.argsort(y, stable=True)  # fully label-correlated (non-i.i.d.)
    note = get_method("note", fmnist_cnn.model, fmnist_cnn.info)
    for i in range(0, 2000, 64):
        note(xs[order[i : i + 64]])
    counts, seen = note.memory.class_counts(), note.memory.seen
    assert len(note.memory) == 64
    frequent = [c for c in range(10) if seen[c] >= 64]
    assert len(frequent) >= 3
    assert max(counts[c] for c in frequent) - min(counts[c] for c in frequent) <= 1
    # a rarely predicted class is never the largest, so it keeps every item it had
    for c in range(10):
        if seen[c] < min(counts[f] for f in frequent):
            assert counts[c] == seen[c]

"""The source probe (unitta/evaluate/source_probe.py): computed once per (weights, images) in a process on the CPU,
and never reused for another model or other images."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from unitta.cell import Cell
from unitta.evaluate import evaluate
from unitta.evaluate import source_probe as probes
from unitta.evaluate.inputs import load_inputs


class Counting(torch.nn.Module):
    """A model that counts the images it is called on."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model
        self.images = 0

    def forward(self, x):
        self.images += x.shape[0]
        return self.model(x)


@pytest.fixture
def inputs():
    cell = Cell(dataset="fmnist-c", method="test", setting="i1i1", n_per_domain=20, S=4)
    loaded = load_inputs(cell, torch.device("cpu"))
    probes._kept.clear()
    yield cell, loaded
    probes._kept.clear()


def _probe(model, cell, loaded):
    return probes.probe_source(model, loaded.dataset, loaded.stream, torch.device("cpu"), loaded.info.num_classes,
                               cell.batch_size, cell.precision)


def test_a_second_probe_of_the_same_weights_and_images_runs_no_forward(inputs):
    cell, loaded = inputs
    first, second = Counting(copy.deepcopy(loaded.model)), Counting(copy.deepcopy(loaded.model))  # equal weights
    expected = min(probes.SOURCE_PROBE_IMAGES, len(loaded.stream.indices))
    assert _probe(first, cell, loaded) == _probe(second, cell, loaded)
    assert (first.images, second.images) == (expected, 0)


def test_one_changed_weight_or_image_is_another_probe(inputs):
    cell, loaded = inputs
    model = Counting(copy.deepcopy(loaded.model))
    _probe(model, cell, loaded)
    with torch.no_grad():
        next(model.parameters()).view(-1)[0] += 1e-3
    _probe(model, cell, loaded)
    assert model.images == 2 * min(probes.SOURCE_PROBE_IMAGES, len(loaded.stream.indices))
    other = dataclasses.replace(cell, seed=426)
    other_inputs = load_inputs(other, torch.device("cpu"))
    fresh = Counting(copy.deepcopy(loaded.model))
    _probe(fresh, other, other_inputs)
    assert fresh.images == min(probes.SOURCE_PROBE_IMAGES, len(other_inputs.stream.indices))  # other images


def test_cells_of_two_methods_on_one_stream_report_the_probe_of_a_fresh_computation(inputs):
    """Whatever the cache holds, a cell's ``source_probe_error`` is the one it would compute alone."""
    cell, _ = inputs
    shared = [evaluate(dataclasses.replace(cell, method=m))["source_probe_error"] for m in ("test", "bn")]
    probes._kept.clear()
    alone = evaluate(dataclasses.replace(cell, method="bn"))["source_probe_error"]
    assert shared == [alone, alone]

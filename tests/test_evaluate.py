"""evaluate(Cell): one cell end to end on a small synthetic multi-domain set and a tiny CNN.

The data and model are built in memory, so the test needs neither the Fashion-MNIST-C cache nor the
embedded checkpoint; the stream comes from the real official sampler.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from unitta.cell import Cell
from unitta.data.base import CorruptedDataset
from unitta.evaluate import evaluate
from unitta.models.info import ModelInfo
from unitta.streams import make_stream

torch.set_num_threads(1)

D, K, PER_STATE = 15, 10, 8  # 15 domains x 10 classes x 8 images; n111 with S=6: 900 images


class SyntheticSet(CorruptedDataset):
    """Class prototypes plus noise; domain d shifts the brightness and scales the contrast."""

    def get_batch(self, indices: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(self.meta["images"][indices])


def synthetic_dataset(seed: int = 0) -> SyntheticSet:
    rng = np.random.default_rng(seed)
    prototypes = rng.uniform(0.2, 0.8, size=(K, 3, 8, 8)).astype(np.float32)
    domains = np.repeat(np.arange(D), K * PER_STATE)
    labels = np.tile(np.repeat(np.arange(K), PER_STATE), D)
    noise = rng.normal(0, 0.1, size=(len(labels), 3, 8, 8)).astype(np.float32)
    images = prototypes[labels] * (1 - 0.04 * domains[:, None, None, None]) + 0.02 * domains[:, None, None, None] + noise
    names = [f"d{d}" for d in range(D)]
    return SyntheticSet("synthetic", labels, domains, names, K, meta={"images": images.astype(np.float32)})


class TinyNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, K)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=gen) * 0.5)
            self.bn.running_var.fill_(0.5)
            self.bn2.running_var.fill_(0.5)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x)))
        x = torch.relu(self.bn2(self.conv2(x)))
        return self.fc(x.mean(dim=(2, 3)))


@pytest.fixture(scope="module")
def setup():
    data = synthetic_dataset()
    model = TinyNet().eval()
    info = ModelInfo("tiny", "cifar10", "fc", ("bn", "bn2"), "bn2", K, 8)
    return data, (model, info)


def cell(**kw) -> Cell:
    base = dict(dataset="fmnist-c", method="test", setting="n111", S=6, batch_size=16, seed=425)
    base.update(kw)
    return Cell(**base)


def test_row_is_the_micro_error_over_the_stream(setup):
    data, (model, info) = setup
    c = cell()
    row = evaluate(c, dataset=data, model_and_info=(model, info))
    stream = make_stream(data.labels, data.domains, "n111", dataset="fmnist-c", S=6, seed=425)
    with torch.no_grad():
        pred = model(data.get_batch(stream.indices)).argmax(1).numpy()
    correct = pred == data.labels[stream.indices]
    assert row["n_samples"] == len(stream.indices)
    assert row["error"] == pytest.approx(100 * (1 - correct.mean()))
    assert sum(d["n"] for d in row["per_domain"]) == sum(k["n"] for k in row["per_class"]) == row["n_samples"]
    assert row["forwards_per_batch"] == 1 and row["domains_discovered"] is None
    assert row["images_per_s"] > 0 and row["peak_memory_mb"] > 0


@pytest.mark.parametrize("method", ["bn", "balanced_bn", "cofa", "bdn", "unitta"])
def test_same_cell_gives_identical_numbers_and_batches_of_one_are_fed(setup, method):
    data, model_and_info = setup
    n = len(make_stream(data.labels, data.domains, "n111", dataset="fmnist-c", S=6, seed=425).indices)
    batch_size = next((b for b in range(8, 64) if n % b == 1), n - 1)  # the last batch has one image
    assert n % batch_size == 1
    c = cell(method=method, batch_size=batch_size)
    first = evaluate(c, dataset=data, model_and_info=model_and_info)
    second = evaluate(c, dataset=data, model_and_info=model_and_info)
    for key in ("error", "n_correct", "per_domain", "per_class", "domains_discovered", "config_hash"):
        assert first[key] == second[key], key
    assert first["n_samples"] == n  # every image scored, the single last one included
    if method in ("bdn", "unitta"):
        assert first["domains_discovered"] >= 1 and first["forwards_per_batch"] == 3


@pytest.mark.parametrize(("sampler", "setting", "delta"), [("sorted", "1111", None), ("dirichlet", "n1i1", 0.1)])
def test_protocol_samplers_score_every_image_once(setup, sampler, setting, delta):
    data, model_and_info = setup
    c = cell(sampler=sampler, setting=setting, S=None, delta=delta, method="bn")
    row = evaluate(c, dataset=data, model_and_info=model_and_info)
    stream = make_stream(data.labels, data.domains, setting, sampler=sampler, seed=425, delta=delta)
    assert row["n_samples"] == len(data.labels) == len(stream.indices) and row["images_reused"] == 0
    assert row["sampler"] == sampler and row["delta"] == (0.01 if delta is None and sampler == "dirichlet" else delta)
    assert row["setting"] == setting and row["domain_alpha"] is None


def test_a_source_model_at_chance_is_a_warning_in_the_row_and_the_log(setup, capsys):
    """TinyNet's random weights are at chance (90 % for 10 classes) on the synthetic stream: the row's
    `warnings` says so, its `source_probe_error` is the source's error on 512 positions spread over the stream."""
    data, (model, info) = setup
    row = evaluate(cell(method="bn"), dataset=data, model_and_info=(model, info))
    assert row["source_probe_error"] >= 85.0 and "at chance" in row["warnings"]
    assert "warning: the source model is at chance" in capsys.readouterr().out


def test_a_trained_model_gets_no_warning(embedded_model):
    row = evaluate(Cell(dataset="fmnist-c", method="test", setting="i111", n_per_domain=20, S=4, seed=425),
                   model_and_info=embedded_model)
    assert row["warnings"] is None and row["source_probe_error"] < 70.0

"""GTTA: the source step trains on source images mixed with their most similar test images and the source labels,
the pseudo-label filter follows the running confidence, two steps per batch; one cell."""

from __future__ import annotations

import math

import pytest
import torch
from torch.utils.data import TensorDataset

from tests.methods.fmnist_cnn import grey_shift, run_stream, source_set
from unitta.methods import get_method
from unitta.methods.parts.source_batches import SourceBatches

# a learning rate at which three batches visibly change the predictions (the default 1e-5 barely moves them)
FAST_LR = {"lr": 1e-3}


@pytest.fixture(scope="module")
def stream(fmnist_cnn) -> torch.Tensor:
    return grey_shift(fmnist_cnn.x[:96], seed=5)


@pytest.fixture(scope="module")
def source() -> TensorDataset:
    return source_set(256)


def test_source_step_uses_the_source_images_and_labels(fmnist_cnn, stream, source):
    model, info = fmnist_cnn.model, fmnist_cnn.info
    run = lambda src: run_stream(get_method("gtta", model, info, source=src, **FAST_LR), stream, 32)  # noqa: E731
    images, labels = source.tensors
    base = run(source)
    assert not torch.equal(base, run(TensorDataset(images, (labels + 3) % 10)))  # wrong labels, other result
    assert not torch.equal(base, run(TensorDataset(images.flip(-1), labels)))  # other images, other result


def test_mixup_mixes_each_source_image_with_its_most_similar_test_image(fmnist_cnn, stream, source):
    method = get_method("gtta", fmnist_cnn.model, fmnist_cnn.info, source=source, source_batch_size=64)
    x = stream[:32]
    with torch.no_grad():
        logits = method.model(x)
    generator_state = method.generator.get_state()
    mixed, labels = method._mixup(x, logits)
    method.generator.set_state(generator_state)
    images, expected_labels = next(SourceBatches(source, 64, method.generator, method.device))
    images, expected_labels = images[:32], expected_labels[:32]  # truncated to the test batch, as the reference
    with torch.no_grad():
        nearest = (method.model(images).softmax(1) @ logits.softmax(1).T).argmax(dim=1)
    lam = method.cfg.lambda_mixup
    assert math.isclose(lam, 1 / 3)
    torch.testing.assert_close(mixed, lam * x[nearest] + (1 - lam) * images)
    assert torch.equal(labels, expected_labels)


def test_pseudo_labels_keep_samples_above_the_root_of_the_running_confidence(fmnist_cnn, source):
    method = get_method("gtta", fmnist_cnn.model, fmnist_cnn.info, source=source)
    logits = torch.log(torch.tensor([[0.99, 0.01], [0.6, 0.4], [0.05, 0.95]]))
    labels = method._pseudo_labels(logits)
    average = 0.9 * 0.9 + 0.1 * (0.99 + 0.6 + 0.95) / 3  # starts at 0.9, momentum 0.9
    assert math.isclose(float(method.avg_confidence), average, rel_tol=1e-6)
    threshold = math.sqrt(average)  # about 0.94: 0.99 and 0.95 are kept, 0.6 ignored
    assert labels.tolist() == [0, -1, 1] and 0.95 > threshold > 0.6


def test_two_steps_per_batch_and_the_output_comes_between_them(fmnist_cnn, stream, source):
    method = get_method("gtta", fmnist_cnn.model, fmnist_cnn.info, source=source, **FAST_LR)
    out = method(stream[:32])
    assert (method.cost.backwards, method.cost.forwards) == (2, 4)  # z, source pass, mixed pass, z'
    with torch.no_grad():
        after = method.model(stream[:32])
    assert not torch.equal(out, after)  # the target step came after the returned prediction


def test_fmnist_c_cell(fmnist_cell):
    fmnist_cell("gtta", S=2)

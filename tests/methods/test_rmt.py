"""RMT: source replay uses the source images and labels, the teacher is an EMA of the student, prototypes are the
source class means, the warm-up trains on source before the stream, the output is student + teacher; one cell."""

from __future__ import annotations

import copy

import pytest
import torch
from torch.utils.data import TensorDataset

from tests.methods.fmnist_cnn import grey_shift, run_stream, source_set
from unitta.methods import get_method
from unitta.methods.norm.batch_stats import BatchStatsNorm
from unitta.nn.batchnorm import replace_batchnorms

# no warm-up unless a test asks for one: the tests look at one mechanism at a time
QUICK = {"warmup_samples": 0, "source_batch_size": 32}


@pytest.fixture(scope="module")
def stream(fmnist_cnn) -> torch.Tensor:
    return grey_shift(fmnist_cnn.x[:128], seed=3)


@pytest.fixture(scope="module")
def source() -> TensorDataset:
    return source_set(256)


def _relabelled(source: TensorDataset, shift: int) -> TensorDataset:
    images, labels = source.tensors
    return TensorDataset(images, (labels + shift) % 10)


def test_replay_trains_on_the_source_images_and_labels(fmnist_cnn, stream, source):
    model, info = fmnist_cnn.model, fmnist_cnn.info
    kw = dict(QUICK, lambda_cont=0.0)  # prototypes (which use the labels) then play no part
    run = lambda src, **extra: run_stream(get_method("rmt", model, info, source=src, **kw, **extra), stream, 32)  # noqa: E731
    base = run(source)
    assert not torch.equal(base, run(_relabelled(source, 3)))  # wrong labels, other result
    other_images = TensorDataset(source.tensors[0].flip(-1), source.tensors[1])
    assert not torch.equal(base, run(other_images))  # other images, other result
    # without replay the source labels do not matter
    assert torch.equal(run(source, lambda_ce_src=0.0), run(_relabelled(source, 3), lambda_ce_src=0.0))


def test_teacher_is_an_ema_of_the_student(fmnist_cnn, stream, source):
    method = get_method("rmt", fmnist_cnn.model, fmnist_cnn.info, source=source, **QUICK)
    before = {k: p.detach().clone() for k, p in method.model.named_parameters()}
    method(stream[:32])
    m = method.cfg.teacher_momentum
    teacher = dict(method.teacher.named_parameters())
    moved = 0
    for name, student in method.model.named_parameters():
        expected = m * before[name] + (1 - m) * student.detach()
        torch.testing.assert_close(teacher[name], expected, rtol=0, atol=1e-6)
        moved += not torch.equal(student, before[name])
    assert moved > 0  # every weight adapts (not only the normalisation layers)
    assert not any(p.requires_grad for p in method.teacher.parameters())


def test_first_output_is_student_plus_teacher_before_the_step(fmnist_cnn, stream, source):
    method = get_method("rmt", fmnist_cnn.model, fmnist_cnn.info, source=source, **QUICK)
    reference = _batch_stats_model(fmnist_cnn.model)
    with torch.no_grad():
        expected = 2 * reference(stream[:32])  # teacher = student = source model before any step
    torch.testing.assert_close(method(stream[:32]), expected, rtol=1e-5, atol=1e-5)


def test_prototypes_are_the_source_class_means(fmnist_cnn, source):
    method = get_method(
        "rmt", fmnist_cnn.model, fmnist_cnn.info, source=source, warmup_samples=0, source_batch_size=len(source)
    )  # one batch: batch statistics of the whole set
    images, labels = source.tensors
    reference = _batch_stats_model(fmnist_cnn.model)
    reference.fc = torch.nn.Identity()
    with torch.no_grad():
        features = reference(images)
    for c in range(10):
        torch.testing.assert_close(method.prototypes[c], features[labels == c].mean(dim=0), rtol=1e-4, atol=1e-5)
    assert method.projector[0].in_features == features.shape[1]


def test_class_without_source_images_is_never_the_nearest_prototype(fmnist_cnn, stream, source):
    images, labels = source.tensors
    keep = labels != 0
    method = get_method(
        "rmt", fmnist_cnn.model, fmnist_cnn.info, source=TensorDataset(images[keep], labels[keep]), **QUICK
    )
    assert not method.present[0] and method.present[1:].all()
    assert torch.isfinite(run_stream(method, stream[:64], 32)).all()


def test_warm_up_trains_on_source_before_the_stream_and_restores_the_learning_rate(fmnist_cnn, source):
    model, info = fmnist_cnn.model, fmnist_cnn.info
    cold = get_method("rmt", model, info, source=source, warmup_samples=0, source_batch_size=32)
    warm = get_method("rmt", model, info, source=source, warmup_samples=96, source_batch_size=32)  # 3 steps
    cold_state, warm_state = cold.model.state_dict(), warm.model.state_dict()
    assert any(not torch.equal(cold_state[k], warm_state[k]) for k in cold_state)
    assert all(group["lr"] == warm.cfg.lr for group in warm.optimizer.param_groups)
    assert (warm.cost.forwards, warm.cost.backwards) == (0, 0)  # the set-up is not the stream's cost
    warm.reset()  # replays the warm-up exactly
    assert all(torch.equal(warm.model.state_dict()[k], v) for k, v in warm_state.items())


def test_source_batch_size_defaults_to_the_first_test_batch(fmnist_cnn, stream, source):
    method = get_method("rmt", fmnist_cnn.model, fmnist_cnn.info, source=source, warmup_samples=48)
    assert method.prototypes is None  # nothing known about the batch size yet
    method(stream[:24])
    assert method.replay.batch_size == 24 and method.prototypes is not None


def test_presets_and_bad_hyper_parameters(fmnist_cnn, source):
    model, info = fmnist_cnn.model, fmnist_cnn.info
    cfg = get_method("rmt", model, info, dataset="imagenet-c", source=source, **QUICK).cfg
    assert (cfg.optimizer, cfg.lr) == ("sgd", 0.01)
    with pytest.raises(ValueError, match="teacher_momentum"):
        get_method("rmt", model, info, source=source, teacher_momentum=1.5)
    with pytest.raises(ValueError, match="needs labelled source images"):
        get_method("rmt", model, info)


def test_fmnist_c_cell(fmnist_cell):
    fmnist_cell("rmt", S=2, warmup_samples=64, prototype_samples=256)


def _batch_stats_model(model):
    reference = copy.deepcopy(model)
    replace_batchnorms(reference, lambda name, bn: BatchStatsNorm(bn))
    return reference.eval()

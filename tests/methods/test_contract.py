"""The method contract (``unitta/contract/__init__.py``) for every registered method.

On the embedded ResNet-20 and Fashion-MNIST-C images: finite scores at B = 64 and B = 1, ``reset()``
restores the source exactly, the source model passed in is never modified, a fixed seed is deterministic,
the config check refuses an unknown name and a wrong type, and the cost counts forwards and backwards (the
"never adapts" and host-sync warnings pass; tests/test_plugins.py checks that they warn). The run that serves
finite outputs, cost, adapts, host sync and source unchanged takes the branches a GPU takes, where no tensor may be
made from host data after the first batch; reset, determinism and bf16 take the CPU's.
"""

from __future__ import annotations

import pkgutil

import pytest
import torch

import unitta.methods
from tests.methods.fmnist_cnn import error, grey_shift, shift
from unitta.contract import CHECKS, check_source, run_checks
from unitta.methods import build_config, get_method, list_methods, method_class
from unitta.methods.parts.registry import builtin_modules

# Short runs: fewer augmented teacher passes for CoTTA, and memory updates every 16 samples for RoTTA and
# NOTE so that they adapt within the checks' two batches of 8 (what is checked does not depend on these values).
FAST = {
    "cotta": {"n_augmentations": 2},
    "rotta": {"update_every": 16, "memory_size": 16},
    "note": {"update_every": 16, "memory_size": 16},
    "memo": {"n_augmentations": 2},  # 32 views per image x 64 images would dominate the suite's time
    # source set-up on two source batches instead of 50,000 samples; kNN pseudo-labels from the second batch
    "rmt": {"warmup_samples": 16},
    "adacontrast": {"queue_size": 32, "knn_after": 8},
    "ttaug": {"n_augmentations": 2},  # as MEMO: 32 views per image
    "tea": {"sgld_steps": 1, "buffer_size": 16},  # 20 SGLD steps per batch; a buffer of 10,000 random images
}


# Non-default variants whose code paths differ (other optimiser, loss, augmentation size, update rule).
VARIANTS = {
    "tent-sgd": ("tent", {"optimizer": "sgd", "lr": 2.5e-4}),
    "cotta-imagenet-style": ("cotta", {"loss": "symmetric", "aug_size": 16, "anchor_threshold": 1.0}),
    "robust_bn-reference": ("robust_bn", {"variant": "reference"}),
    "note-ut": ("note", {"update_every": 0, "optimizer": "sgd", "memory_size": 16}),
    "roid-logits-prior": ("roid", {"prior_on": "logits"}),
}
# Methods whose model state never changes (they adapt outputs only, or not at all).
STATELESS = {"test", "bn", "bn_alpha", "lame", "cofa", "cofa_nofilter", "ttaug"}


# The checks that one run of a method on a stream serves (``check_stream``): on the branches a GPU takes
# (UNITTA_DEVICE_PATHS=cuda, docs/benchmarks.md "Device paths"), where a tensor made from host data after the first
# batch is a host-to-device copy; the others (two builds for reset and determinism, bf16, the config check) on the
# CPU's own branches, so that both kinds of branches run under the contract.
ON_THE_CUDA_PATHS = ("finite_outputs", "cost", "adapts", "host_sync", "source_unchanged")
ON_THE_CPU_PATHS = tuple(check for check in CHECKS if check not in ON_THE_CUDA_PATHS)


def _assert_contract(name, model, info, images, monkeypatch, **overrides):
    overrides = {**FAST.get(name, {}), **overrides}
    with monkeypatch.context() as patch:
        patch.setenv("UNITTA_DEVICE_PATHS", "cuda")  # read when the method is built
        streamed = run_checks(name, model, info, images, checks=ON_THE_CUDA_PATHS, **overrides)  # 1 build
    results = streamed + run_checks(name, model, info, images, checks=ON_THE_CPU_PATHS, **overrides)  # 3 builds
    assert sorted(r.check for r in results) == sorted(CHECKS)
    failed = [f"{r.check}: {r.reason}" for r in results if not r.passed]
    assert not failed, f"{name}: " + "; ".join(failed)
    # the host-sync warning, required here: constants once per cell, bookkeeping on the device or staged
    [host] = [r for r in results if r.check == "host_sync"]
    assert "made from host data" not in (host.reason or ""), f"{name}: {host.reason}"


@pytest.mark.parametrize("name", list_methods())
def test_method_satisfies_the_contract(name, embedded_model, fmnist_c_images, monkeypatch):
    model, info = embedded_model
    _assert_contract(name, model, info, fmnist_c_images, monkeypatch)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_variant_satisfies_the_contract(variant, embedded_model, fmnist_c_images, monkeypatch):
    name, overrides = VARIANTS[variant]
    model, info = embedded_model
    _assert_contract(name, model, info, fmnist_c_images, monkeypatch, **overrides)


@pytest.mark.parametrize("name", list_methods())
def test_every_dataset_preset_passes_the_config_check(name):
    for dataset in ("cifar10", "cifar100", "imagenet", "fmnist-c"):
        build_config(method_class(name), dataset)


@pytest.mark.parametrize("name", sorted(set(list_methods()) - STATELESS))
def test_adapting_methods_change_their_model_state(name, fmnist_cnn):
    source = check_source(fmnist_cnn.model, fmnist_cnn.x[:128]) if method_class(name).needs_source else None
    method = get_method(name, fmnist_cnn.model, fmnist_cnn.info, source=source, **FAST.get(name, {}))
    initial = {k: v.clone() for k, v in method.model.state_dict().items()}
    for i in range(4):
        method(grey_shift(fmnist_cnn.x[16 * i : 16 * (i + 1)], seed=1))
    adapted = method.model.state_dict()
    assert any(not torch.equal(adapted[k], v) for k, v in initial.items()), f"{name}: nothing adapted"


def test_small_cnn_is_a_real_classifier(fmnist_cnn):
    """The source model of the behaviour tests classifies clean images and suffers from the shifts."""
    x, y = fmnist_cnn.x[:500], fmnist_cnn.y[:500]
    with torch.no_grad():
        clean = error(fmnist_cnn.model(x), y)
        shifted = error(fmnist_cnn.model(shift(x)), y)
        grey = error(fmnist_cnn.model(grey_shift(x)), y)
    assert clean < 0.25  # a few seconds of training on 6k images
    assert shifted > clean + 0.1 and grey > clean + 0.1  # the shifts hurt the source model


def test_every_method_module_is_a_builtin():
    """Every module directly in unitta/methods/ registers a method, and the registry finds each of them."""
    modules = [m.name for m in pkgutil.iter_modules(unitta.methods.__path__) if not m.ispkg and m.name[0] != "_"]
    not_methods = []
    for name in modules:
        with open(unitta.methods.__path__[0] + f"/{name}.py") as f:
            if "@register_method(" not in f.read():
                not_methods.append(name)
    assert not not_methods, f"modules in unitta/methods/ that register no method: {not_methods}"
    registering = {f"unitta.methods.{name}" for name in modules}
    assert registering == set(builtin_modules())

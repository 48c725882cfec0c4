"""Search spaces (``unitta/search_dimensions.py``, ``unitta/methods/parts/search_space.py``): the dimensions, every method's declared space, ``check_space``,
``unitta methods space``, and the corner points of every space building and running on real images."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from unitta.contract import check_source
from unitta.contract.command import main as methods_main
from unitta.methods import (
    Choice,
    IntUniform,
    LogUniform,
    Uniform,
    build_config,
    check_space,
    get_method,
    list_methods,
    method_class,
    method_space,
)
from unitta.methods.parts.registry import builtin_modules
from unitta.search_dimensions import DIM_TYPES

# The built-in methods with nothing to search: no numeric hyper-parameter at all (``test`` and ``bn`` have no
# Config field, COFA only its filter switch, whose two values are two registered methods). Every other built-in
# method declares a space (docs/methods.md, "Search spaces").
PARAMETER_FREE = {"test", "bn", "cofa", "cofa_nofilter"}
BUILTINS = [name for name in list_methods() if method_class(name).__module__ in builtin_modules()]
SEARCHED = [name for name in BUILTINS if name not in PARAMETER_FREE]
FAMILIES = (None, "cifar100", "imagenet")


# ---------------------------------------------------------------------- dimensions
def test_log_uniform_grid_is_log_spaced_with_exact_ends():
    dim = LogUniform(1e-4, 1e-2)
    assert dim.grid(3) == [1e-4, 1e-3, 1e-2]  # the example grid, exactly
    points = dim.grid(7)
    assert points[0] == 1e-4 and points[-1] == 1e-2 and len(points) == 7
    ratios = np.diff(np.log(points))
    assert np.allclose(ratios, ratios[0], rtol=1e-8)
    assert dim.corners() == [1e-4, 1e-2] and dim.grid(1) == [1e-3]
    assert dim.contains(5e-3) and not dim.contains(0.02) and not dim.contains(float("nan"))
    assert dim.describe() == "log-uniform [0.0001, 0.01]"


def test_uniform_and_int_uniform_grids():
    assert Uniform(0.0, 1.0).grid(5) == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert Uniform(0.1, 0.3).grid(3) == [0.1, 0.2, 0.3]  # rounded: 0.2, not 0.20000000000000004
    assert IntUniform(1, 4).grid(10) == [1, 2, 3, 4]  # deduplicated
    assert IntUniform(16, 128).grid(3) == [16, 72, 128]
    assert IntUniform(1, 10).contains(3) and not IntUniform(1, 10).contains(3.5)
    assert not IntUniform(1, 10).contains(True)
    assert IntUniform(1, 10).describe() == "integer [1, 10]"


def test_choice_lists_every_value_whatever_n():
    dim = Choice(("knn", "rbf", "linear"))
    assert dim.grid(1) == dim.grid(10) == ["knn", "rbf", "linear"]
    assert dim.corners() == ["knn", "linear"]
    assert dim.contains("rbf") and not dim.contains("cosine")
    assert Choice((1, 2)).contains(2.0) and not Choice((1, 2)).contains(True)
    assert Choice([True, False]).values == (True, False)


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: LogUniform(0.0, 1.0), "must be > 0"),
        (lambda: LogUniform(1e-2, 1e-4), "must be < high"),
        (lambda: Uniform(0.5, 0.5), "must be < high"),
        (lambda: Uniform(0.0, float("inf")), "finite number"),
        (lambda: IntUniform(1, 2.5), "an integer"),
        (lambda: Choice(()), "must not be empty"),
        (lambda: Choice("abc"), "tuple of values"),
        (lambda: Uniform(0, 1).grid(0), "n=0"),
    ],
)
def test_bad_dimensions_are_one_line_errors(build, message):
    with pytest.raises(ValueError, match=message) as info:
        build()
    assert "\n" not in str(info.value)


# ---------------------------------------------------------------------- declared spaces
def test_exactly_the_parameter_free_methods_have_no_space():
    missing = [name for name in SEARCHED if not method_space(name)]
    assert not missing, f"methods with tunable hyper-parameters but no space: {missing}"
    assert all(not method_space(name) for name in PARAMETER_FREE)
    # the rule behind the list: a method has a space iff its Config has a numeric field
    for name in BUILTINS:
        numeric = [f.name for f in dataclasses.fields(method_class(name).Config)
                   if f.type in ("float", "int", float, int)]
        assert bool(numeric) == (name not in PARAMETER_FREE), (name, numeric)


@pytest.mark.parametrize("name", SEARCHED)
def test_every_point_of_a_space_passes_the_config_checks(name):
    """Keys are Config fields, dimensions are Dims, the defaults lie inside, and a 5-point grid of every dimension
    builds a valid Config with every dataset family's preset."""
    space = method_space(name)
    cls = method_class(name)
    fields = {f.name for f in dataclasses.fields(cls.Config)}
    assert set(space) <= fields
    check_space(name, space)
    for key, dim in space.items():
        assert isinstance(dim, DIM_TYPES), (name, key)
        default = getattr(build_config(cls), key)
        assert dim.contains(default), f"{name}.{key}: the CIFAR-10 default {default!r} is outside {dim.describe()}"
        for family in FAMILIES:
            for value in dim.grid(5):
                assert getattr(build_config(cls, family, **{key: value}), key) == value


def test_method_space_of_an_unknown_method_says_did_you_mean():
    with pytest.raises(ValueError, match="did you mean .sar."):
        method_space("sarr")


@pytest.mark.parametrize(
    "space, message",
    [
        ({"lrr": [1e-3]}, "no hyper-parameter 'lrr' \\(did you mean 'lr'\\?\\)"),
        ({"lr": []}, "empty list"),
        ({"lr": [1e-3, -1.0]}, "lr=-1.0 must be > 0"),
        ({"lr": ["fast"]}, "has type str"),
        ({"e_factor": Uniform(0.0, 1.0)}, "e_factor=0.0 must be in \\(0, 1\\]"),
        ({}, "search space is empty"),
        ({"lr": 1e-3}, "neither a list of values nor a dimension"),
    ],
)
def test_check_space_refuses_bad_user_spaces(space, message):
    with pytest.raises(ValueError, match=message) as info:
        check_space("sar", space)
    assert "\n" not in str(info.value)


def test_check_space_accepts_lists_and_dimensions():
    check_space("sar", {"lr": [1e-4, 1e-3, 1e-2], "rho": LogUniform(0.01, 0.1), "e_factor": [0.4]})


def test_space_command_prints_the_table(capsys):
    assert methods_main(["space", "tribe"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["hyper-parameter", "kind", "range", "default"]
    rows = {line.split()[0]: line for line in out[1:]}
    assert set(rows) == set(method_space("tribe"))
    assert "log-uniform" in rows["eta"] and "[0.001, 0.5]" in rows["eta"] and "imagenet: 0.5" in rows["eta"]
    assert methods_main(["space", "test"]) == 0
    assert "no hyper-parameters to search" in capsys.readouterr().out
    assert methods_main(["space", "tnet"]) == 2
    assert "did you mean 'test'" in capsys.readouterr().err


# ---------------------------------------------------------------------- corners build and run
@pytest.fixture(scope="module")
def model_and_images():
    from unitta.data import load_dataset
    from unitta.models import load_model

    model, info = load_model("fmnist-c")
    dataset = load_dataset("fmnist-c", n_per_domain=10)
    order = np.random.default_rng(0).permutation(len(dataset))[:16]
    return model, info, dataset.get_batch(order)


# Non-searched values that keep one batch short (a source warm-up of two batches, a small key queue).
FAST = {"rmt": {"warmup_samples": 16}, "adacontrast": {"queue_size": 32}, "memo": {"n_augmentations": 2},
        "cotta": {"n_augmentations": 2}}


@pytest.mark.parametrize("corner", ["low", "high"])
@pytest.mark.parametrize("name", SEARCHED)
def test_corner_points_build_and_run_one_batch(name, corner, model_and_images, one_thread):
    """All dimensions at their low (high) corner at once: the method builds around the embedded ResNet-20 and
    scores one batch of 16 Fashion-MNIST-C images with finite (16, 10) scores."""
    model, info, images = model_and_images
    point = {key: dim.corners()[0 if corner == "low" else -1] for key, dim in method_space(name).items()}
    cls = method_class(name)
    overrides = {**cls.check_overrides, **FAST.get(name, {}), **point}
    source = check_source(model, images) if cls.needs_source else None
    method = get_method(name, model, info, seed=0, source=source, **overrides)
    with torch.enable_grad():
        scores = method(images)
    assert scores.shape == (16, 10)
    assert torch.isfinite(scores).all()
    assert all(getattr(method.cfg, key) == value or math.isclose(getattr(method.cfg, key), value)
               for key, value in point.items())


def test_the_contract_check_refuses_a_space_outside_the_config(monkeypatch):
    """``unitta methods check`` has a ``space`` item: a key that is no Config field, a value the Config
    refuses, or something that is not a dimension fails it with the reason."""
    from unitta.contract.command import _check_space

    assert _check_space("sar").passed and _check_space("test").passed
    cls = method_class("sar")
    for bad, reason in [({"lrr": LogUniform(1e-4, 1e-2)}, "no hyper-parameter 'lrr'"),
                        ({"e_factor": Uniform(0.0, 0.5)}, "e_factor=0.0 must be in (0, 1]"),
                        ({"lr": [1e-4, 1e-3]}, "is not a LogUniform")]:
        monkeypatch.setattr(cls, "space", bad)
        result = _check_space("sar")
        assert not result.passed and reason in result.reason, result.reason

"""Methods across normalisation kinds, on the embedded LayerNorm ViT (``vit_tiny``, docs/methods.md).

Every method whose ``norm_kinds`` include 'layer' passes the method contract on the ViT and runs a cell
(``run_cell``) with ``model: vit_tiny``; every other method is refused by the sweep's config check with one
line naming the model's normalisation kind, before any cell runs, and by ``get_method``.
"""

from __future__ import annotations

import pytest
import torch

from tests.methods.test_contract import FAST
from unitta.cell import Cell
from unitta.contract import CHECKS, run_checks
from unitta.evaluate import run_cell
from unitta.methods import get_method, list_methods, method_class
from unitta.models import load_model
from unitta.schema import ConfigError
from unitta.schema.methods import check_methods
from unitta.sweep.config import parse_config

SUPPORTED = [m for m in list_methods() if "layer" in method_class(m).norm_kinds]
UNSUPPORTED = [m for m in list_methods() if "layer" not in method_class(m).norm_kinds]
# cells that take minutes on a shared CPU: the source-set methods load and train on Fashion-MNIST's training
# split, MEMO adapts on 32 views of every image
SLOW_CELLS = {m for m in SUPPORTED if method_class(m).needs_source} | {"memo"}
# Class prototypes from a few source batches instead of the whole source set (60,000 images, ~50 s each on the
# ViT): what is checked is that the cell runs on a LayerNorm model, not the prototypes' quality.
SHORT_SETUP = {"rmt": {"prototype_samples": 512}, "santa": {"prototype_samples": 512}}


@pytest.fixture(scope="module")
def vit():
    return load_model("fmnist-c", "vit_tiny")


def test_the_existing_methods_declare_their_kinds():
    # outputs only (test, lame, cofa) or affine / all parameters (tent, cotta, roid): any kind
    assert {"test", "tent", "cotta", "lame", "roid", "cofa", "cofa_nofilter"} <= set(SUPPORTED)
    # defined on BatchNorm statistics: BatchNorm only
    batch_only = {"bn", "robust_bn", "balanced_bn", "note", "unmixtns", "tribe", "bdn", "bdn_nofilter", "unitta",
                  "rotta", "roid_unmixtns"}
    assert batch_only <= set(UNSUPPORTED)
    assert all(method_class(m).norm_kinds == ("batch",) for m in batch_only)


def test_the_vit_is_a_layernorm_model(vit):
    model, info = vit
    assert (info.name, info.norm_kind, info.bn_layers, info.bdn_layer) == ("vit_tiny", "layer", (), None)
    assert len(info.norm_layers) == 13  # 2 per block x 6 + the final one


@pytest.mark.parametrize("name", SUPPORTED)
def test_supported_method_passes_the_contract_on_the_vit(name, vit, fmnist_c_images):
    model, info = vit
    results = run_checks(name, model, info, fmnist_c_images, **FAST.get(name, {}))
    assert [r.check for r in results] == list(CHECKS)
    failed = [f"{r.check}: {r.reason}" for r in results if not r.passed]
    assert not failed, f"{name}: " + "; ".join(failed)


@pytest.mark.parametrize("name", [pytest.param(m, marks=pytest.mark.slow) if m in SLOW_CELLS else m for m in SUPPORTED])
def test_supported_method_runs_a_cell_on_the_vit(name):
    cell = Cell(dataset="fmnist-c", model="vit_tiny", method=name, setting="n1i1", n_per_domain=20, S=2,
                num_threads=1, method_kwargs={**FAST.get(name, {}), **SHORT_SETUP.get(name, {})})
    row = run_cell(cell)
    assert row["status"] == "ok", row["error_text"]
    assert row["model"] == "vit_tiny" and 0.0 <= row["error"] <= 100.0


@pytest.mark.parametrize("name", UNSUPPORTED)
def test_unsupported_method_is_refused_before_any_cell(name, vit):
    raw = {"name": "x", "datasets": ["fmnist-c"], "models": {"fmnist-c": "vit_tiny"}, "methods": ["test", name],
           "settings": ["i111"]}
    with pytest.raises(ConfigError) as err:
        parse_config(raw)
    message = str(err.value)
    assert "\n" not in message and "methods[1]" in message and repr(name) in message
    assert "'vit_tiny' normalises with LayerNorm (norm kind 'layer')" in message
    parse_config({**raw, "models": {}, "methods": ["test", name]})  # the default ResNet-20 is a BatchNorm model
    with pytest.raises(ConfigError, match="norm kind 'layer'"):  # the tune driver's check (cell: {model: ...})
        check_methods([("methods", name, {})], ["fmnist-c"], "default", "tune.yaml", models={"fmnist-c": "vit_tiny"})
    model, info = vit
    with pytest.raises(ValueError, match="normalises with LayerNorm"):
        get_method(name, model, info, **FAST.get(name, {}))


def test_an_unknown_model_is_a_config_error_with_a_hint():
    raw = {"name": "x", "datasets": ["fmnist-c"], "models": {"fmnist-c": "vit_tny"}, "methods": ["test"],
           "settings": ["i111"]}
    with pytest.raises(ConfigError, match="unknown model 'vit_tny' \\(did you mean 'vit_tiny'\\?\\)"):
        parse_config(raw)


def test_tent_adapts_only_the_layernorm_affine_parameters(vit, fmnist_c_images):
    model, info = vit
    method = get_method("tent", model, info)
    before = {k: v.clone() for k, v in method.model.named_parameters()}
    method(fmnist_c_images[:64])
    moved = {k for k, v in method.model.named_parameters() if not torch.equal(before[k], v)}
    assert moved == {f"{layer}.{p}" for layer in info.norm_layers for p in ("weight", "bias")}


def test_the_check_command_refuses_a_method_on_a_model_of_another_kind(capsys):
    from unitta.contract.command import main

    assert main(["check", "bn", "--model", "vit_tiny"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "norm kind 'layer'" in err

"""``profile: reference`` (``TTAMethod.profiles``, ``unitta/methods/parts/profiles.py``; docs/methods.md, "Profiles").

The table names only registered methods and existing Config fields with valid values for every dataset
family, changes the resolved config exactly by its values, yields to user overrides, reaches cells through
``Cell``, the sweep YAML and the tune YAML, and every method with an entry runs its reference code path on
real Fashion-MNIST-C images under every family's values.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml

from unitta.cell import Cell
from unitta.methods import build_config, get_method, list_methods, method_class, resolved_config
from unitta.methods.norm.balanced_bn_layer import BalancedBatchNorm2d
from unitta.methods.parts.profiles import profile_values
from unitta.profile_names import PROFILES
from unitta.schema import ConfigError
from unitta.sweep.config import load_config, parse_config
from unitta.tune.config import parse_tune_config, trial_cells

FAMILIES = {"cifar10": "cifar10-c", "cifar100": "cifar100-c", "imagenet": "imagenet-c"}
# method -> its reference profile's entry (``TTAMethod.profiles``, in each method's own class)
REFERENCE = {n: e["reference"] for n in list_methods() if "reference" in (e := vars(method_class(n)).get("profiles", {}))}


def _family_values(name: str) -> dict[str, dict]:
    return {family: profile_values(method_class(name), family, "reference") for family in FAMILIES}


# ---------------------------------------------------------------------- the table itself
@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_entries_name_registered_methods_and_valid_fields_for_every_family(name):
    assert name in list_methods()
    cls = method_class(name)
    entry = REFERENCE[name]
    if any(key in FAMILIES for key in entry):  # a per-family entry must say what every family runs
        assert sorted(entry) == sorted(FAMILIES), f"{name}: per-family entry without {set(FAMILIES) - set(entry)}"
    for family, values in _family_values(name).items():
        assert values, f"{name}: empty reference values on {family}"
        # the override path checks names and types; the Config checks ranges
        build_config(cls, FAMILIES[family], "default", **values)


@pytest.mark.parametrize("name", list_methods())
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_reference_changes_the_resolved_config_exactly_by_the_table(name, family):
    dataset = FAMILIES[family]
    default = resolved_config(name, dataset)
    reference = resolved_config(name, dataset, profile="reference")
    values = profile_values(method_class(name), family, "reference")
    assert reference == {**default, **values}
    changed = {key for key in default if default[key] != reference[key]}
    assert changed == set(values), f"{name}/{family}: reference values equal to the default are dead entries"


def test_the_table_holds_the_reference_values():
    """UT's values (docs/methods.md, per method): pinned here so that an edit of the table is deliberate."""
    cotta_in = resolved_config("cotta", "imagenet-c", profile="reference")
    assert (cotta_in["optimizer"], cotta_in["lr"], cotta_in["loss"], cotta_in["aug_size"]) == ("adam", 5e-4, "ce", 32)
    assert resolved_config("cotta", "cifar100-c", profile="reference")["anchor_threshold"] == 0.72  # preset kept
    assert all(resolved_config("rotta", d, profile="reference")["aug_size"] == 32 for d in FAMILIES.values())
    etas = [resolved_config("robust_bn", d, profile="reference") for d in FAMILIES.values()]
    assert [(c["variant"], c["eta"]) for c in etas] == [("reference", 0.01), ("reference", 0.05), ("reference", 0.5)]
    note = resolved_config("note", "cifar10-c", profile="reference")
    assert (note["optimizer"], note["lr"], note["update_every"]) == ("sgd", 1e-4, 0)
    for name in ("roid", "roid_unmixtns"):
        assert resolved_config(name, "imagenet-c", profile="reference")["prior_on"] == "logits"
    assert resolved_config("roid", "imagenet-c", profile="reference")["optimizer"] == "sgd"  # preset kept


def test_default_profile_sets_nothing_and_an_unknown_profile_is_refused():
    assert PROFILES == ("default", "reference")
    assert all(profile_values(method_class(name), "cifar10", "default") == {} for name in list_methods())
    with pytest.raises(ValueError, match="profile='paper': expected one of default, reference"):
        profile_values(method_class("roid"), "cifar10", "paper")
    with pytest.raises(ValueError, match="profile: unknown profile 'paper'"):
        Cell(method="roid", profile="paper")


def test_a_user_override_wins_over_the_profile():
    cfg = build_config(method_class("cotta"), "imagenet-c", "reference", lr=0.02, aug_size=None)
    assert (cfg.lr, cfg.aug_size, cfg.optimizer, cfg.loss) == (0.02, None, "adam", "ce")
    assert build_config(method_class("roid"), "cifar10-c", "reference", prior_on="probs").prior_on == "probs"
    with pytest.raises(ValueError, match="has no hyper-parameter 'prior'"):
        build_config(method_class("roid"), "cifar10-c", "reference", prior="probs")


# ---------------------------------------------------------------------- cells, sweep and tune configs
def test_the_cell_identity_and_row_record_the_profile():
    default, reference = Cell(method="roid"), Cell(method="roid", profile="reference")
    assert default.cell_id() != reference.cell_id()
    assert reference.method_config["prior_on"] == "logits" and default.method_config["prior_on"] == "probs"
    assert reference.coordinates()["profile"] == "reference" and default.coordinates()["profile"] == "default"
    # a method without an entry computes the same thing, but the row still says which profile ran
    assert Cell(method="lame", profile="reference").method_config == Cell(method="lame").method_config
    assert Cell(method="lame", profile="reference").coordinates()["profile"] == "reference"


def test_the_sweep_yaml_profile_reaches_every_cell():
    base = {"name": "p", "datasets": ["fmnist-c", "imagenet-c"], "settings": ["i111"], "seeds": [425]}
    cfg = parse_config({**base, "profile": "reference", "methods": ["cotta", {"note": {"optimizer": "adam"}}]})
    cells = cfg.cells()
    assert len(cells) == 4 and {c.profile for c in cells} == {"reference"}
    by = {(c.method, c.dataset): c.method_config for c in cells}
    assert by["cotta", "imagenet-c"]["lr"] == 5e-4 and by["cotta", "fmnist-c"]["aug_size"] == 32
    assert by["note", "fmnist-c"]["optimizer"] == "adam"  # the YAML's override wins
    assert by["note", "fmnist-c"]["update_every"] == 0  # the profile's other value stays
    assert {c.profile for c in parse_config({**base, "methods": ["note"]}).cells()} == {"default"}
    with pytest.raises(ConfigError, match="profile"):
        parse_config({**base, "profile": "paper", "methods": ["note"]})


def test_full_grid_reference_is_the_full_grid_on_the_reference_profile():
    root = Path(__file__).resolve().parents[2] / "sweeps"
    grid, twin = (yaml.safe_load((root / f"{n}.yaml").read_text()) for n in ("full_grid", "full_grid_reference"))
    assert (twin.pop("name"), twin.pop("output"), twin.pop("profile")) == (
        "full_grid_reference", "results/full_grid_reference", "reference")
    grid.pop("name"), grid.pop("output"), grid.pop("profile", None)
    assert twin == grid
    assert {c.profile for c in load_config(root / "full_grid_reference.yaml").cells()} == {"reference"}


def test_the_tune_yaml_profile_reaches_the_trial_cells():
    cfg = parse_tune_config({"name": "t", "methods": ["roid"], "space": {"domain_alpha": [0.9]},
                             "cell": {"profile": "reference"}})
    (cell,) = trial_cells(cfg, {"domain_alpha": 0.9})
    assert cell.profile == "reference" and cell.method_config["prior_on"] == "logits"


# ---------------------------------------------------------------------- the reference code paths run
# Short runs: 2 augmented views (forced by AP = 1) for CoTTA, memory updates every 8 samples for RoTTA,
# a memory of 8 for NOTE; the profile's own values are not touched.
FAST = {
    "cotta": {"n_augmentations": 2, "anchor_threshold": 1.0},
    "rotta": {"update_every": 8, "memory_size": 8},
    "note": {"memory_size": 8},
}


def _distinct_paths() -> list[tuple[str, str]]:
    """(method, family) once per distinct set of reference values (the code path does not change otherwise)."""
    seen, paths = set(), []
    for name in sorted(REFERENCE):
        for family, values in _family_values(name).items():
            key = (name, tuple(sorted(values.items())))
            if key not in seen:
                seen.add(key)
                paths.append((name, family))
    return paths


@pytest.mark.parametrize("name, family", _distinct_paths())
def test_every_reference_path_runs_on_real_images(name, family, embedded_model, fmnist_c_images):
    model, info = embedded_model
    method = get_method(name, model, info, dataset=FAMILIES[family], seed=1, profile="reference", **FAST.get(name, {}))
    for key, value in profile_values(method_class(name), family, "reference").items():
        assert getattr(method.cfg, key) == value
    outputs = [method(batch) for batch in fmnist_c_images[:32].split(16)]
    assert all(o.shape == (16, info.num_classes) and torch.isfinite(o).all() for o in outputs)
    if name != "robust_bn":
        assert method.cost.backwards > 0  # the gradient methods took steps on the reference path
    else:
        assert any(isinstance(m, BalancedBatchNorm2d) for m in method.model.modules())


def test_roid_loss_normalisation_on_the_last_short_batch_changes_no_prediction(embedded_model, fmnist_c_images):
    """Why the table leaves ROID's ``loss_batch_size`` alone: the harness feeds full batches and one short
    last batch, whose step comes after its own prediction (docs/methods.md, "Profiles")."""
    model, info = embedded_model
    runs = {}
    for denominator in (0, 16):  # actual batch size; the configured one, as UT's TEST.BATCH_SIZE
        method = get_method("roid", model, info, seed=3, profile="reference", loss_batch_size=denominator)
        preds = [method(batch) for batch in fmnist_c_images[:40].split(16)]  # 16, 16, 8
        runs[denominator] = (torch.cat(preds), [p.detach().clone() for p in method.params])
    assert torch.equal(runs[0][0], runs[16][0])
    assert any(not torch.equal(a, b) for a, b in zip(runs[0][1], runs[16][1]))  # the last step did differ

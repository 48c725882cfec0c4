"""cluster/: the Ray cluster launcher config against Ray's own schema, the KubeRay RayJob manifest."""

from __future__ import annotations

import shlex
from pathlib import Path

import yaml

from unitta.sweep.config import load_config

ROOT = Path(__file__).resolve().parents[2]


def test_launcher_config_passes_rays_validation():
    from ray.autoscaler._private.util import validate_config  # what `ray up` runs: ray-schema.json + checks

    config = yaml.safe_load((ROOT / "cluster" / "ray-cluster-aws.yaml").read_text())
    validate_config(config)
    gpu_nodes = [t for t in config["available_node_types"].values() if t["resources"].get("GPU", 0) > 0]
    assert gpu_nodes and config["available_node_types"][config["head_node_type"]]["resources"]["GPU"] == 0


def test_launcher_config_rejects_a_typo():
    import jsonschema
    import pytest
    from ray.autoscaler._private.util import validate_config

    config = yaml.safe_load((ROOT / "cluster" / "ray-cluster-aws.yaml").read_text())
    config["available_node_types"]["gpu"]["resourcez"] = config["available_node_types"]["gpu"].pop("resources")
    with pytest.raises(jsonschema.ValidationError):
        validate_config(config)


def test_rayjob_manifest_runs_a_valid_sweep_with_the_data_mounted():
    job = yaml.safe_load((ROOT / "cluster" / "rayjob.yaml").read_text())
    assert (job["apiVersion"], job["kind"]) == ("ray.io/v1", "RayJob")
    commands = [shlex.split(c) for c in job["spec"]["entrypoint"].split("&&")]
    argv = commands[-1]  # the data is checked first, then the sweep runs
    assert argv[:3] == ["python", "-m", "unitta.sweep"]
    checks = {c[4] for c in commands[:-1] if c[:4] == ["python", "-m", "unitta.data", "check"]}
    assert checks == {"cifar10-c", "cifar100-c", "imagenet-c"}
    sweep = ROOT / argv[3]
    raw = yaml.safe_load(sweep.read_text())
    assert raw["resources"]["num_gpus"] > 0
    cluster = job["spec"]["rayClusterSpec"]
    pods = [cluster["headGroupSpec"]["template"]] + [g["template"] for g in cluster["workerGroupSpecs"]]
    for pod in pods:
        mounts = {m["mountPath"] for c in pod["spec"]["containers"] for m in c["volumeMounts"]}
        assert any(raw["data_dir"].startswith(m) and raw["checkpoint_dir"].startswith(m) for m in mounts)
    gpus = [g["template"]["spec"]["containers"][0]["resources"]["limits"].get("nvidia.com/gpu") for g in cluster["workerGroupSpecs"]]
    assert all(gpus)
    from unitta.methods import list_methods

    names = [m if isinstance(m, str) else next(iter(m)) for m in raw["methods"]]
    if set(names) <= set(list_methods()):
        assert len(load_config(sweep).cells()) == 3 * 17 * 24

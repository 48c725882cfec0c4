"""The decoded ImageNet-C cache (unitta.data.prepared): same images as the lazy JPEG path, atomic, checked."""

import json
import pickle

import numpy as np
import pytest
import torch
from PIL import Image

from unitta.data import load_dataset
from unitta.data.__main__ import main as data_cli
from unitta.data.imagenet_c import load_imagenet_c
from unitta.data.prepared import PREPARED_DIR, PreparedDataset, cache_paths, prepare_imagenet_c, read_manifest

WNIDS = ["n03", "n01", "n02"]  # written unsorted: classes are the sorted names
SIZES = [(224, 224), (260, 224), (224, 300), (97, 131)]  # as released, wider, taller, smaller (upsampled)


def _write_tree(root, corruptions, severity=5, per_class=5, seed=0):
    rng = np.random.default_rng(seed)
    for c in corruptions:
        for wnid in WNIDS:
            folder = root / "ImageNet-C" / c / str(severity) / wnid
            folder.mkdir(parents=True)
            for j in range(per_class):
                w, h = SIZES[j % len(SIZES)]
                # smooth noise: exercises resizing and JPEG decoding on photo-like content
                small = rng.integers(0, 256, (h // 8 + 1, w // 8 + 1, 3), dtype=np.uint8)
                Image.fromarray(small).resize((w, h), Image.BICUBIC).save(folder / f"{j:04d}.JPEG", quality=90)


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("inc")
    _write_tree(root, ["fog", "snow"])
    assert data_cli(["prepare", "imagenet-c", "--dir", str(root), "--corruptions", "fog,snow", "--workers", "2"]) == 0
    return root


def test_cache_equals_the_lazy_decoding_exactly(tree):
    cached = load_dataset("imagenet-c", data_dir=tree, corruptions=["snow", "fog"])
    lazy = load_imagenet_c(tree, [5], ["snow", "fog"], None, prepared=False)
    assert isinstance(cached, PreparedDataset) and cached.meta["prepared"]
    assert cached.domain_names == lazy.domain_names == ["snow_5", "fog_5"]
    assert cached.meta["classes"] == lazy.meta["classes"] == ["n01", "n02", "n03"]
    np.testing.assert_array_equal(cached.labels, lazy.labels)
    np.testing.assert_array_equal(cached.domains, lazy.domains)
    order = np.random.default_rng(1).permutation(len(lazy))  # mixed domains, any order, repeats below
    for idx in (order, np.array([29, 0, 29, 15])):
        assert torch.equal(cached.get_batch(idx), lazy.get_batch(idx))
    array = np.load(cache_paths(tree, "fog", 5)[0], mmap_mode="r")
    assert array.shape == (15, 224, 224, 3) and array.dtype == np.uint8


def test_subset_and_pickle_match_the_lazy_path(tree):
    cached = load_dataset("imagenet-c", data_dir=tree, corruptions=["fog", "snow"], n_per_domain=6)
    lazy = load_imagenet_c(tree, [5], ["fog", "snow"], 6, prepared=False)
    np.testing.assert_array_equal(cached.labels, lazy.labels)
    idx = np.arange(len(lazy))[::-1]
    assert torch.equal(cached.get_batch(idx), lazy.get_batch(idx))
    restored = pickle.loads(pickle.dumps(cached))  # memory maps are dropped and reopened (Ray object store)
    assert all(m is None for m in restored._maps)
    assert torch.equal(restored.get_batch(idx), lazy.get_batch(idx))


def test_prepare_keeps_intact_caches_and_detects_damage(tmp_path):
    _write_tree(tmp_path, ["fog"], per_class=3)
    assert prepare_imagenet_c(tmp_path, [5], ["fog"], workers=1, progress=False)[0].startswith("fog_5: prepared")
    assert prepare_imagenet_c(tmp_path, [5], ["fog"], progress=False, verify=True) == [
        "fog_5: kept (9 images, verified)"
    ]
    npy, manifest_path = cache_paths(tmp_path, "fog", 5)
    good = load_dataset("imagenet-c", data_dir=tmp_path, corruptions=["fog"]).get_batch(np.arange(9))

    # one flipped byte keeps the size: the cheap check passes, a full verification names the rows
    with open(npy, "r+b") as f:
        f.seek(-1000, 2)
        byte = f.read(1)
        f.seek(-1000, 2)
        f.write(bytes([byte[0] ^ 0xFF]))
    load_dataset("imagenet-c", data_dir=tmp_path, corruptions=["fog"])
    with pytest.raises(ValueError, match=r"rows 0\.\.8 differ from their checksum.*--force"):
        load_imagenet_c(tmp_path, [5], ["fog"], None, verify=True)
    assert data_cli(["prepare", "imagenet-c", "--dir", str(tmp_path), "--corruptions", "fog", "--verify"]) == 2

    # a truncated array or an edited manifest fails the cheap check
    with open(npy, "r+b") as f:
        f.truncate(npy.stat().st_size - 1)
    with pytest.raises(ValueError, match="bytes, its manifest says"):
        load_dataset("imagenet-c", data_dir=tmp_path, corruptions=["fog"])
    body = json.loads(manifest_path.read_text())
    body["files"][0], body["files"][1] = body["files"][1], body["files"][0]
    manifest_path.write_text(json.dumps(body))
    with pytest.raises(ValueError, match="manifest's hash does not match"):
        read_manifest(tmp_path, "fog", 5)

    # prepare rebuilds what is damaged
    assert prepare_imagenet_c(tmp_path, [5], ["fog"], workers=2, progress=False)[0].startswith("fog_5: prepared")
    assert torch.equal(load_imagenet_c(tmp_path, [5], ["fog"], None, verify=True).get_batch(np.arange(9)), good)


def test_a_failed_prepare_leaves_no_cache(tmp_path):
    _write_tree(tmp_path, ["fog", "snow"], per_class=2)
    (tmp_path / "ImageNet-C" / "snow" / "5" / "n02" / "0001.JPEG").write_bytes(b"not a jpeg")
    with pytest.raises(ValueError, match=r"snow/5/n02/0001.JPEG: cannot decode"):
        prepare_imagenet_c(tmp_path, [5], ["fog", "snow"], workers=2, progress=False)
    assert sorted(p.name for p in (tmp_path / PREPARED_DIR).rglob("*")) == ["5.json", "5.npy", "fog", "snow"]
    assert read_manifest(tmp_path, "snow", 5) is None and read_manifest(tmp_path, "fog", 5) is not None

    # some domains cached, some not: decode them all from the JPEGs, and say so; prepared=True refuses
    with pytest.warns(UserWarning, match="no decoded cache .* for snow_5"):
        partial = load_imagenet_c(tmp_path, [5], ["fog", "snow"], None)
    assert not isinstance(partial, PreparedDataset)
    with pytest.raises(FileNotFoundError, match="prepare imagenet-c"):
        load_imagenet_c(tmp_path, [5], ["snow"], None, prepared=True)


def test_cli_errors_are_one_line(tmp_path, capsys):
    assert data_cli(["prepare", "imagenet-c", "--dir", str(tmp_path), "--corruptions", "fog"]) == 2
    assert "ImageNet-C/fog/5 not found" in capsys.readouterr().err
    assert data_cli(["prepare", "imagenet-c", "--dir", str(tmp_path), "--corruptions", "smog"]) == 2
    assert "unknown smog" in capsys.readouterr().err
    assert data_cli(["prepare", "imagenet-c", "--dir", str(tmp_path), "--workers", "0"]) == 2
    assert "workers=0" in capsys.readouterr().err

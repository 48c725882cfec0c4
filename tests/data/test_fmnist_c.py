"""Fashion-MNIST-C on class-balanced subsets: preparation, cache layout, reuse, atomicity, CLI."""

import json

import numpy as np
import pytest

import unitta.data.corruptions as corruptions_module
from unitta.data import CORRUPTIONS, load_dataset, prepare_fmnist_c
from unitta.data.__main__ import main
from unitta.data.arrays import balanced_subset
from unitta.data.fmnist_c import padded_test_set

THREE = ["fog", "glass_blur", "impulse_noise"]


def _expected(name, severity, n):
    images, labels = padded_test_set()
    ids = balanced_subset(labels, n, 10)
    return corruptions_module.corrupt(images[ids], name, severity, 0, ids), labels[ids]


def test_first_use_prepares_a_subset_cache_with_a_message(tmp_path, capsys):
    ds = load_dataset("fmnist-c", data_dir=tmp_path, corruptions=THREE, n_per_domain=20)
    assert "preparing Fashion-MNIST-C" in capsys.readouterr().err
    folder = tmp_path / "FashionMNIST-C-n20"
    assert sorted(p.name for p in folder.iterdir()) == [".lock", "fog.npy", "glass_blur.npy", "impulse_noise.npy",
                                                        "labels.npy", "meta.json"]
    assert ds.name == "fmnist-c" and ds.num_classes == 10 and len(ds) == 60
    assert ds.domain_names == ["fog_5", "glass_blur_5", "impulse_noise_5"]
    np.testing.assert_array_equal(ds.domains, np.repeat([0, 1, 2], 20))
    for d, name in enumerate(THREE):
        pixels, labels = _expected(name, 5, 20)
        np.testing.assert_array_equal(ds.labels[d * 20 : (d + 1) * 20], labels)
        np.testing.assert_array_equal(ds.images[d * 20 : (d + 1) * 20], pixels)
    np.testing.assert_array_equal(np.bincount(ds.labels[:20]), [2] * 10)
    batch = ds.get_batch(np.array([0, 59]))
    assert batch.shape == (2, 3, 32, 32) and 0 <= batch.min() and batch.max() <= 1

    mtime = (folder / "fog.npy").stat().st_mtime_ns
    again = load_dataset("fmnist-c", data_dir=tmp_path, corruptions=THREE[:1], n_per_domain=20)
    assert capsys.readouterr().err == ""  # cached: nothing prepared
    assert (folder / "fog.npy").stat().st_mtime_ns == mtime
    np.testing.assert_array_equal(again.images, ds.images[:20])


def test_new_severities_are_merged_in_ascending_order(tmp_path):
    five = load_dataset("fmnist-c", data_dir=tmp_path, corruptions=["fog"], n_per_domain=10)
    both = load_dataset("fmnist-c", data_dir=tmp_path, severity=[5, 2], corruptions=["fog"], n_per_domain=10)
    folder = tmp_path / "FashionMNIST-C-n10"
    assert json.loads((folder / "meta.json").read_text())["severities"] == {"fog": [2, 5]}
    stored = np.load(folder / "fog.npy")
    assert stored.shape == (20, 32, 32, 3)  # severities stacked like CIFAR-10-C
    np.testing.assert_array_equal(stored[10:], five.images)
    np.testing.assert_array_equal(stored[:10], _expected("fog", 2, 10)[0])
    assert both.domain_names == ["fog_5", "fog_2"]
    np.testing.assert_array_equal(both.images[:10], five.images)


def test_an_interrupted_preparation_leaves_a_usable_cache(tmp_path, monkeypatch):
    real = corruptions_module.corrupt

    def failing(images, name, *args, **kwargs):
        if name == "glass_blur":
            raise KeyboardInterrupt
        return real(images, name, *args, **kwargs)

    monkeypatch.setattr(corruptions_module, "corrupt", failing)
    with pytest.raises(KeyboardInterrupt):
        prepare_fmnist_c(tmp_path, corruptions=THREE, n_per_domain=10, progress=False)
    folder = tmp_path / "FashionMNIST-C-n10"
    assert not [p for p in folder.iterdir() if ".tmp" in p.name]
    assert json.loads((folder / "meta.json").read_text())["severities"] == {"fog": [5]}
    monkeypatch.setattr(corruptions_module, "corrupt", real)
    ds = load_dataset("fmnist-c", data_dir=tmp_path, corruptions=THREE, n_per_domain=10)
    for d, name in enumerate(THREE):
        np.testing.assert_array_equal(ds.images[d * 10 : (d + 1) * 10], _expected(name, 5, 10)[0])


def test_a_damaged_cache_says_how_to_recover(tmp_path):
    load_dataset("fmnist-c", data_dir=tmp_path, corruptions=["fog"], n_per_domain=10)
    path = tmp_path / "FashionMNIST-C-n10" / "fog.npy"
    np.save(path, np.load(path)[:5])
    with pytest.raises(ValueError, match="looks damaged: delete it"):
        load_dataset("fmnist-c", data_dir=tmp_path, corruptions=["fog"], n_per_domain=10)


def test_cache_root_comes_from_unitta_data(tmp_path, monkeypatch):
    monkeypatch.setenv("UNITTA_DATA", str(tmp_path))
    load_dataset("fmnist-c", corruptions=["contrast"], n_per_domain=10)
    assert (tmp_path / "FashionMNIST-C-n10" / "contrast.npy").is_file()


def test_cli_prepares_all_severities_and_draws_a_grid(tmp_path, capsys):
    assert main(["prepare", "fmnist-c", "--severity", "all", "--n-per-domain", "10", "--data-dir", str(tmp_path)]) == 0
    meta = json.loads((tmp_path / "FashionMNIST-C-n10" / "meta.json").read_text())
    assert meta["severities"] == {c: [1, 2, 3, 4, 5] for c in CORRUPTIONS}
    assert np.load(tmp_path / "FashionMNIST-C-n10" / "snow.npy").shape == (50, 32, 32, 3)
    out = tmp_path / "grid.png"
    common = ["--n-per-domain", "10", "--data-dir", str(tmp_path)]
    assert main(["show", "fmnist-c", "--out", str(out), "--severity", "3"] + common) == 0
    assert out.stat().st_size > 10_000
    assert main(["show", "fmnist-c", "--out", str(out), "--n-per-domain", "15", "--data-dir", str(tmp_path)]) == 2
    assert "n_per_domain=15" in capsys.readouterr().err

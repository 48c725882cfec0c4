"""Loaders on small synthetic folders in robustbench's layouts; the in-memory and lazy dataset types."""

import pickle

import numpy as np
import pytest
import torch
from PIL import Image

from unitta.data import CORRUPTIONS, load_dataset
from unitta.data.arrays import ArrayDataset, balanced_subset

ROWS = 10_000  # rows per severity in CIFAR-10-C's files: the loader hard-codes it like robustbench


def _write_cifar_c(root, folder="CIFAR-10-C", corruptions=CORRUPTIONS, severities=5, num_classes=10):
    """Full-size files, written sparsely: only rows in MARKED carry a code, the rest stay zero.

    Code: pixel [0, 0, 0] = severity, [0, 0, 1] = row // 256, [0, 0, 2] = row % 256,
    [1, 0, 0] = corruption id. Sparse files keep the test's disk use small.
    """
    out = root / folder
    out.mkdir(parents=True)
    labels = (np.arange(ROWS) * 7 + 3) % num_classes  # every class, shuffled-looking order
    np.save(out / "labels.npy", np.tile(labels, severities).astype(np.uint8))
    for name in corruptions:
        data = np.lib.format.open_memmap(out / f"{name}.npy", "w+", np.uint8, (severities * ROWS, 32, 32, 3))
        for s in range(1, severities + 1):
            rows = (s - 1) * ROWS + MARKED
            data[rows, 0, 0, 0] = s
            data[rows, 0, 0, 1] = MARKED // 256
            data[rows, 0, 0, 2] = MARKED % 256
            data[rows, 1, 0, 0] = CORRUPTIONS.index(name)
        data.flush()
        del data
    return labels


MARKED = np.r_[0:100, ROWS - 10 : ROWS]


@pytest.fixture(scope="module")
def cifar_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("c10")
    labels = _write_cifar_c(root, corruptions=("fog", "snow", "contrast"))
    return root, labels


def _rows(batch: torch.Tensor) -> np.ndarray:
    px = (batch[:, :, 0, 0] * 255).round().to(torch.int64).numpy()
    return px[:, 1] * 256 + px[:, 2]


def test_cifar10c_slices_severity_and_keeps_domain_major(cifar_root):
    root, labels = cifar_root
    ds = load_dataset("cifar10-c", data_dir=root, severity=3, corruptions=["snow", "fog"])
    assert len(ds) == 2 * ROWS and ds.num_classes == 10 and ds.domain_names == ["snow_3", "fog_3"]
    np.testing.assert_array_equal(ds.domains, np.repeat([0, 1], ROWS))
    np.testing.assert_array_equal(ds.labels, np.tile(labels, 2))
    idx = np.array([0, 17, ROWS - 1, ROWS, ROWS + 5])
    batch = ds.get_batch(idx)
    assert batch.shape == (5, 3, 32, 32) and batch.dtype == torch.float32 and batch.is_contiguous()
    np.testing.assert_array_equal((batch[:, 0, 0, 0] * 255).round().numpy(), [3] * 5)  # severity 3 rows
    np.testing.assert_array_equal(_rows(batch), idx % ROWS)
    np.testing.assert_array_equal((batch[:, 0, 1, 0] * 255).round().numpy(), [1, 1, 1, 2, 2])  # snow, fog ids


def test_several_severities_are_corruption_major(cifar_root):
    root, _ = cifar_root
    ds = load_dataset("cifar10-c", data_dir=root, severity=[1, 5], corruptions=["fog", "contrast"])
    assert ds.domain_names == ["fog_1", "fog_5", "contrast_1", "contrast_5"]
    sev = (ds.get_batch(np.arange(4) * ROWS)[:, 0, 0, 0] * 255).round().numpy()
    np.testing.assert_array_equal(sev, [1, 5, 1, 5])


def test_n_per_domain_is_class_balanced_and_the_same_images_everywhere(cifar_root):
    root, labels = cifar_root
    ds = load_dataset("cifar10-c", data_dir=root, corruptions=["fog", "snow", "contrast"], n_per_domain=30)
    assert len(ds) == 90
    np.testing.assert_array_equal(ds.domains, np.repeat([0, 1, 2], 30))
    first = ds.labels[:30]
    np.testing.assert_array_equal(np.bincount(first, minlength=10), [3] * 10)
    rows = _rows(ds.get_batch(np.arange(90))).reshape(3, 30)
    np.testing.assert_array_equal(rows[0], rows[1])
    np.testing.assert_array_equal(rows[0], rows[2])
    assert np.all(np.diff(rows[0]) > 0)  # test-set order
    # the first 3 of each class
    expected = np.sort(np.concatenate([np.flatnonzero(labels == k)[:3] for k in range(10)]))
    np.testing.assert_array_equal(rows[0], expected)
    np.testing.assert_array_equal(first, labels[expected])


def test_missing_folder_and_file_name_what_to_get(tmp_path, cifar_root):
    with pytest.raises(FileNotFoundError, match=r"CIFAR-100-C.*zenodo.org/record/3555552"):
        load_dataset("cifar100-c", data_dir=tmp_path)
    root, _ = cifar_root
    with pytest.raises(FileNotFoundError, match=r"motion_blur\.npy not found.*uint8 \(50000 or more, 32, 32, 3\)"):
        load_dataset("cifar10-c", data_dir=root)


def test_short_file_is_an_error_naming_file_and_shape(tmp_path):
    _write_cifar_c(tmp_path, corruptions=("fog",), severities=2)
    ds = load_dataset("cifar10-c", data_dir=tmp_path, severity=2, corruptions=["fog"])
    assert len(ds) == ROWS
    with pytest.raises(ValueError, match=r"fog\.npy: uint8 \(20000, 32, 32, 3\), expected uint8 \(30000 or more"):
        load_dataset("cifar10-c", data_dir=tmp_path, severity=3, corruptions=["fog"])
    truncated = tmp_path / "CIFAR-10-C" / "fog.npy"
    truncated.write_bytes(truncated.read_bytes()[: 10_000])
    with pytest.raises(ValueError, match="fog.npy"):
        load_dataset("cifar10-c", data_dir=tmp_path, severity=1, corruptions=["fog"])


def test_data_dir_defaults_to_unitta_data(monkeypatch, cifar_root):
    root, _ = cifar_root
    monkeypatch.setenv("UNITTA_DATA", str(root))
    assert len(load_dataset("cifar10-c", corruptions=["fog"], n_per_domain=10)) == 10


def test_bad_arguments(cifar_root):
    root, _ = cifar_root
    with pytest.raises(ValueError, match="name='cifar10'"):
        load_dataset("cifar10", data_dir=root)
    with pytest.raises(ValueError, match="severity=0"):
        load_dataset("cifar10-c", data_dir=root, severity=0)
    with pytest.raises(ValueError, match="unknown: blur"):
        load_dataset("cifar10-c", data_dir=root, corruptions=["fog", "blur"])
    with pytest.raises(ValueError, match="n_per_domain=25"):
        load_dataset("cifar10-c", data_dir=root, corruptions=["fog"], n_per_domain=25)


def test_balanced_subset_refuses_more_than_a_class_holds():
    labels = np.array([0, 1, 0, 1, 1])
    np.testing.assert_array_equal(balanced_subset(labels, 4, 2), [0, 1, 2, 3])
    with pytest.raises(ValueError, match="largest balanced subset is 4"):
        balanced_subset(labels, 6, 2)


def test_array_dataset_batch_matches_the_uint8_array_and_pickles():
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (12, 5, 4, 3), dtype=np.uint8)
    ds = ArrayDataset("toy", np.zeros(12, np.int64), np.zeros(12, np.int64), ["a_5"], 1, images=images)
    idx = np.array([3, 3, 11, 0])
    batch = ds.get_batch(idx)
    np.testing.assert_allclose(batch.numpy(), images[idx].transpose(0, 3, 1, 2) / 255.0, atol=1e-7)
    again = pickle.loads(pickle.dumps(ds))
    assert torch.equal(again.get_batch(idx), batch)


# ---------------------------------------------------------------------------- ImageNet-C


def _write_imagenet_c(root, corruptions, severities, wnids, per_class, size=(40, 30)):
    for c in corruptions:
        for s in severities:
            for k, wnid in enumerate(wnids):
                folder = root / "ImageNet-C" / c / str(s) / wnid
                folder.mkdir(parents=True)
                for j in range(per_class):
                    # flat colour encodes (class, file index, severity); JPEG keeps flat colours near-exact
                    colour = np.array([40 * k + 20, 40 * j + 20, 40 * s], dtype=np.uint8)
                    pixels = np.broadcast_to(colour, size[::-1] + (3,)).copy()
                    Image.fromarray(pixels).save(folder / f"img_{j:03d}.JPEG")
    (root / "ImageNet-C" / corruptions[0] / str(severities[0]) / wnids[0] / "notes.txt").write_text("not an image")


@pytest.fixture(scope="module")
def imagenet_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("inc")
    _write_imagenet_c(root, ["fog", "snow"], [3, 5], ["n02", "n01", "n03"], per_class=4)
    return root


def test_imagenet_c_lists_sorted_wnids_and_decodes_lazily(imagenet_root):
    ds = load_dataset("imagenet-c", data_dir=imagenet_root, severity=5, corruptions=["snow", "fog"])
    assert ds.num_classes == 3 and ds.meta["classes"] == ["n01", "n02", "n03"]
    assert len(ds) == 2 * 12 and ds.domain_names == ["snow_5", "fog_5"]
    np.testing.assert_array_equal(ds.labels[:12], np.repeat([0, 1, 2], 4))
    np.testing.assert_array_equal(ds.domains, np.repeat([0, 1], 12))
    assert ds.files[0] is ds.files[1]  # identical listings are shared
    batch = ds.get_batch(np.array([0, 5, 23]))
    assert batch.shape == (3, 3, 224, 224) and batch.dtype == torch.float32
    centre = (batch[:, :, 112, 112] * 255).round().numpy()
    # item 0 = n01 (source folder index 1) file 0; item 5 = n02 file 1; item 23 = n03 file 3, fog
    expected = np.array([[60, 20, 200], [20, 60, 200], [100, 140, 200]])
    assert np.abs(centre - expected).max() <= 3
    assert ds.path(23).endswith("fog/5/n03/img_003.JPEG")
    restored = pickle.loads(pickle.dumps(ds))  # the thread pool is dropped and recreated
    assert torch.equal(restored.get_batch(np.array([0, 5, 23])), batch)


def test_imagenet_c_subset_and_missing_folders(imagenet_root):
    ds = load_dataset("imagenet-c", data_dir=imagenet_root, severity=[3, 5], corruptions=["fog"], n_per_domain=6)
    assert ds.domain_names == ["fog_3", "fog_5"] and len(ds) == 12
    assert [ds.path(i).rsplit("/", 1)[1] for i in range(6)] == ["img_000.JPEG", "img_001.JPEG"] * 3
    with pytest.raises(FileNotFoundError, match=r"ImageNet-C/fog/1 not found.*zenodo.org/record/2235448"):
        load_dataset("imagenet-c", data_dir=imagenet_root, severity=1, corruptions=["fog"])
    with pytest.raises(FileNotFoundError, match="ImageNet-C not found"):
        load_dataset("imagenet-c", data_dir=imagenet_root / "nowhere")

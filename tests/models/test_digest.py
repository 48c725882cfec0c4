"""A checkpoint's digest: computed once per file, again when the file is replaced; the digest of what is loaded."""

from __future__ import annotations

import os
import re
from pathlib import Path

import torch

from unitta.models import digest as digest_module
from unitta.models import load_model
from unitta.models.digest import bytes_digest, checkpoint_digest
from unitta.models.zoo import EMBEDDED_CHECKPOINT, EMBEDDED_DIR, weights_digest


def test_the_digest_is_cached_per_file_and_recomputed_when_the_file_changes(tmp_path, monkeypatch):
    path = tmp_path / "w.pt"
    path.write_bytes(b"first weights")
    first = checkpoint_digest(path)
    assert first == bytes_digest(b"first weights")
    reads = []
    real_open = open
    monkeypatch.setattr(digest_module, "open", lambda *a, **k: reads.append(a) or real_open(*a, **k), raising=False)
    assert checkpoint_digest(path) == first and reads == []  # cached: the file is not read again
    replacement = tmp_path / "new.pt"
    replacement.write_bytes(b"other weights")
    os.replace(replacement, path)  # what `python -m unitta.models train fmnist --out PATH` amounts to
    assert checkpoint_digest(path) == bytes_digest(b"other weights") and len(reads) == 1
    path.write_bytes(b"other weightz")  # rewritten in place, same size
    assert checkpoint_digest(path) == bytes_digest(b"other weightz")
    assert checkpoint_digest(tmp_path / "missing.pt") is None


def test_load_model_reports_the_digest_of_the_bytes_it_loaded():
    _, info = load_model("fmnist-c")
    assert info.extra["weights_digest"] == checkpoint_digest(EMBEDDED_CHECKPOINT) == weights_digest("fmnist-c")


def test_weights_digest_follows_the_checkpoint_dir(tmp_path):
    path = tmp_path / "cifar10" / "corruptions" / "Standard.pt"
    assert weights_digest("cifar10-c", "Standard", tmp_path) is None
    path.parent.mkdir(parents=True)
    torch.save({"fc.weight": torch.zeros(1)}, path)
    assert weights_digest("cifar10-c", "Standard", tmp_path) == bytes_digest(path.read_bytes())
    assert weights_digest("cifar10-c", "no-such-model", tmp_path) is None


def test_reference_weights_are_the_shipped_file_and_torchvisions_r50():
    from unitta.models.zoo import is_reference_weights

    assert is_reference_weights("fmnist-c", None, checkpoint_digest(EMBEDDED_CHECKPOINT))
    assert is_reference_weights("imagenet-c", "Standard_R50", "0676ba61" + "0" * 56)
    assert not is_reference_weights("imagenet-c", "Standard_R50", "1676ba61" + "0" * 56)
    assert not is_reference_weights("cifar10-c", "Standard", bytes_digest(b"anything"))
    assert not is_reference_weights("fmnist-c", "resnet20", None)


def test_the_docs_weights_table_names_the_packaged_files():
    """docs/models.md, "The packaged weights": one row per file in unitta/models/checkpoints/, its SHA-256 right
    (a retrained checkpoint shipped without its new digest in the table fails here)."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "models.md").read_text()
    section = text.split("## The packaged weights", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\| `([\w.]+\.pt)` \|.*\| `([0-9a-f]{64})` \|$", section, flags=re.M))
    assert set(rows) == {p.name for p in EMBEDDED_DIR.glob("*.pt")}
    for name, digest in rows.items():
        assert checkpoint_digest(EMBEDDED_DIR / name) == digest, name

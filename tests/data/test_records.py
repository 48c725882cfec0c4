"""One record per dataset (unitta.data.records): the facts other modules ask for come from it, and no module
outside unitta/data/ branches on a dataset's name."""

from __future__ import annotations

import re
from pathlib import Path

from unitta.cell import DEFAULT_MODELS
from unitta.data import load_dataset
from unitta.data.records import DATASETS, RECORDS, dataset_record
from unitta.evaluate.input_checks import DATASET_SHAPES
from unitta.paper import PAPER_DATASETS
from unitta.streams.settings import DATASET_ALIASES

ROOT = Path(__file__).resolve().parents[2]
BRANCH = re.compile(r"""(dataset|name|ds)\s*(==|!=|in)\s*[("']+(fmnist|cifar10|cifar100|imagenet)-c""")


def test_every_table_is_the_records() -> None:
    assert DATASETS == tuple(RECORDS)
    for name, record in RECORDS.items():
        assert DEFAULT_MODELS[name] == record.default_model
        assert DATASET_SHAPES[name] == (record.num_domains, record.num_classes, record.images_per_domain)
        assert PAPER_DATASETS.get(name) == record.paper_table
        assert all(DATASET_ALIASES[alias] == record.preset_family for alias in record.names)
        assert all(dataset_record(alias) is record for alias in record.names)


def test_the_embedded_record_matches_its_data() -> None:
    record = dataset_record("fmnist-c")
    data = load_dataset("fmnist-c", n_per_domain=20)
    assert (data.num_domains, data.num_classes) == (record.num_domains, record.num_classes)
    assert tuple(data.get_batch(data.domains[:1] * 0).shape[1:]) == record.image_shape


def test_no_branch_on_a_dataset_name_outside_unitta_data() -> None:
    found = []
    for path in [*ROOT.glob("unitta/**/*.py"), *ROOT.glob("analysis/**/*.py")]:
        if path.is_relative_to(ROOT / "unitta" / "data"):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if BRANCH.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "ask the dataset record instead:\n" + "\n".join(found)

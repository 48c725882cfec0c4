"""What a cell reads: its dataset, its model and its source data, for every dataset and model a cell can name
(the paper's corruption sets, image folders and the natural-shift sets; zoo models and torchvision/timm/builder
models; docs/own_data.md).

An image folder is decoded at the model's input side, so the model's input size is known before the dataset is
loaded (``input_size``: the zoo's table, or the custom model built once without weights). The number of classes
comes from the dataset; an ImageNet-R/-A cell's model keeps only its dataset's 200 outputs
(``unitta.data.natural.output_mask``).
"""

from __future__ import annotations

from functools import cache

from unitta.cell import Cell
from unitta.data.records import RECORDS

__all__ = ["iid_overrides", "input_size", "load_cell_model", "load_cell_source", "load_dataset_of",
           "model_layers"]


def iid_overrides(cell: Cell, num_domains: int, num_classes: int) -> dict[str, float]:
    """The official sampler's i.i.d. alpha_1 when the stream has fewer domains or classes than the reference's
    defaults assume (1/15 for domains, 1/K of its datasets for classes): an image folder, a natural-shift set, or
    a subset of a paper dataset's corruptions (``corruptions:``, the held-out four of a selection's validation
    streams). Below 1/n no chain exists (paper Cor. 1), so such a stream gets 1/n, the i.i.d. chain. The cell's
    own factors win; all 15 corruptions (0.067 >= 1/15) and the exact sampler (which fixes 1/n itself) get
    nothing."""
    from unitta.streams.settings import Setting, default_factors

    if cell.sampler != "official":
        return {}
    s = Setting.parse(cell.setting)
    defaults = default_factors(s, cell.dataset)
    out = {}
    for attr, corr, n in (("domain", s.domain_corr, num_domains), ("class", s.class_corr, num_classes)):
        key = f"{attr}_alpha"
        if corr == "i" and key not in cell.factors and defaults[key] < 1.0 / n:
            out[key] = 1.0 / n
    return out


@cache
def input_size(dataset: str, model: str | None) -> int:
    """The model's input side in pixels (what an image folder is resized to)."""
    from unitta.models.custom import build_custom, is_custom
    from unitta.models.zoo import model_entry

    if is_custom(model):
        return build_custom(model, 10)[1]
    return model_entry(dataset, model)[1].input_size


def model_layers(cell: Cell):
    """The ``ModelInfo`` of the cell's model, for its layer names (a custom model is built without weights)."""
    from unitta.models import load_model
    from unitta.models.any_model import describe
    from unitta.models.custom import build_custom, is_custom

    if is_custom(cell.model):
        model, size = build_custom(cell.model, 10)
        return describe(model, cell.model, 10, size)
    return load_model(cell.dataset, cell.model, checkpoint_dir=cell.checkpoint_dir)[1]


def load_dataset_of(cell: Cell):
    """The cell's dataset (``unitta.data.load_dataset``); errors propagate (the caller words them)."""
    from unitta.data import load_dataset

    extra = {} if cell.corruptions is None else {"corruptions": cell.corruptions}  # unitta select's validation
    if RECORDS[cell.dataset].loader in ("folder", "natural", "mixture"):
        extra = dict(image_size=input_size(cell.dataset, cell.model), domains=cell.domains, classes=cell.classes,
                     num_workers=cell.num_threads, members=cell.datasets_as_domains)
    dataset = load_dataset(cell.dataset, data_dir=cell.data_dir, severity=cell.severity,
                           n_per_domain=cell.n_per_domain, **extra)
    if cell.cache_images and extra:
        from unitta.data.folder import decode_all

        return decode_all(dataset)
    return dataset


def load_cell_model(cell: Cell, dataset):
    """(model, info) for ``cell`` over ``dataset``: its classes, its output mask, its checkpoint. ``dataset`` None
    (a ccc stream, generated from the clean test set later): the zoo's model of the cell's dataset."""
    from unitta.data.natural import imagenet_outputs
    from unitta.models.any_model import load_any_model

    if dataset is None:
        from unitta.models import load_model

        return load_model(cell.dataset, cell.model, checkpoint_dir=cell.checkpoint_dir,
                          trust_checkpoints=cell.trust_checkpoints)

    outputs = imagenet_outputs(RECORDS[cell.dataset], dataset.meta.get("classes", []))
    return load_any_model(cell.dataset, cell.model, dataset.num_classes, cell.checkpoint, cell.checkpoint_dir,
                          cell.trust_checkpoints, outputs)


def load_cell_source(cell: Cell, dataset):
    """The labelled source split for the methods that need one: ``source_dir`` for an image folder, else the
    dataset's own (a natural-shift set: the split its model was trained on, its record's ``source_from``)."""
    from unitta.data.source import load_source

    if cell.source_dir:
        from unitta.data.folder import FolderSource

        return FolderSource(cell.source_dir, dataset.meta["classes"], input_size(cell.dataset, cell.model),
                            cell.num_threads)
    source_from = RECORDS[cell.dataset].source_from or cell.dataset
    if RECORDS[source_from].loader == "folder":
        raise FileNotFoundError(f"method {cell.method} needs labelled source images: set source_dir: a folder "
                                "ROOT/<class>/<image> with the same class names (docs/own_data.md)")
    return load_source(source_from, data_dir=cell.data_dir)

"""What a cell reads, loaded by one function: ``load_inputs(cell, device)`` gives its dataset, its model (on the
device, the weights checked against the cell's identity), its stream, its source split (for the methods with
``needs_source``) and its clean test images (the forgetting check). ``unitta.evaluate.input_checks`` checks the
same inputs without loading them (the sweep's preflight).

For every dataset and model a cell can name (the paper's corruption sets, image folders and the natural-shift
sets; zoo models and torchvision/timm/builder models; docs/own_data.md). An image folder is decoded at the model's
input side, so the model's input size is known before the dataset is loaded (``input_size``: the zoo's table, or
the custom model built once without weights). The number of classes comes from the dataset; an ImageNet-R/-A
cell's model keeps only its dataset's 200 outputs (``unitta.data.natural.output_mask``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from unitta.cell import Cell
from unitta.data.records import FOLDER_LOADERS, NATURAL_LOADERS, RECORDS

__all__ = ["CellInputs", "DatasetUnavailable", "build_stream", "cell_severities", "iid_overrides", "input_size",
           "load_cell_dataset", "load_cell_model", "load_cell_source", "load_inputs", "model_layers"]


class DatasetUnavailable(RuntimeError):
    """A driver cannot load a cell's dataset (missing, damaged, or a cache it cannot write): one line naming
    the file and the fix, so the sweep stops with exit 2 instead of a traceback."""


@dataclass
class CellInputs:
    """A cell's inputs, loaded: ``model`` on the cell's device in eval mode, ``stream`` with its rounds, ``source``
    None unless the method needs it, ``clean`` None unless the cell checks forgetting."""

    dataset: Any
    model: Any
    info: Any
    stream: Any
    source: Any = None
    clean: Any = None


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
def input_size(dataset: str, model: str | None, override: int | None = None) -> int:
    """The model's input side in pixels (what an image folder is resized to): the cell's ``input_size`` if set."""
    from unitta.models.custom import build_custom, is_custom
    from unitta.models.zoo import model_entry

    if override is not None:
        return override
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


def load_cell_dataset(cell: Cell):
    """The cell's dataset for a driver (loaded once, shared by its cells): ``_load_dataset``'s errors become
    ``DatasetUnavailable``. The loaders report missing and damaged files as FileNotFoundError / ValueError
    (``CacheError``) whose message names the file and what to do (docs/results.md, "Before the first cell")."""
    try:
        return _load_dataset(cell)
    except (OSError, ValueError) as exc:
        raise DatasetUnavailable(f"{cell.dataset}: {exc}".replace("\n", " ")) from None


def cell_severities(cell: Cell) -> tuple[int, ...]:
    """The severities the cell's dataset is loaded at: all five for the gradual orders (their dataset holds every
    (corruption, severity) domain, corruption-major: ``unitta.streams.protocols``), else the cell's one."""
    from unitta.data.records import NUM_SEVERITIES
    from unitta.streams.protocols import GRADUAL_SAMPLERS

    if cell.sampler in GRADUAL_SAMPLERS:
        return tuple(range(1, NUM_SEVERITIES + 1))
    return (cell.severity,)


def _load_dataset(cell: Cell):
    """The cell's dataset (``unitta.data.load_dataset``); errors propagate (a cell's failed row names them)."""
    from unitta.data import load_dataset

    # unitta select's validation streams
    extra: dict[str, Any] = {} if cell.corruptions is None else {"corruptions": cell.corruptions}
    if RECORDS[cell.dataset].loader in FOLDER_LOADERS:
        extra = dict(image_size=input_size(cell.dataset, cell.model, cell.input_size), domains=cell.domains,
                     classes=cell.classes, num_workers=cell.num_threads, members=cell.datasets_as_domains)
    dataset = load_dataset(cell.dataset, data_dir=cell.data_dir, severity=list(cell_severities(cell)),
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
                          cell.trust_checkpoints, outputs, cell.input_size)


def load_cell_source(cell: Cell, dataset):
    """The labelled source split for the methods that need one: ``source_dir`` for an image folder, else the
    dataset's own (a natural-shift set: the split its model was trained on, its record's ``source_from``)."""
    from unitta.data.source import load_source

    if cell.source_dir:
        from unitta.data.folder import FolderSource

        side = input_size(cell.dataset, cell.model, cell.input_size)
        return FolderSource(cell.source_dir, dataset.meta["classes"], side, cell.num_threads)
    source_from = RECORDS[cell.dataset].source_from or cell.dataset
    if RECORDS[source_from].loader == "folder":
        raise FileNotFoundError(f"method {cell.method} needs labelled source images: set source_dir: a folder "
                                "ROOT/<class>/<image> with the same class names (docs/own_data.md)")
    return load_source(source_from, data_dir=cell.data_dir)


def build_stream(cell: Cell, dataset):
    """The cell's stream over ``dataset`` (``unitta.streams.make_stream`` with the cell's factors, S, length)."""
    from unitta.streams import make_stream
    from unitta.streams.settings import default_state_cap

    overrides: dict[str, Any] = {**iid_overrides(cell, dataset.num_domains, dataset.num_classes), **cell.factors}
    if cell.S is not None:
        overrides["S"] = cell.S
    elif cell.n_per_domain is not None and cell.sampler == "official":
        # A subset shrinks every (domain, class) pool; cap S at the pool size so that the stream
        # shrinks with it instead of cycling a few images up to the full dataset's S.
        pool = max(1, cell.n_per_domain // dataset.num_classes)
        overrides["S"] = min(default_state_cap(cell.setting, cell.dataset), pool)
    elif cell.sampler == "official" and RECORDS[cell.dataset].loader in {*FOLDER_LOADERS, *NATURAL_LOADERS}:
        # an image folder's pools are what the user has: cap S at the largest (domain, class) pool so that the
        # stream is about the folder's size instead of cycling a few images up to a paper dataset's S
        pool = int(np.bincount(dataset.domains * dataset.num_classes + dataset.labels).max())
        overrides["S"] = min(default_state_cap(cell.setting, cell.dataset), pool)
    if cell.length is not None:
        overrides["length"] = cell.length
    if cell.delta is not None:
        overrides["delta"] = cell.delta
    return make_stream(
        dataset.labels, dataset.domains, cell.setting, dataset=cell.dataset, sampler=cell.sampler, seed=cell.seed,
        **overrides,
    )


def _check_weights(cell: Cell, info) -> None:
    """Refuse to run with other weights than those in the cell's identity (``Cell.weights``): the checkpoint
    was replaced after the sweep planned the cell, or this node's file differs from the driver's."""
    loaded = (info.extra or {}).get("weights_digest")
    if loaded is not None and loaded != cell.weights:
        raise RuntimeError(
            f"the weights loaded from {info.extra.get('checkpoint')} (sha256 {loaded[:12]}) are not those the "
            f"cell was planned with (sha256 {str(cell.weights)[:12]}): the checkpoint changed during the run or "
            "differs on this node; give every node the same file and rerun"
        )


def load_inputs(cell: Cell, device, dataset=None, model_and_info=None) -> CellInputs:
    """Everything ``cell`` reads, loaded (see the module docstring).

    dataset / model_and_info: already-loaded objects to reuse (the sweep passes the dataset it put in Ray's object
    store); loaded from the cell when None. A ccc cell's images are generated from the clean test set by its
    model (``unitta.evaluate.ccc_calibration``), so its dataset comes with its stream.
    """
    import torch

    from unitta.data.source import load_clean_test
    from unitta.evaluate.horizon import repeat_rounds
    from unitta.methods import method_class
    from unitta.methods.parts.backend import channels_last

    ccc = cell.sampler == "ccc"
    if dataset is None and not ccc:
        dataset = _load_dataset(cell)
    model, info = model_and_info if model_and_info is not None else load_cell_model(cell, dataset)
    _check_weights(cell, info)
    model = model.to(device).eval()
    if channels_last(cell.precision, device):
        model = model.to(memory_format=torch.channels_last)
    if ccc:
        from unitta.evaluate.ccc_calibration import ccc_stream

        stream, dataset = ccc_stream(cell, model, device)
    else:
        stream = build_stream(cell, dataset)
    source = load_cell_source(cell, dataset) if method_class(cell.method).needs_source else None
    clean = load_clean_test(cell.dataset, cell.data_dir, cell.n_per_domain) if cell.forgetting else None
    return CellInputs(dataset, model, info, repeat_rounds(stream, cell.rounds), source, clean)

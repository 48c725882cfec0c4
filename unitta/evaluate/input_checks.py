"""What a cell reads, checked without loading it: ``input_problems(cells)`` returns one line per problem that
``unitta.evaluate.inputs.load_inputs`` would meet, each named once: factor ranges and feasibility (paper Cor. 1,
asked of the stream sampler itself), ``n_per_domain`` feasibility, model names, checkpoint and data presence (the
source split too, for methods with ``needs_source``, and the clean test images of the forgetting check).
The run's preflight (``unitta.run.checks``) prints them all and exits with code 2 before anything is written
(docs/results.md, "Before the first cell"). Cheap: no dataset is loaded, and no zoo model; a torchvision:/timm:/
builder model is built once and its weights loaded, to say before the first cell whether they fit it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from unitta.cell import Cell
from unitta.cell.stream_size import check_played_size
from unitta.data.records import FOLDER_LOADERS, NATURAL_LOADERS, RECORDS, dataset_record
from unitta.data.source import clean_test_problem, source_problem
from unitta.evaluate.inputs import cell_severities, iid_overrides
from unitta.methods import method_class

__all__ = ["DATASET_SHAPES", "dataset_shape", "infeasibility", "input_problems"]

# dataset -> (domains, classes, images per domain): 15 corruptions at one severity; the test sets of
# CIFAR-10/100 and Fashion-MNIST (10,000 images) and ImageNet's validation set (50,000).
DATASET_SHAPES: dict[str, tuple[int, int, int]] = {
    name: (record.num_domains, record.num_classes, record.images_per_domain) for name, record in RECORDS.items()
}


def infeasibility(cell: Cell, num_domains: int, num_classes: int) -> str | None:
    """Why the stream sampler refuses the cell's setting and factors, or None if it accepts them.

    Asks ``make_stream`` itself (its Cor. 1 / range checks), on a stand-in dataset with one image
    per (domain, class) state, so the region is exactly the sampler's and costs milliseconds.
    """
    import numpy as np

    from unitta.streams import make_stream

    labels = np.tile(np.arange(num_classes, dtype=np.int64), num_domains)
    domains = np.repeat(np.arange(num_domains, dtype=np.int64), num_classes)
    if cell.sampler not in ("official", "exact"):
        return None  # the other benchmark's orders take no factors; their setting and delta were checked by Cell
    factors: dict[str, Any] = dict(cell.factors)
    size: dict[str, Any] = {"S": 1} if cell.sampler == "official" else {"length": 4 * num_domains * num_classes}
    size.update(iid_overrides(cell, num_domains, num_classes))
    try:
        make_stream(
            labels, domains, cell.setting, dataset=cell.dataset, sampler=cell.sampler, seed=cell.seed,
            **factors, **size,
        )
    except ValueError as exc:
        return str(exc)
    return None


def _data_problem(dataset: str, data_dir: str | None, severities: tuple[int, ...]) -> str | None:
    """The first problem of the dataset's files at ``severities`` (``cell_severities``: all five for a gradual cell)."""
    from unitta.data import default_data_dir

    record = dataset_record(dataset)
    if record.loader == "mixture":
        return None  # its members' folders are checked when it is indexed (_folder_shape)
    if record.loader in NATURAL_LOADERS:
        from unitta.data.natural import natural_problem

        return natural_problem(record, data_dir, default_data_dir())
    return next(filter(None, (record.data_problem(data_dir, s, default_data_dir()) for s in severities)), None)


def _folder_shape(cell: Cell) -> tuple[tuple[int, int, int] | None, str | None]:
    """(domains, classes, smallest domain) of an image-folder cell's dataset, or a problem naming the path."""
    from unitta.data import default_data_dir
    from unitta.data.folder import FolderProblem
    from unitta.data.mixture import index_any, one_domain_problem

    try:
        index = index_any(cell.dataset, cell.data_dir, default_data_dir(), cell.domains, cell.classes,
                          cell.datasets_as_domains)
    except (FileNotFoundError, ValueError) as exc:
        return None, f"{cell.dataset}: {exc}"
    if index.problems:
        return None, f"{cell.dataset}: {FolderProblem(index.problems)}"
    if one_domain := one_domain_problem(cell.dataset, index.domain_names):
        return None, one_domain
    return (len(index.domain_names), len(index.classes), min(len(f) for f in index.files)), None


def _shape(cell: Cell) -> tuple[tuple[int, int, int] | None, str | None]:
    if RECORDS[cell.dataset].loader in FOLDER_LOADERS:
        severities = cell_severities(cell)
        if RECORDS[cell.dataset].loader != "mixture" and _data_problem(cell.dataset, cell.data_dir, severities):
            return None, None  # the missing folder is reported once, by _data_problem
        return _folder_shape(cell)
    return DATASET_SHAPES[cell.dataset], None


def dataset_shape(cell: Cell) -> tuple[int, int, int]:
    """(domains, classes, images of the smallest domain) of the cell's dataset: the record's, or an image folder's
    index (a folder that cannot be read: (0, 0, 0), and ``problems`` says why)."""
    shape, _ = _shape(cell)
    return shape or (0, 0, 0)


def _imagenet_outputs(cell: Cell) -> list[int] | None:
    """The ImageNet outputs the cell's model keeps (``unitta.data.natural.imagenet_outputs``), from the folder's
    class names; None for a dataset of its own classes."""
    from unitta.data import default_data_dir
    from unitta.data.mixture import index_any
    from unitta.data.natural import imagenet_outputs

    record = RECORDS[cell.dataset]
    if record.loader not in FOLDER_LOADERS:
        return None
    index = index_any(cell.dataset, cell.data_dir, default_data_dir(), cell.domains, cell.classes,
                      cell.datasets_as_domains)
    return imagenet_outputs(record, index.classes)


def _custom_model_problem(cell: Cell, model: str, classes: int) -> str | None:
    """No weights file, or weights that do not fit the model (another architecture, another head size, not a
    checkpoint): the model is built and the weights loaded once, as the cell will."""
    from unitta.models.any_model import load_any_model, weights_file

    path = weights_file(model, cell.checkpoint, cell.checkpoint_dir)
    if path is None or not path.is_file():
        return (f"{cell.dataset}: no weights for model {cell.model!r}"
                + (f" at {path}" if path is not None else "") + "; set checkpoint: PATH (docs/own_data.md)")
    try:
        outputs = _imagenet_outputs(cell)  # an ImageNet model on a subset of ImageNet's classes keeps their rows
        load_any_model(cell.dataset, cell.model, classes, cell.checkpoint, cell.checkpoint_dir, cell.trust_checkpoints,
                       outputs, cell.input_size)
    except (ValueError, OSError) as err:  # CheckpointError is a ValueError
        return f"{cell.dataset}: {err}".replace("\n", " ")
    return None


def _model_problem(cell: Cell, classes: int) -> str | None:
    from unitta.models.custom import is_custom
    from unitta.models.zoo import checkpoint_path, known_models, pickled_code_problem

    if is_custom(cell.model):
        return _custom_model_problem(cell, cell.model, classes)
    if cell.checkpoint:
        return f"{cell.dataset}: checkpoint: is for torchvision:/timm:/builder models; zoo model {cell.model_name!r} " \
               "reads checkpoint_dir"
    known = known_models(cell.dataset)
    if cell.model is not None and cell.model not in known:
        return f"{cell.dataset}: unknown model {cell.model!r}; known: {', '.join(known)}, or torchvision:NAME, " \
               "timm:NAME, my_models.py:build (docs/own_data.md)"
    path = checkpoint_path(cell.dataset, cell.model, cell.checkpoint_dir)
    if not path.is_file():
        where = cell.checkpoint_dir or "ckpt"
        return (f"{cell.dataset}: no checkpoint for {cell.model_name!r} at {path}; run "
                f"`python -m unitta.models fetch {cell.dataset} --name {cell.model_name} --dir {where}` "
                "or set checkpoint_dir")
    return None if cell.trust_checkpoints else pickled_code_problem(path)


def _may_be_infeasible(cell: Cell) -> bool:
    """Whether the sampler could refuse the cell's setting and factors (see ``problems``)."""
    folder = RECORDS[cell.dataset].loader in FOLDER_LOADERS  # its own domain and class counts
    return cell.sampler != "official" or bool(cell.factors) or folder


def input_problems(cells: Iterable[Cell], feasibility: bool = True) -> list[str]:
    """One line per problem that would make cells fail, each named once (empty: all clear).

    feasibility: check each cell's factors against the stream sampler (off for a search's points).
    """
    found: dict[str, None] = {}

    def add(text: str | None) -> None:
        if text:
            found[text] = None

    checked: set[tuple] = set()
    needs_source: dict[tuple, list[str]] = {}
    for cell in cells:
        shape, why = _shape(cell)
        add(why)
        if shape is None:
            add(_data_problem(cell.dataset, cell.data_dir, cell_severities(cell)))
            continue
        domains, classes, per_domain = shape
        # feasibility depends on the factors, not on the seed; the official sampler at its default factors is
        # the reference's own setting (nothing to refuse), and sampling it for ImageNet's 15,000 states takes
        # seconds per setting: `--dry-run` of the paper's grid spent half a minute there
        key = (cell.dataset, cell.setting, cell.sampler, cell.delta, tuple(sorted(cell.factors.items())))
        if feasibility and key not in checked and _may_be_infeasible(cell):
            checked.add(key)
            why = infeasibility(cell, domains, classes)
            if why:
                add(f"{cell.dataset} {cell.setting} factors {cell.factors or 'default'}: {why}")
        if RECORDS[cell.dataset].loader in FOLDER_LOADERS and cell.rounds > 1:
            try:  # the counts on disk: rounds x the folder's round against the cap (docs/long_horizon.md)
                check_played_size(cell.dataset, cell.sampler, cell.setting, cell.S, cell.length, cell.n_per_domain,
                                  cell.rounds, shape)
            except ValueError as err:
                add(f"{cell.dataset}: {err}")
        if cell.n_per_domain is not None and (cell.n_per_domain % classes or cell.n_per_domain > per_domain):
            add(f"n_per_domain: {cell.n_per_domain} is not a multiple of {cell.dataset}'s {classes} classes "
                f"up to {per_domain} images per domain")
        severities = cell_severities(cell)
        data_key = ("data", cell.dataset, cell.data_dir, severities, cell.model, cell.checkpoint_dir, cell.checkpoint)
        if data_key not in checked:
            checked.add(data_key)
            add(_data_problem(cell.dataset, cell.data_dir, severities))
            add(_model_problem(cell, classes))
        if cell.forgetting and ("clean", cell.dataset, cell.data_dir) not in checked:
            checked.add(("clean", cell.dataset, cell.data_dir))
            add(clean_test_problem(cell.dataset, cell.data_dir))
        _note_source_need(cell, needs_source)
    for (dataset, data_dir), methods in needs_source.items():
        why = _source_problem(dataset, data_dir) if methods else None
        if why:
            add(f"{why} (needed by {', '.join(methods)})")
    return list(found)


def _note_source_need(cell: Cell, needs: dict[tuple, list[str]]) -> None:
    """Record that ``cell``'s method needs its dataset's source split (TTAMethod.needs_source)."""
    where = cell.source_dir if RECORDS[RECORDS[cell.dataset].source_from or cell.dataset].loader == "folder" \
        else cell.data_dir
    methods = needs.setdefault((cell.dataset, where), [])
    if cell.method not in methods and method_class(cell.method).needs_source:
        methods.append(cell.method)


def _source_problem(dataset: str, where: str | None) -> str | None:
    """``source_problem`` for every dataset: an image folder's ``source_dir``, a natural-shift set's stand-in."""
    from pathlib import Path

    source_from = RECORDS[dataset].source_from or dataset
    if RECORDS[source_from].loader == "folder":
        if not where:
            return f"{dataset}: no source_dir (ROOT/<class>/<image>, the same class names) for the methods that need it"
        return None if Path(where).is_dir() else f"source_dir {where}: no such folder"
    return source_problem(source_from, where)

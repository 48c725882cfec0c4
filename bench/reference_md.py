"""The mariodoebler TTA benchmark's own method code, imported from a checkout outside this repository, for
``bench/vs_reference.py`` (side-by-side speed on the same batches).

Only the method modules are imported (``classification/methods/<name>.py`` with their base class, augmentations
and utilities): the reference's package ``__init__`` files and its model zoo pull in CLIP, RobustBench and
``yacs``, none of which a method needs. So the bench

- registers the reference's folders as packages of their own (its ``methods/__init__.py`` is not run);
- stands in for ``models/model.py`` with what the method modules use of it: ``BaseModel`` (the encoder /
  classifier split AdaContrast needs; here: every child of the ResNet-20 before ``fc``, flattened, which is what
  the reference's ``split_up_model`` does for its ResNets) and the ``ResNetDomainNet126`` class that the base
  class only tests with ``isinstance``;
- stands in for ``datasets/data_loading.py`` (webdataset, CLIP...) with a ``get_source_loader`` over the source
  images ``set_source`` gives (EATA's Fisher estimate; RMT's, SANTA's and GTTA's source warm-ups are not run);
- fixes two CPU-only failures of the reference, no more (``reference_class``): RoTTA's full-precision branch
  passes an argument its loss does not take, CMF calls ``.cuda()``;
- builds the ``cfg`` object by hand (``config``): the reference's ``conf.py`` defaults for the keys the methods
  read, with its ``cfgs/cifar10_c/<method>.yaml`` values on top (the CIFAR-10-C settings, which the unitta
  methods' defaults follow).

Nothing of the reference is copied into this repository; the checkout is passed with ``--ref``.
"""

from __future__ import annotations

import copy
import importlib
import math
import random
import sys
import types
from pathlib import Path

import torch
from torch import nn

# The files a checkout must hold to be taken for the reference (mariodoebler/test-time-adaptation).
REQUIRED = ("classification/methods/base.py", "classification/methods/cotta.py", "classification/conf.py")
_PACKAGES = ("methods", "models", "utils", "augmentations", "datasets")

# conf.py defaults of the keys the imported methods read (mariodoebler/test-time-adaptation @ 8b2ed63)
DEFAULTS = {
    "MIXED_PRECISION": False,
    "DATA_DIR": "./data",
    "MODEL": {
        "EPISODIC": False, "RESET_AFTER_NUM_UPDATES": 0, "ARCH": "Standard", "CKPT_PATH": "", "ADAPTATION": "source",
    },
    "CORRUPTION": {"DATASET": "cifar10_c"},
    "OPTIM": {
        "STEPS": 1, "LR": 1e-3, "METHOD": "Adam", "BETA": 0.9, "MOMENTUM": 0.9, "DAMPENING": 0.0,
        "NESTEROV": True, "WD": 0.0,
    },
    "BN": {"ALPHA": 0.1},
    "M_TEACHER": {"MOMENTUM": 0.999},
    "CONTRAST": {"TEMPERATURE": 0.1, "PROJECTION_DIM": 128, "MODE": "all"},
    "COTTA": {"RST": 0.01, "AP": 0.92},
    "ADACONTRAST": {
        "QUEUE_SIZE": 16384, "CONTRAST_TYPE": "class_aware", "CE_TYPE": "standard", "ALPHA": 1.0, "BETA": 1.0,
        "ETA": 1.0, "DIST_TYPE": "cosine", "CE_SUP_TYPE": "weak_strong", "REFINE_METHOD": "nearest_neighbors",
        "NUM_NEIGHBORS": 10,
    },
    "LAME": {"AFFINITY": "rbf", "KNN": 5, "SIGMA": 1.0, "FORCE_SYMMETRY": False},
    "EATA": {"FISHER_ALPHA": 2000.0, "D_MARGIN": 0.05, "MARGIN_E0": 0.4},
    "SAR": {"RESET_CONSTANT_EM": 0.2},
    "DEYO": {
        "REWEIGHT_ENT": True, "REWEIGHT_PLPD": True, "PLPD": 0.2, "MARGIN": 0.5, "AUG_TYPE": "patch",
        "OCCLUSION_SIZE": 112, "ROW_START": 56, "COLUMN_START": 56, "PATCH_LEN": 4,
    },
    "ROTTA": {"MEMORY_SIZE": 64, "UPDATE_FREQUENCY": 64, "NU": 0.001, "ALPHA": 0.05, "LAMBDA_T": 1.0, "LAMBDA_U": 1.0},
    "RPL": {"Q": 0.8},
    "ROID": {
        "USE_WEIGHTING": True, "USE_PRIOR_CORRECTION": True, "USE_CONSISTENCY": True, "MOMENTUM_SRC": 0.99,
        "MOMENTUM_PROBS": 0.9, "TEMPERATURE": 1 / 3,
    },
    "CMF": {"ALPHA": 0.99, "GAMMA": 0.99, "Q": 0.005, "TYPE": "lp"},
    "SOURCE": {"NUM_SAMPLES": -1, "PERCENTAGE": 1.0, "NUM_WORKERS": 4},
    "TEST": {"BATCH_SIZE": 64, "WINDOW_LENGTH": 1, "N_AUGMENTATIONS": 32, "DELTA_DIRICHLET": 0.0, "DEBUG": False},
}


class Node(dict):
    """A nested dict read as attributes, the way the reference's methods read their yacs ``CfgNode``."""

    def __getattr__(self, key):
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None


def config(overrides: dict) -> Node:
    """The reference's cfg: ``DEFAULTS`` with ``overrides`` ({"OPTIM": {"LR": 5e-3}, ...}) on top."""
    merged = copy.deepcopy(DEFAULTS)
    for section, values in overrides.items():
        if isinstance(values, dict):
            merged.setdefault(section, {}).update(values)
        else:
            merged[section] = values
    return Node({k: Node(v) if isinstance(v, dict) else v for k, v in merged.items()})


def checkout_problem(path: str | None) -> str | None:
    """One line saying why ``path`` is not a checkout of the reference, or None if it is."""
    if not path:
        return "--ref is required: the folder of a mariodoebler/test-time-adaptation checkout (outside this repository)"
    root = Path(path)
    if not root.is_dir():
        return f"--ref {path}: no such folder; pass a checkout of mariodoebler/test-time-adaptation"
    missing = [f for f in REQUIRED if not (root / f).is_file()]
    if missing:
        return f"--ref {path}: not a mariodoebler/test-time-adaptation checkout (missing {missing[0]})"
    return None


def import_reference(root: Path) -> None:
    """Make the reference's method modules importable as ``methods.<name>`` (module docstring)."""
    base = (Path(root) / "classification").resolve()
    sys.path.insert(0, str(base))
    for name in _PACKAGES:
        package = types.ModuleType(name)
        package.__path__ = [str(base / name)]
        sys.modules[name] = package
    sys.modules["models.model"] = _model_module()
    loading = types.ModuleType("datasets.data_loading")  # its imports need webdataset, CLIP...: not a method's
    loading.get_source_loader = _source_loader
    sys.modules["datasets.data_loading"] = loading


def reference_class(module: str, name: str) -> type:
    """The reference's method class, with the two CPU fixes a run on this machine needs (``_CPU_FIXES``)."""
    cls = getattr(importlib.import_module(f"methods.{module}"), name)
    return _CPU_FIXES.get(name, lambda c: c)(cls)


def _rotta_on_cpu(cls: type) -> type:
    """RoTTA's full-precision branch calls ``loss_calculation(x)``, which takes no argument (only its CUDA
    mixed-precision branch runs at 8b2ed63): the same call without the argument."""

    class RoTTA(cls):
        def loss_calculation(self, x=None):
            return super().loss_calculation()

    return RoTTA


def _cmf_on_cpu(cls: type) -> type:
    """CMF puts its class-prior buffer on the GPU with ``.cuda()``: on a CPU-only machine it stays on the CPU."""

    class CMF(cls):
        def __init__(self, *args, **kwargs):
            cuda = torch.Tensor.cuda
            torch.Tensor.cuda = lambda tensor, *a, **k: tensor if not torch.cuda.is_available() else cuda(tensor)
            try:
                super().__init__(*args, **kwargs)
            finally:
                torch.Tensor.cuda = cuda

    return CMF


_CPU_FIXES = {"RoTTA": _rotta_on_cpu, "CMF": _cmf_on_cpu}


class _Unused(nn.Module):
    """The reference's DomainNet-126 ResNet: its base class only checks ``isinstance`` against it."""


class _BaseModel(nn.Module):
    """What the reference's ``BaseModel`` gives AdaContrast: ``forward(x, return_feats)`` over an encoder (every
    child of the ResNet-20 but ``fc``, flattened) and the classifier ``fc``, with ``num_classes``/``output_dim``."""

    def __init__(self, model: nn.Module, arch_name: str = "", dataset_name: str = ""):
        super().__init__()
        children = dict(model.named_children())
        self.encoder = nn.Sequential(*[m for name, m in children.items() if name != "fc"], nn.Flatten())
        self.fc = children["fc"]

    def forward(self, x: torch.Tensor, return_feats: bool = False):
        feat = torch.flatten(self.encoder(x), 1)
        logits = self.fc(feat)
        return (feat, logits) if return_feats else logits

    @property
    def num_classes(self) -> int:
        return self.fc.out_features

    @property
    def output_dim(self) -> int:
        return self.fc.in_features


_SOURCE: list = []  # the labelled source Dataset ``set_source`` gives the reference's methods


def set_source(dataset) -> None:
    """The labelled source images (a Dataset of (image, label)) the reference's ``get_source_loader`` serves."""
    _SOURCE[:] = [dataset]


def _source_loader(dataset_name: str, adaptation: str, preprocess, data_root_dir: str, batch_size: int,
                   num_samples: int = -1, percentage: float = 1.0, **unused):
    """What the reference's ``get_source_loader`` gives its methods: a random subset of ``num_samples`` (or a
    ``percentage`` of the) source images drawn with Python's ``random``, in shuffled batches of ``batch_size``."""
    if not _SOURCE:
        raise NotImplementedError("the bench gave the reference no source data")
    n = len(_SOURCE[0])
    count = min(num_samples, n) if num_samples > 0 else math.ceil(n * percentage)
    subset = torch.utils.data.Subset(_SOURCE[0], random.sample(range(n), count))
    return subset, torch.utils.data.DataLoader(subset, batch_size=batch_size, shuffle=True)


def _split_up_model(model: nn.Module, arch_name: str = "", dataset_name: str = ""):
    split = _BaseModel(model)
    return split.encoder, split.fc


def _model_module() -> types.ModuleType:
    module = types.ModuleType("models.model")
    module.ResNetDomainNet126 = _Unused
    module.BaseModel = _BaseModel
    module.split_up_model = _split_up_model
    return module

"""The method code of LINs-lab/ttab (SHOT, T3A, Conjugate PL) and yuyongcan/Benchmark-TTA (T3A), loaded from
checkouts outside this repository, for ``bench/vs_authors.py`` (side by side on the same batches and model).

Neither package imports on this machine: ttab's ``ttab/loads`` needs ``torch._utils._accumulate`` (gone from
torch 2) and Wand/ImageMagick for its corruption code, Benchmark-TTA's ``src/`` package pulls in its dataset and
model zoos. Nothing is stubbed instead: ``definitions`` compiles only the named top-level classes and functions of
a file (its source, parsed with ``ast``, unchanged) in a namespace that holds what their bodies use, each either
a real module (torch, numpy, scipy, ttab's importable ``ttab.api`` and ``ttab.utils.auxiliary``) or another
definition loaded the same way from the same checkout:

- ttab: ``BaseAdaptation`` (``model_adaptation/base_adaptation.py``), ``SHOT``, ``T3A``, ``ConjugatePL``, the
  functions ``define_optimizer`` and ``softmax_entropy`` of ``model_adaptation/utils.py`` and the two data-set
  classes whose constructor ``BaseAdaptation.initialize`` runs (``loads/define_dataset.py``
  ``ConstructTestDataset``, ``ConstructAuxiliaryDataset``: they store the config, nothing is loaded);
- Benchmark-TTA: ``T3A`` (``src/methods/T3A.py``) with ``softmax_entropy`` (``src/methods/tent.py``),
  ``split_up_model`` (``src/utils/utils.py``) and ``WideResNet`` (``src/models/WideResNet.py``, for its
  ``isinstance`` test).

One compatibility fix, no more: ttab's Conjugate PL calls ``torch.solve(B, A)``, removed in torch 2; its own
comment names ``torch.linalg.solve(A, B)``, which ``Torch1Solve`` supplies under that name (with ttab's
cross-entropy ``model_eps`` 0 the system is the identity). ttab's T3A calls the timm model API
(``forward_features``, ``forward_head(..., pre_logits=True)``): ``timm_style`` gives the embedded ResNet-20 those
two methods (its forward split at the pooling, the same computation).
"""

from __future__ import annotations

import ast
import copy
import functools
import types
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

# The files a checkout must hold to be taken for each reference.
TTAB_REQUIRED = ("ttab/model_adaptation/shot.py", "ttab/model_adaptation/t3a.py",
                 "ttab/model_adaptation/conjugate_pl.py", "ttab/model_adaptation/base_adaptation.py")
BTTA_REQUIRED = ("src/methods/T3A.py", "src/methods/tent.py", "src/utils/utils.py", "src/models/WideResNet.py")


def checkout_problem(flag: str, path: str | None, required: tuple[str, ...], repo: str) -> str | None:
    """One line saying why ``path`` is not a checkout of ``repo``, or None if it is."""
    if not path:
        return f"{flag} is required: the folder of a {repo} checkout (outside this repository)"
    root = Path(path)
    if not root.is_dir():
        return f"{flag} {path}: no such folder; pass a checkout of {repo}"
    missing = [f for f in required if not (root / f).is_file()]
    if missing:
        return f"{flag} {path}: not a {repo} checkout (missing {missing[0]})"
    return None


def definitions(path: Path, names: tuple[str, ...], namespace: dict[str, Any]) -> dict[str, Any]:
    """Compile the top-level classes/functions ``names`` of the Python file ``path`` into ``namespace`` (module
    docstring) and return it. A name the file does not define is a ValueError."""
    tree = ast.parse(path.read_text(), filename=str(path))
    nodes = [n for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name in names]
    missing = set(names) - {n.name for n in nodes}
    if missing:
        raise ValueError(f"{path}: defines no {sorted(missing)[0]}")
    namespace.setdefault("__name__", f"reference_{path.stem}")
    exec(compile(ast.Module(body=nodes, type_ignores=[]), str(path), "exec"), namespace)  # noqa: S102
    return namespace


class Torch1Solve(types.ModuleType):
    """``torch`` with the torch-1 ``torch.solve(B, A) -> (X, LU)`` ttab's Conjugate PL calls (module docstring)."""

    def __init__(self):
        super().__init__("torch")

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)

    @staticmethod
    def solve(b: torch.Tensor, a: torch.Tensor) -> tuple[torch.Tensor, None]:
        return torch.linalg.solve(a, b), None


@functools.cache
def ttab_classes(root: str) -> dict[str, type]:
    """ttab's SHOT, T3A and ConjugatePL classes (module docstring)."""
    from ttab.api import Batch  # noqa: F401 - importable on its own (numpy, torch)
    from ttab.utils.auxiliary import fork_rng_with_seed

    base = Path(root) / "ttab"
    utils = definitions(base / "model_adaptation/utils.py", ("define_optimizer", "softmax_entropy"),
                        {"torch": torch, "nn": nn})
    adaptation_utils = types.SimpleNamespace(define_optimizer=utils["define_optimizer"],
                                             softmax_entropy=utils["softmax_entropy"])
    datasets = definitions(base / "loads/define_dataset.py", ("ConstructTestDataset", "ConstructAuxiliaryDataset"),
                           {"List": list, "Scenario": Any, "loaders": None, "PyTorchDataset": Any, "TestDomain": Any})
    define_dataset = types.SimpleNamespace(ConstructAuxiliaryDataset=datasets["ConstructAuxiliaryDataset"])
    common = {"copy": copy, "functools": functools, "torch": torch, "nn": nn, "F": F, "np": np, "List": list,
              "Any": Any, "Optional": Any, "Type": type, "adaptation_utils": adaptation_utils,
              "define_dataset": define_dataset, "fork_rng_with_seed": fork_rng_with_seed}
    for name in ("Batch", "BaseSelection", "Metrics", "Logger", "Timer", "loaders", "Quality", "GroupLossComputer"):
        common[name] = Any  # annotations only
    base_ns = definitions(base / "model_adaptation/base_adaptation.py", ("BaseAdaptation",), dict(common))
    classes = {}
    for file, name, extra in (("shot.py", "SHOT", {}), ("t3a.py", "T3A", {}),
                              ("conjugate_pl.py", "ConjugatePL", {"torch": Torch1Solve()})):
        from scipy.spatial.distance import cdist

        ns = {**common, "BaseAdaptation": base_ns["BaseAdaptation"], "cdist": cdist, **extra}
        classes[name] = definitions(base / "model_adaptation" / file, (name,), ns)[name]
    return classes


@functools.cache
def btta_t3a(root: str) -> type:
    """Benchmark-TTA's T3A module class (module docstring)."""
    from timm.models.vision_transformer import VisionTransformer

    src = Path(root) / "src"
    tent = definitions(src / "methods/tent.py", ("softmax_entropy",), {"torch": torch})
    utils = definitions(src / "utils/utils.py", ("split_up_model",), {"nn": nn})
    wrn = definitions(src / "models/WideResNet.py", ("BasicBlock", "NetworkBlock", "WideResNet"),
                      {"torch": torch, "nn": nn, "F": F, "math": __import__("math")})
    ns = {"torch": torch, "nn": nn, "F": F, "softmax_entropy": tent["softmax_entropy"],
          "split_up_model": utils["split_up_model"], "WideResNet": wrn["WideResNet"],
          "VisionTransformer": VisionTransformer}
    return definitions(src / "methods/T3A.py", ("T3A",), ns)["T3A"]


def timm_style(model: nn.Module) -> nn.Module:
    """``model`` (the embedded CIFAR ResNet, not copied) with timm's ``forward_features`` / ``forward_head``, which
    ttab's T3A calls: the trunk up to ``layer3``, then pooling (+ ``fc`` unless ``pre_logits``)."""

    base = type(model)

    class TimmStyle(base):
        def forward_features(self, x):
            return self.layer3(self.layer2(self.layer1(self.relu(self.bn1(self.conv1(self.norm(x)))))))

        def forward_head(self, x, pre_logits: bool = False):
            x = torch.flatten(self.pool(x), 1)
            return x if pre_logits else self.fc(x)

    TimmStyle.__name__ = TimmStyle.__qualname__ = f"TimmStyle{base.__name__}"
    model.__class__ = TimmStyle
    return model


def ttab_config(method: str, seed: int, num_classes: int = 10) -> types.SimpleNamespace:
    """ttab's ``meta_conf`` for one method: ``parameters.py`` defaults and ``configs/algorithms.py``'s entry."""
    conf = types.SimpleNamespace(
        debug=False, n_train_steps=1, model_selection_method="last_iterate", device="cpu", seed=seed, lr=1e-3,
        data_path="", base_data_name="cifar10", model_name="resnet20", batch_size=64, data_wise="batch_wise",
        statistics={"n_classes": num_classes}, offline_pre_adapt=False, stochastic_restore_model=False,
    )
    per_method = {  # ttab configs/algorithms.py
        "shot": {"optimizer": "SGD", "auxiliary_batch_size": 32, "threshold_shot": 0.9, "ent_par": 1.0,
                 "cls_par": 0.3, "offline_nepoch": 10},
        "t3a": {"top_M": 100},
        "conjugate_pl": {"optimizer": "SGD", "temperature_scaling": 1.0, "model_eps": 0.0},
    }
    for key, value in per_method[method].items():
        setattr(conf, key, value)
    return conf

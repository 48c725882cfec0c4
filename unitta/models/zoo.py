"""``load_model``: the embedded models, the paper's robustbench models and the mariodoebler TTA benchmark's
LayerNorm/GroupNorm models, offline (docs/models.md).

The paper's models come from RobustBench's "corruptions" threat model. This module builds each
architecture *without* weights (no network) and loads a local checkpoint in robustbench's layout,
``{checkpoint_dir}/{dataset}/corruptions/{name}.pt``, or, for the torchvision models (ResNet-50, ViT-B/16,
Swin-B) and the GroupNorm ResNet-26, the file under its own name in ``checkpoint_dir`` (torchvision's
``IMAGENET1K_V1`` file names; the mariodoebler benchmark's ``ckpt/resnet26_gn.pth``). robustbench is imported
lazily, only when a paper model is loaded, with the import fixes of docs/models.md.

Every entry states its normalisation kind (``norm_kind``: 'batch', 'layer', 'group'), so that a sweep can
refuse a method that does not run on it before any model is built (``model_norm_kind``).
"""

from __future__ import annotations

import io
import pickle
import re
import warnings
from dataclasses import replace
from pathlib import Path

import torch
from torch import nn

from unitta.data.records import RECORDS
from unitta.models.catalog import (  # noqa: F401 (the constants and Normalized: re-exported, as before the split)
    IMAGENET_MEAN,
    IMAGENET_STD,
    RESNET26_MEAN,
    RESNET26_STD,
    TORCHVISION_R50_FILE,
    ZOO,
    ModelEntry,
    Normalized,
)
from unitta.models.digest import bytes_digest, checkpoint_digest
from unitta.models.info import ModelInfo
from unitta.nn.batchnorm import named_batchnorms
from unitta.nn.norms import named_norms, norm_kind

EMBEDDED_DIR = Path(__file__).parent / "checkpoints"
EMBEDDED_CHECKPOINT = EMBEDDED_DIR / "resnet20_fmnist.pt"
# The weights every result row was computed with before a checkpoint's digest joined a cell's identity
# (docs/results.md, "Resume"): the embedded ResNet-20 as shipped then, and torchvision's ResNet-50 file
# (its name carries the first 8 hex digits of its SHA-256, which torchvision checks on download). Cells
# with exactly these weights keep their earlier ids; any other file puts its digest in the identity.
# Frozen: retraining the embedded model must not add to or change this table.
REFERENCE_WEIGHTS = {
    ("fmnist-c", "resnet20"): "5813b7f52360e653543e59cac6ea72206da9c649a99fee7659c3aee9aa35a401",
    ("imagenet-c", "Standard_R50"): "0676ba61",
}
# The reference's CKPT_DIR (docs/models.md), used when checkpoint_dir is None.
DEFAULT_CHECKPOINT_DIR = "ckpt"


class CheckpointError(ValueError):
    """A checkpoint that is not loaded: not a plain state_dict (unpickling it could run code), or unreadable."""


def list_models() -> dict[str, list[str]]:
    """{dataset: [model names]}; the first name is the dataset's default."""
    return {dataset: list(models) for dataset, models in ZOO.items()}


def model_norm_kind(dataset: str, name: str | None = None) -> str:
    """The normalisation kind of a zoo model ('batch', 'layer', 'group'), known without building it."""
    return model_entry(dataset, name)[1].norm_kind


def known_models(dataset: str) -> list[str]:
    """The zoo models a dataset's cells can name: its own table's, or (an image folder, a natural-shift set: no
    table of its own) every table's, its default first."""
    if dataset in ZOO or dataset not in RECORDS:
        return list(ZOO.get(dataset, []))
    every = [n for models in ZOO.values() for n in models]
    first = RECORDS[dataset].default_model
    return [first, *[n for n in every if n != first]] if first in every else every


def zoo_table(dataset: str, name: str | None) -> str:
    """The zoo table a model is looked up in: the dataset's own, else (an image folder, a natural-shift set) the
    table holding ``name`` (default: the dataset record's default model), e.g. 'resnet20' -> 'fmnist-c'."""
    if dataset in ZOO or dataset not in RECORDS:
        return dataset
    name = name or RECORDS[dataset].default_model
    for table, models in ZOO.items():
        if name in models:
            return table
    return dataset


def model_entry(dataset: str, name: str | None) -> tuple[str, ModelEntry]:
    if name is None and dataset in RECORDS and dataset not in ZOO:
        name = RECORDS[dataset].default_model
    dataset = zoo_table(dataset, name)
    if dataset in RECORDS and dataset not in ZOO:
        known = [n for models in ZOO.values() for n in models]
        raise ValueError(f"model={name!r} for dataset {dataset!r}: expected a zoo model ({', '.join(known)}) or "
                         "torchvision:NAME, timm:NAME, my_models.py:function (docs/own_data.md)")
    if dataset not in ZOO:
        raise ValueError(f"dataset={dataset!r}: expected one of {', '.join(ZOO)}")
    models = ZOO[dataset]
    if name is None:
        name = next(iter(models))
    if name not in models:
        raise ValueError(f"name={name!r} for dataset {dataset!r}: expected one of {', '.join(models)}")
    return name, models[name]


def build_model(dataset: str, name: str | None = None, input_size: int | None = None) -> tuple[nn.Module, ModelInfo]:
    """The architecture with random weights (no checkpoint, no network) and its ModelInfo.

    input_size: another image side than the model's (e.g. a small ViT-B/16 for tests); only the ViT-B/16
    depends on it (its position embeddings), the other models take any size their pooling allows.
    """
    name, entry = model_entry(dataset, name)
    model = entry.build(image_size=input_size) if entry.sized and input_size else entry.build()
    info = ModelInfo(
        name=name,
        dataset=entry.family,
        classifier=entry.classifier,
        bn_layers=tuple(layer for layer, _ in named_batchnorms(model)),
        bdn_layer=entry.bdn_layer,
        num_classes=entry.num_classes,
        input_size=input_size or entry.input_size,
        norm_kind=norm_kind(model),
        norm_layers=tuple(layer for layer, _ in named_norms(model)),
    )
    if info.norm_kind != entry.norm_kind:
        raise RuntimeError(f"zoo entry {name!r} says norm_kind {entry.norm_kind!r}, the model has {info.norm_kind!r}")
    if info.bdn_layer is not None:
        info.check_bn_layer(info.bdn_layer)
    return model, info


def checkpoint_path(dataset: str, name: str | None = None, checkpoint_dir: str | Path | None = None) -> Path:
    """Where ``load_model`` reads the weights: robustbench's ``{dir}/{dataset}/corruptions/{name}.pt``.

    For the models with a file of their own (torchvision's ``{dir}/resnet50-0676ba61.pth``,
    ``{dir}/vit_b_16-c867db91.pth``, ``{dir}/swin_b-68c6b09e.pth``; ``{dir}/resnet26_gn.pth``) this is the
    robustbench-layout file if it exists, else that file. The embedded models (``checkpoints/<name>_fmnist.pt``
    in the package) ignore ``checkpoint_dir``.
    """
    name, entry = model_entry(dataset, name)
    if entry.source == "embedded":
        return EMBEDDED_DIR / f"{name}_fmnist.pt"
    checkpoint_dir = Path(checkpoint_dir if checkpoint_dir is not None else DEFAULT_CHECKPOINT_DIR)
    path = checkpoint_dir / entry.rb_dataset / "corruptions" / f"{name}.pt"
    if entry.weights_file is not None and not path.exists():
        return checkpoint_dir / entry.weights_file
    return path


def _missing(dataset: str, name: str, checkpoint_dir: Path) -> FileNotFoundError:
    _, entry = model_entry(dataset, name)
    rb_path = checkpoint_dir / entry.rb_dataset / "corruptions" / f"{name}.pt"
    if entry.source == "embedded":
        return FileNotFoundError(
            f"embedded checkpoint {checkpoint_path(dataset, name)} is missing; retrain it with "
            f"`python -m unitta.models train fmnist --arch {name}` (a few minutes on a CPU)"
        )
    if entry.torchvision_weights is not None:
        file_path = checkpoint_dir / entry.weights_file
        return FileNotFoundError(
            f"no checkpoint for {name!r}: expected torchvision's {entry.torchvision_weights} weights at {file_path} "
            f"(or a robustbench-layout state_dict at {rb_path}). With internet run "
            f"`python -m unitta.models fetch {dataset} --name {name} --dir {checkpoint_dir}`; offline, run it on a "
            f"machine with internet and copy {entry.weights_file} (or torchvision's "
            f"~/.cache/torch/hub/checkpoints/ copy) to {file_path}"
        )
    if entry.weights_file is not None:
        file_path = checkpoint_dir / entry.weights_file
        return FileNotFoundError(
            f"no checkpoint for {name!r}: expected the mariodoebler benchmark's {entry.weights_file} at {file_path} "
            f"(or a state_dict at {rb_path}); nothing downloads it: copy the file you trained or were given "
            "there (docs/models.md)"
        )
    return FileNotFoundError(
        f"no checkpoint for {name!r}: expected {rb_path}. With internet run "
        f"`python -m unitta.models fetch {dataset} --name {name} --dir {checkpoint_dir}`; offline, run it on a "
        f"machine with internet and copy {entry.rb_dataset}/corruptions/{name}.pt to {rb_path}"
    )


def read_state_dict(path: Path, trust_checkpoints: bool = False) -> dict[str, torch.Tensor]:
    """A checkpoint's state_dict (see ``read_checkpoint``)."""
    return read_checkpoint(path, trust_checkpoints)[0]


def pickled_code_problem(path: Path) -> str | None:
    """One line when the checkpoint at ``path`` pickles more than tensors (``read_checkpoint`` would refuse it
    without ``trust_checkpoints``), else None; scans the pickle's globals, loads nothing, runs nothing."""
    try:
        unsafe = torch.serialization.get_unsafe_globals_in_checkpoint(str(path))
    except Exception:  # noqa: BLE001 - not a zip checkpoint (legacy format, a plain pickle): read_checkpoint says
        try:  # a legacy torch file's first pickle is its magic number: no globals, nothing named
            with open(path, "rb") as f:
                unsafe = pickled_globals(f.read(4 << 20))
        except OSError:
            return None
        if not unsafe:
            return None
        return (f"{path}: a plain pickle (pickle.dump, not torch.save) that pickles {unsafe[0]} (unpickling it "
                "could run code from the file); re-save the weights with torch.save(model.state_dict(), PATH)")
    if not unsafe:
        return None
    return (f"{path}: not a plain state_dict (it pickles {unsafe[0]}; unpickling it could run code from the file); "
            "if you trust the file, set trust_checkpoints: true, or re-save it as a plain state_dict")


def pickled_globals(data: bytes) -> list[str]:
    """The classes and functions a plain pickle (``pickle.dump``, not ``torch.save``) would import, read from its
    opcodes without unpickling anything; empty when ``data`` is no pickle or imports nothing."""
    import pickletools

    found, strings = [], []
    try:
        for op, arg, _ in pickletools.genops(data):
            if op.name == "GLOBAL":
                found.append(str(arg).replace(" ", "."))
            elif op.name == "STACK_GLOBAL" and len(strings) >= 2:
                found.append(f"{strings[-2]}.{strings[-1]}")
            elif isinstance(arg, str):
                strings.append(arg)
    except Exception:  # noqa: BLE001 - not a pickle (or cut short): nothing named
        pass
    return list(dict.fromkeys(found))


def read_checkpoint(path: Path, trust_checkpoints: bool = False) -> tuple[dict[str, torch.Tensor], str]:
    """A checkpoint's state_dict and the SHA-256 of the bytes it was read from (``unitta.models.digest``).

    Unwraps 'state_dict'/'model_state_dict' and strips 'module.' prefixes. The file is read once and
    both the digest and the weights come from those bytes, so the digest is that of the weights loaded.
    Loaded with ``torch.load(weights_only=True)``, which unpickles tensors and plain containers only.
    A checkpoint under the key 'net' (the mariodoebler benchmark's ``resnet26_gn.pth``) is unwrapped the same way.
    A file that needs more (arbitrary pickled objects, whose unpickling can run any code) is a
    CheckpointError unless ``trust_checkpoints`` (the explicit opt-in for files from a trusted source).
    """
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise CheckpointError(f"{path}: cannot be read ({err.strerror or err})") from err
    not_torch = (f"{path}: not a torch checkpoint (its bytes are no saved state_dict); give the file the weights "
                 "were saved to with torch.save (or a .safetensors file)")
    if code := pickled_globals(data):  # a pickle.dump of a model: code, not a torch file
        not_torch = (f"{path}: a plain pickle (pickle.dump, not torch.save) that pickles {code[0]} (unpickling it "
                     "could run code from the file), so it is not loaded; re-save the weights with "
                     "torch.save(model.state_dict(), PATH)")
    try:
        checkpoint = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        found = re.search(r"Unsupported global: GLOBAL ([\w.]+)", str(err))
        if found is None:  # not a pickle of objects at all: random bytes, text, another format
            raise CheckpointError(not_torch) from None
        if not trust_checkpoints:
            reason = f"it pickles {found.group(1)}"
            raise CheckpointError(
                f"{path}: not a plain state_dict, so it is not loaded ({reason}; unpickling it could run code from "
                "the file); if you trust the file, opt in with trust_checkpoints=True (sweep YAML "
                "`trust_checkpoints: true`, or --trust-checkpoints), or re-save it as a plain state_dict"
            ) from err
        warnings.warn(f"{path}: not loadable with weights_only=True; unpickling it as trusted", stacklevel=3)
        checkpoint = torch.load(io.BytesIO(data), map_location="cpu", weights_only=False)
    except (RuntimeError, EOFError, OSError) as err:  # truncated / not a torch file
        raise CheckpointError(f"{path}: not a readable torch checkpoint ({err}); delete it and fetch it again") from err
    except (KeyError, ValueError, TypeError, IndexError, AttributeError):  # the legacy unpickler on text and such
        raise CheckpointError(not_torch) from None
    for key in ("state_dict", "model_state_dict", "net"):  # 'net': the ResNet-26 GN's checkpoint (MEMO / TTT)
        if isinstance(checkpoint, dict) and key in checkpoint and isinstance(checkpoint[key], dict):
            checkpoint = checkpoint[key]
            break
    if not isinstance(checkpoint, dict):
        raise ValueError(f"{path}: expected a state_dict (a dict of tensors), got {type(checkpoint).__name__}")
    state = {(k[len("module.") :] if k.startswith("module.") else k): v for k, v in checkpoint.items()}
    return state, bytes_digest(data)


def is_reference_weights(dataset: str, name: str | None, digest: str | None) -> bool:
    """Whether ``digest`` is of the weights ``REFERENCE_WEIGHTS`` names for this model (a prefix for R50)."""
    reference = REFERENCE_WEIGHTS.get((dataset, name or model_entry(dataset, None)[0]))
    return bool(reference and digest and digest.startswith(reference))


def weights_digest(dataset: str, name: str | None = None, checkpoint_dir: str | Path | None = None) -> str | None:
    """The SHA-256 of the checkpoint ``load_model`` would read now (cached per file), or None when it is
    missing or the dataset/model is unknown (``load_model`` then fails with the reason)."""
    try:
        return checkpoint_digest(checkpoint_path(dataset, name, checkpoint_dir))
    except ValueError:
        return None


def load_weights(model: nn.Module, state: dict[str, torch.Tensor], entry: ModelEntry, path: Path) -> None:
    if entry.inner:
        # torchvision's (and resnet26_gn.pth's) file has bare keys; a robustbench-layout file of the wrapper has
        # 'model.'/'normalize.' keys.
        prefix = entry.inner + "."
        state = {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)} or {
            k: v for k, v in state.items() if not k.startswith("normalize.")
        }
        target = model.get_submodule(entry.inner)
    else:
        target = model
    missing, unexpected = target.load_state_dict(state, strict=False)
    if missing or unexpected:
        raise ValueError(
            f"{path} does not fit {type(target).__name__}: "
            f"missing keys {missing[:5]}{'...' if len(missing) > 5 else ''}, "
            f"unexpected keys {unexpected[:5]}{'...' if len(unexpected) > 5 else ''}"
        )


def load_model(
    dataset: str = "fmnist-c",
    name: str | None = None,
    checkpoint_dir: str | Path | None = None,
    trust_checkpoints: bool = False,
) -> tuple[nn.Module, ModelInfo]:
    """Load a source model in eval mode, offline, with its metadata (docs/models.md).

    dataset: 'fmnist-c' (embedded ResNet-20; 'vit_tiny'), 'cifar10-c' ('Standard' WRN-28-10; 'resnet26_gn'),
        'cifar100-c' ('Hendrycks2020AugMix_ResNeXt'), 'imagenet-c' ('Standard_R50'; 'vit_b_16', 'swin_b').
    name: model name (``list_models()``); None picks the dataset's default (the paper's model).
    checkpoint_dir: robustbench model directory (see ``checkpoint_path``; None: './ckpt', the reference's
        CKPT_DIR); unused for 'fmnist-c'.

    trust_checkpoints: also load checkpoints that need full unpickling (which can run code from the
        file); off by default, so such a file is a CheckpointError naming it.

    Every model takes images in [0, 1] (input normalisation is inside the model). ``info.extra`` names the
    checkpoint file and the SHA-256 of the bytes loaded (``weights_digest``, part of a cell's identity).
    A missing checkpoint is a FileNotFoundError naming the path and how to obtain it
    (``python -m unitta.models fetch``); nothing is downloaded.
    """
    name, entry = model_entry(dataset, name)
    checkpoint_dir = Path(checkpoint_dir if checkpoint_dir is not None else DEFAULT_CHECKPOINT_DIR)
    path = checkpoint_path(dataset, name, checkpoint_dir)
    if not path.is_file():
        raise _missing(dataset, name, checkpoint_dir)
    model, info = build_model(dataset, name)
    state, digest = read_checkpoint(path, trust_checkpoints)
    load_weights(model, state, entry, path)
    return model.eval(), replace(info, extra={"checkpoint": str(path), "weights_digest": digest})

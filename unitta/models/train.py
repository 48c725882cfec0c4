"""Train the embedded models on Fashion-MNIST (docs/models.md, "The embedded ResNet-20", "The embedded ViT").

Both recipes: images zero-padded 28 -> 32 and repeated to 3 channels, random +-2 px shift and horizontal
flip, one-cycle schedule, batch 128, channels_last.
- ``resnet20`` (BatchNorm): SGD with Nesterov momentum 0.9, weight decay 5e-4, max learning rate 0.2,
  3 epochs (docs/models.md, "The embedded ResNet-20").
- ``vit_tiny`` (LayerNorm): AdamW, weight decay 0.05, max learning rate 2e-3 (the usual small-ViT
  recipe, e.g. DeiT's AdamW + weight decay 0.05), 30 epochs (docs/models.md, "The embedded ViT").

    python -m unitta.models train fmnist --epochs 3 --out unitta/models/checkpoints/resnet20_fmnist.pt
    python -m unitta.models train fmnist --arch vit_tiny --threads 2
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm import tqdm

from unitta.models.resnet import CifarResNet
from unitta.models.vit import vit_tiny
from unitta.models.zoo import EMBEDDED_DIR

# arch -> (optimizer, epochs, max_lr, weight_decay): the recipes of the module docstring
RECIPES: dict[str, tuple[str, int, float, float]] = {
    "resnet20": ("sgd", 3, 0.2, 5e-4),
    "vit_tiny": ("adamw", 30, 2e-3, 0.05),
}


def default_checkpoint(arch: str) -> Path:
    """Where the packaged checkpoint of ``arch`` lives: ``checkpoints/<arch>_fmnist.pt``."""
    return EMBEDDED_DIR / f"{arch}_fmnist.pt"


@dataclass(frozen=True)
class TrainConfig:
    """Training hyper-parameters; defaults (None): the recipe of ``arch`` (``RECIPES``, docs/models.md)."""

    arch: str = "resnet20"
    epochs: int | None = None
    batch_size: int = 128
    max_lr: float | None = None
    momentum: float = 0.9
    weight_decay: float | None = None
    shift: int = 2  # +-2 px random translation
    seed: int = 0
    depth: int = 20
    threads: int = 2
    limit: int | None = None  # train and test on the first `limit` images only (smoke tests)

    def __post_init__(self) -> None:
        if self.arch not in RECIPES:
            raise ValueError(f"arch={self.arch!r}: expected one of {', '.join(RECIPES)}")
        _, epochs, max_lr, weight_decay = RECIPES[self.arch]
        for key, value in (("epochs", epochs), ("max_lr", max_lr), ("weight_decay", weight_decay)):
            if getattr(self, key) is None:
                object.__setattr__(self, key, value)
        if self.epochs < 1:
            raise ValueError(f"epochs={self.epochs}: expected >= 1")
        if self.batch_size < 2:
            raise ValueError(f"batch_size={self.batch_size}: expected >= 2 (BatchNorm needs 2+ images)")
        if self.max_lr <= 0:
            raise ValueError(f"max_lr={self.max_lr}: expected > 0")
        if not 0 <= self.shift <= 8:
            raise ValueError(f"shift={self.shift}: expected 0..8 pixels")
        if self.threads < 1:
            raise ValueError(f"threads={self.threads}: expected >= 1")
        if self.limit is not None and self.limit < self.batch_size:
            raise ValueError(f"limit={self.limit}: expected >= batch_size ({self.batch_size}) or None")


@dataclass(frozen=True)
class TrainResult:
    path: Path
    train_seconds: float
    test_error: float  # clean Fashion-MNIST test error in [0, 1]
    test_images: int
    epochs: int


def pad_to_32(images: np.ndarray) -> np.ndarray:
    """uint8 (N, 28, 28) -> uint8 (N, 32, 32), zero border of 2 px (as Fashion-MNIST-C)."""
    if images.ndim != 3 or images.shape[1:] != (28, 28):
        raise ValueError(f"images.shape={images.shape}: expected (N, 28, 28)")
    return np.pad(images, ((0, 0), (2, 2), (2, 2)))


def to_input(images: np.ndarray | Tensor) -> Tensor:
    """uint8 (N, 32, 32) grey -> float (N, 3, 32, 32) in [0, 1], channels_last, the model's input."""
    x = torch.as_tensor(images).float().div_(255.0).unsqueeze(1).expand(-1, 3, -1, -1)
    return x.contiguous(memory_format=torch.channels_last)


def augment(batch: Tensor, shift: int, gen: torch.Generator) -> Tensor:
    """Random +-``shift`` px translation (zero fill) and horizontal flip per image; uint8 (B, 32, 32)."""
    b, h, w = batch.shape
    padded = F.pad(batch, (shift, shift, shift, shift))
    dy = torch.randint(0, 2 * shift + 1, (b,), generator=gen)
    dx = torch.randint(0, 2 * shift + 1, (b,), generator=gen)
    flip = torch.rand(b, generator=gen) < 0.5
    rows = (dy[:, None] + torch.arange(h)[None, :])[:, :, None]  # (B, H, 1)
    cols = dx[:, None] + torch.arange(w)[None, :]  # (B, W)
    cols = torch.where(flip[:, None], cols.flip(1), cols)[:, None, :]  # (B, 1, W)
    return padded[torch.arange(b)[:, None, None], rows, cols]


@torch.no_grad()
def clean_error(model: nn.Module, images: np.ndarray, labels: np.ndarray, batch_size: int = 500) -> float:
    """Top-1 error of ``model`` (eval mode) on uint8 (N, 32, 32) images."""
    model.eval()
    wrong = 0
    for start in range(0, len(images), batch_size):
        logits = model(to_input(images[start : start + batch_size]))
        wrong += int((logits.argmax(1) != torch.as_tensor(labels[start : start + batch_size])).sum())
    return wrong / len(images)


def build_resnet(depth: int, seed: int) -> CifarResNet:
    """The untrained ResNet, initialised from ``seed`` without touching the caller's global RNG."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return CifarResNet(depth=depth)


def build_network(depth: int, seed: int, arch: str = "resnet20") -> nn.Module:
    """The untrained network of ``arch`` (the ResNet of ``depth``, or the ViT), initialised from ``seed``."""
    if arch != "vit_tiny":
        return build_resnet(depth, seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return vit_tiny()


def _optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    if RECIPES[cfg.arch][0] == "adamw":
        # no weight decay on biases, norms, the class token and position embeddings (1-d or token parameters)
        decay = [p for n, p in model.named_parameters() if p.ndim > 1 and not n.endswith(("_token", "_embed"))]
        rest = [p for n, p in model.named_parameters() if not (p.ndim > 1 and not n.endswith(("_token", "_embed")))]
        groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": rest, "weight_decay": 0.0}]
        return torch.optim.AdamW(groups, lr=cfg.max_lr)
    return torch.optim.SGD(
        model.parameters(), lr=cfg.max_lr, momentum=cfg.momentum, nesterov=True, weight_decay=cfg.weight_decay
    )


def train_fmnist(cfg: TrainConfig = TrainConfig(), out: Path | str | None = None) -> TrainResult:
    """Train on the 60k Fashion-MNIST training images, write the float32 state_dict to ``out``
    (default: the packaged checkpoint of ``cfg.arch``)."""
    out = default_checkpoint(cfg.arch) if out is None else out
    from unitta.data.fashion_mnist import read_fashion_mnist

    torch.set_num_threads(cfg.threads)
    gen = torch.Generator().manual_seed(cfg.seed)
    train_x, train_y = read_fashion_mnist("train")
    if cfg.limit is not None:
        train_x, train_y = train_x[: cfg.limit], train_y[: cfg.limit]
    train_x = torch.from_numpy(pad_to_32(train_x))
    train_y = torch.from_numpy(train_y)

    model = build_network(cfg.depth, cfg.seed, cfg.arch).to(memory_format=torch.channels_last)
    steps_per_epoch = len(train_x) // cfg.batch_size  # drop the last partial batch
    opt = _optimizer(model, cfg)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=cfg.max_lr, total_steps=cfg.epochs * steps_per_epoch)

    start = time.perf_counter()
    for epoch in range(cfg.epochs):
        model.train()
        order = torch.randperm(len(train_x), generator=gen)
        bar = tqdm(range(steps_per_epoch), desc=f"epoch {epoch + 1}/{cfg.epochs}", mininterval=5.0)
        for step in bar:
            idx = order[step * cfg.batch_size : (step + 1) * cfg.batch_size]
            x = to_input(augment(train_x[idx], cfg.shift, gen))
            loss = F.cross_entropy(model(x), train_y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            if step % 20 == 0:
                bar.set_postfix(loss=f"{loss.item():.3f}", lr=f"{sched.get_last_lr()[0]:.3f}")
    seconds = time.perf_counter() - start

    test_x, test_y = read_fashion_mnist("test")
    if cfg.limit is not None:
        test_x, test_y = test_x[: cfg.limit], test_y[: cfg.limit]
    error = clean_error(model, pad_to_32(test_x), test_y)

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().to(torch.float32).contiguous() for k, v in model.state_dict().items()}
    # BatchNorm's num_batches_tracked is int64: keep its dtype
    state.update({k: v for k, v in model.state_dict().items() if not v.is_floating_point()})
    tmp = out.with_name(out.name + f".tmp{os.getpid()}")
    torch.save(state, tmp)
    tmp.replace(out)
    return TrainResult(path=out, train_seconds=seconds, test_error=error, test_images=len(test_y), epochs=cfg.epochs)

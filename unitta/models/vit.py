"""The embedded LayerNorm model: a tiny Vision Transformer for Fashion-MNIST-C (docs/models.md).

Architecture of Dosovitskiy et al., ICLR'21 (ViT), sec. 3.1, scaled down for 32x32 inputs: 4x4 patches
(64 tokens) embedded by a strided convolution, a class token and learned position embeddings, ``depth``
pre-norm encoder blocks (LayerNorm -> multi-head self-attention, LayerNorm -> GELU MLP, each with a residual
connection), a final LayerNorm and a linear classifier ``head`` on the class token. Every normalisation
layer is a LayerNorm, so the BatchNorm-statistics TTA methods do not apply and the affine-adapting ones
adapt the LayerNorms (docs/methods.md, "Normalisation kinds").

Input normalisation lives inside the model (as in the ResNet-20), so it takes images in [0, 1].
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from unitta.models.resnet import FMNIST_MEAN, FMNIST_STD, Normalize

__all__ = ["TinyViT", "vit_tiny"]


class Attention(nn.Module):
    """Multi-head self-attention over (B, N, D) tokens (ViT paper, eq. 2)."""

    def __init__(self, dim: int, heads: int):
        super().__init__()
        if dim % heads:
            raise ValueError(f"dim={dim} is not a multiple of heads={heads}")
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: Tensor) -> Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).view(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)  # 3 x (B, h, N, d/h)
        out = F.scaled_dot_product_attention(q, k, v)  # (B, h, N, d/h)
        return self.proj(out.transpose(1, 2).reshape(b, n, d))


class Block(nn.Module):
    """Pre-norm transformer encoder block (ViT paper, eq. 2-3)."""

    def __init__(self, dim: int, heads: int, mlp_ratio: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_ratio * dim), nn.GELU(), nn.Linear(mlp_ratio * dim, dim))

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TinyViT(nn.Module):
    """ViT for square inputs in [0, 1]; layers ``norm, patch_embed, cls_token, pos_embed, blocks, ln, head``."""

    def __init__(
        self,
        image_size: int = 32,
        patch_size: int = 4,
        dim: int = 64,
        depth: int = 6,
        heads: int = 4,
        mlp_ratio: int = 2,
        num_classes: int = 10,
        in_channels: int = 3,
        mean: tuple[float, ...] = (FMNIST_MEAN,) * 3,
        std: tuple[float, ...] = (FMNIST_STD,) * 3,
    ):
        super().__init__()
        if image_size % patch_size:
            raise ValueError(f"image_size={image_size} is not a multiple of patch_size={patch_size}")
        if depth < 1 or num_classes < 2:
            raise ValueError(f"depth={depth}, num_classes={num_classes}: expected depth >= 1, num_classes >= 2")
        tokens = (image_size // patch_size) ** 2
        self.norm = Normalize(mean, std)
        self.patch_embed = nn.Conv2d(in_channels, dim, patch_size, stride=patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, tokens + 1, dim))
        self.blocks = nn.Sequential(*(Block(dim, heads, mlp_ratio) for _ in range(depth)))
        self.ln = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                nn.init.zeros_(m.bias)

    def forward(self, x: Tensor) -> Tensor:
        tokens = self.patch_embed(self.norm(x)).flatten(2).transpose(1, 2)  # (B, N, D)
        cls = self.cls_token.expand(tokens.shape[0], -1, -1)
        tokens = torch.cat([cls, tokens], dim=1) + self.pos_embed  # (B, N + 1, D)
        return self.head(self.ln(self.blocks(tokens))[:, 0])


def vit_tiny(num_classes: int = 10) -> TinyViT:
    """The embedded ViT: 4x4 patches, width 64, 6 blocks of 4 heads, MLP ratio 2 (docs/models.md)."""
    return TinyViT(num_classes=num_classes)

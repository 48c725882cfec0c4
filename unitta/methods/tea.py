"""TEA: test-time energy adaptation (Yuan, Xu, Hou, Sun, Shen, Cheng; CVPR'24).

The classifier f is read as an energy-based model of its inputs (paper sec. 3, after JEM, Grathwohl et al.
ICLR'20): E(x) = -log sum_y exp f(x)[y], p(x) proportional to exp(-E(x)). TEA aligns that model with the test
distribution by contrastive divergence on the normalisation layers' affine parameters, the negative samples
drawn by stochastic gradient Langevin dynamics (SGLD) from a persistent replay buffer (authors' code
yuanyige/tea ``core/adazoo/energy.py``; docs/methods.md "TEA"). Per batch x of B images:

    x_0   = B buffer images drawn uniformly, each replaced with probability reinit_freq by U(-1, 1) noise
    x_k+1 = x_k - sgld_lr * dE/dx(x_k) + sgld_std * N(0, I),    k = 0 .. sgld_steps - 1   (paper eq. 8)
    the buffer's drawn slots <- x_K
    one step on  L = mean_i E(x_i) - mean_j E(x_K,j)                                       (paper eq. 7)
    predict f(x) with the updated parameters (a third forward: the authors' ``classify`` after the step)

BatchNorms normalise with the batch's own statistics (the test batch, or the SGLD batch), and only the affine
weight and bias of every BatchNorm / LayerNorm / GroupNorm adapt (``norm/affine.py``; the authors' ``ADA_PARAM:
[bn]``, and ``gn`` for GroupNorm models). The replay buffer starts as ``buffer_size`` images of U(-1, 1) noise of
the test images' shape, made at the first batch (one-off set-up) and kept on the model's device.

Everything stays on the device: the buffer, the draws (a generator on the device seeded from the method's seed,
``parts/device.py``), the SGLD chain (gradients with respect to the inputs only, never read on the host), the
buffer's update (an index write). The draws are made in the authors' order (buffer noise, then per batch the
buffer indices, the reinitialisation noise, the reinitialisation coins, one Gaussian per step), so on the CPU, with
the authors' global RNG seeded like the chain's generator, the samples are theirs up to float rounding
(bench/vs_authors.py).

Hyper-parameters (the authors' ``cfgs/cifar10/energy.yaml``, the only config they publish; the paper runs
CIFAR-10/100, TinyImageNet and PACS): Adam lr 1e-3, one step per batch, SGLD 20 steps of size 0.1 with noise
0.01, a buffer of 10,000 images, reinitialisation 0.05, unconditional sampling (``EBM.UNCOND``). The same for
every dataset family; on 224-pixel images the default buffer holds 10,000 x 3 x 224 x 224 floats (6 GB on the
device): lower ``buffer_size`` where that does not fit.

Deviations:
- From the authors' code: the random numbers come from the method's seeded generator, not torch's global RNG;
  the model stays in eval mode (the authors switch train/eval around the chain: the same computation with
  batch-statistics BatchNorm and no dropout); the chain's input gradients do not retain the graph between
  steps (the authors' ``retain_graph=True`` keeps memory only). The authors' class-conditional sampling
  (``EBM.UNCOND: cond``) and visualisation are not built.
- LayerNorm / GroupNorm affine parameters adapt too (as unitta's TENT, md's ``configure_model``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from unitta.methods.norm.affine import adapt_norm_affine
from unitta.methods.parts.device import device_generator
from unitta.methods.parts.optim import optimizer_from_config
from unitta.methods.parts.registry import register_method
from unitta.methods.parts.search_space import ADAM_LR
from unitta.methods.parts.tta_method import TTAMethod
from unitta.methods.parts.validate import check_at_least, check_positive, check_probability
from unitta.search_dimensions import LogUniform, Uniform

__all__ = ["TEA", "energy"]

NOISE_LOW, NOISE_HIGH = -1.0, 1.0  # authors' init_random: uniform_(-1, 1)


def energy(logits: Tensor) -> Tensor:
    """E(x) = -logsumexp_y f(x)[y] per sample (B,) (paper eq. 4; the authors' EnergyModel returns its negative)."""
    return -logits.logsumexp(dim=1)


@register_method("tea")
class TEA(TTAMethod):
    """TEA (Yuan et al., CVPR'24): contrastive divergence between test images and SGLD samples of the model's
    energy, on the normalisation layers' affine parameters."""

    version = 1
    norm_kinds = ("batch", "layer", "group")  # authors' ADA_PARAM bn / gn; LN as unitta's TENT

    @dataclass(frozen=True)
    class Config:
        optimizer: Literal["adam", "sgd"] = "adam"  # yuanyige/tea cfgs/cifar10/energy.yaml OPTIM.METHOD
        lr: float = 1e-3  # energy.yaml OPTIM.LR (betas 0.9, 0.999: OPTIM.BETA)
        steps: int = 1  # energy.yaml OPTIM.STEPS
        sgld_steps: int = 20  # energy.yaml EBM.STEPS
        sgld_lr: float = 0.1  # energy.yaml EBM.SGLD_LR (core/config.py's default is 1.0)
        sgld_std: float = 0.01  # energy.yaml EBM.SGLD_STD
        buffer_size: int = 10000  # energy.yaml EBM.BUFFER_SIZE
        reinit_freq: float = 0.05  # energy.yaml EBM.REINIT_FREQ

        def __post_init__(self) -> None:
            check_positive("lr", self.lr)
            check_at_least("steps", self.steps, 1)
            check_at_least("sgld_steps", self.sgld_steps, 1, "TEA needs at least one Langevin step per sample")
            check_positive("sgld_lr", self.sgld_lr)
            check_at_least("sgld_std", self.sgld_std, 0.0)
            check_at_least("buffer_size", self.buffer_size, 1, "the replay buffer's images")
            check_probability("reinit_freq", self.reinit_freq)

    # ``unitta methods check``: a 4-step chain (20 steps x 64 images take about a minute on a CPU); what it checks
    # (finite scores, reset, determinism, cost, host syncs) does not depend on the chain's length
    check_overrides = {"sgld_steps": 4}

    # no presets: the authors publish cifar10/energy.yaml only, and run those values on every dataset they report

    space = {  # docs/methods.md "Search spaces"
        "lr": ADAM_LR,  # published 1e-3 (Adam, energy.yaml OPTIM.LR)
        "sgld_lr": LogUniform(0.01, 1.0),  # published 0.1 (energy.yaml) and 1.0 (core/config.py default)
        "sgld_std": LogUniform(1e-3, 0.1),  # published 0.01 (EBM.SGLD_STD): a decade either side
        "reinit_freq": Uniform(0.0, 0.2),  # published 0.05 (EBM.REINIT_FREQ; JEM's value too)
    }

    def setup(self) -> None:
        self.optimizer = optimizer_from_config(adapt_norm_affine(self.model), self.cfg)
        self.chain_generator = device_generator(self.generator, self.device)
        self.buffer: Tensor | None = None  # made at the first batch: its images take the test images' shape

    def forward(self, x: Tensor) -> Tensor:
        if self.buffer is None:
            with self.one_off():
                self.buffer = self.noise((self.cfg.buffer_size, *x.shape[1:]), x)
        for _ in range(self.cfg.steps):
            samples = self.sample(x.shape[0], x)
            with torch.enable_grad():
                # mean E(x) - mean E(samples), written as the authors' -(mean lse(x) - mean lse(samples))
                loss = -(self.model(x).logsumexp(dim=1).mean() - self.model(samples).logsumexp(dim=1).mean())
                self.step(loss)
        with torch.no_grad():
            return self.model(x)

    def noise(self, shape: tuple[int, ...], like: Tensor) -> Tensor:
        """U(-1, 1) images (the authors' ``init_random``), on the chain's generator."""
        out = torch.empty(shape, dtype=torch.float32, device=like.device)
        return out.uniform_(NOISE_LOW, NOISE_HIGH, generator=self.chain_generator)

    def sample(self, n: int, like: Tensor) -> Tensor:
        """``n`` SGLD samples from the buffer (module docstring; the authors' ``sample_p_0`` + ``sample_q``); the
        buffer's drawn slots take them. Detached, float32."""
        g, device = self.chain_generator, like.device
        slots = torch.randint(0, self.cfg.buffer_size, (n,), generator=g, device=device)
        fresh = self.noise((n, *like.shape[1:]), like)
        reinit = (torch.rand(n, generator=g, device=device) < self.cfg.reinit_freq).float().view(n, 1, 1, 1)
        samples = reinit * fresh + (1.0 - reinit) * self.buffer[slots]
        samples = self.langevin(samples)
        self.buffer[slots] = samples
        return samples

    def langevin(self, samples: Tensor) -> Tensor:
        """``sgld_steps`` steps x <- x - sgld_lr dE/dx + sgld_std N(0, I) (paper eq. 8); input gradients only.
        Written as the authors' x += sgld_lr * d logsumexp / dx + sgld_std * noise (the same rounding)."""
        g = self.chain_generator
        for _ in range(self.cfg.sgld_steps):
            with torch.enable_grad():
                current = samples.requires_grad_(True)
                (ascent,) = torch.autograd.grad(self.model(current).logsumexp(dim=1).sum(), [current])
            self.cost.backwards += 1  # a backward pass through the model, to its input
            noise = torch.randn(samples.shape, generator=g, device=samples.device, dtype=samples.dtype)
            samples = current.detach() + (self.cfg.sgld_lr * ascent.to(samples.dtype) + self.cfg.sgld_std * noise)
        return samples.detach()

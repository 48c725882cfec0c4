"""UnMix-TNS: test-time normalisation with K mixture components per BatchNorm layer.

Tomar et al., "Un-Mixing Test-Time Normalization Statistics: Combatting Label Temporal Correlation",
ICLR 2024 (docs/methods.md "UnMix-TNS"). Every BatchNorm2d keeps K statistic components
(mu_k, var_k) instead of one pair. Each test instance i is normalised with statistics that mix its own
spatial statistics (mu_i, var_i) into every component, weighted by how close it is to that
component (p_ik = softmax_k(cos(mu_i, mu_k) / tau)), and the components follow the instances they
attract through a momentum update. Normalisation is per instance, so any batch size >= 1 works.

Deviations from the reference layer (devavratTomar/unmixtns, copied by UniTTA):
- The momentum M = 1 - (1 - m_bn)^(B / B_max) uses the *actual* batch size B of each forward; the
  reference fixes B to the configured batch size when the layer is built. Identical on full batches;
  a short last batch (or B = 1) moves the components proportionally less, as the paper's rescaling
  intends.
- The random initialisation draws from an explicit ``torch.Generator`` (reference: global RNG).
- ``update_stats`` can switch the component update off for a forward (default on: the reference
  updates in every forward, train or eval, with or without grad).
- The mixture variance is clamped at 0 before eps is added (it is >= 0 up to rounding).
- Inside ``row_mask.masked_rows`` only the rows the mask keeps move the components (B: their count).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from unitta.methods.norm.row_mask import RowMaskedNorm, row_weights
from unitta.methods.norm.stats import ViewCache, constant, float32_forward, instance_mean_var, source_statistics
from unitta.methods.parts.device import DevicePaths
from unitta.nn.batchnorm import named_batchnorms, set_submodule

# devavratTomar/unmixtns: init coefficient alpha, similarity temperature 0.07.
INIT_ALPHA = 0.5
TEMPERATURE = 0.07


class UnMixTNS2d(RowMaskedNorm):
    """Drop-in replacement of a BatchNorm2d with K statistic components (UnMix-TNS paper sec. 3).

    Args:
        bn: the source BatchNorm2d (its running statistics, affine parameters and eps are used).
        num_components: K >= 1 (UT: 16 for ``unmixtns``, 128 inside ``roid_unmixtns``).
        max_batch_size: B_max of the momentum rescaling M = 1 - (1 - bn_momentum)^(B / B_max).
        generator: draws the initial component noise eps_k ~ N(0, 1).
        bn_momentum: m_bn (reference: the BN layer's momentum, PyTorch's default 0.1).
    """

    def __init__(
        self,
        bn: nn.BatchNorm2d,
        num_components: int,
        max_batch_size: int,
        generator: torch.Generator,
        bn_momentum: float = 0.1,
        paths: DevicePaths | None = None,
    ):
        super().__init__()
        self.paths = paths if paths is not None else DevicePaths.from_environment()  # the building method's
        if num_components < 1:
            raise ValueError(f"num_components={num_components}: expected >= 1")
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size={max_batch_size}: expected >= 1")
        if not 0.0 < bn_momentum <= 1.0:
            raise ValueError(f"bn_momentum={bn_momentum}: expected in (0, 1]")
        self.num_features = bn.num_features
        self.num_components = num_components
        self.max_batch_size = max_batch_size
        self.bn_momentum = bn_momentum
        self.eps = bn.eps
        self.update_stats = True
        src_mean, src_var = source_statistics(bn, "UnMixTNS2d")
        # UnMix-TNS paper sec. 3: mu_k = mu_s + sqrt(alpha K / (K - 1)) sigma_s eps_k, var_k = (1 - alpha) var_s,
        # so that the uniform mixture of the K components has the source mean and variance.
        alpha = INIT_ALPHA if num_components > 1 else 0.0
        scale = math.sqrt(alpha * num_components / (num_components - 1)) if num_components > 1 else 0.0
        noise = torch.randn((num_components, self.num_features), generator=generator, dtype=src_mean.dtype)
        means = src_mean.unsqueeze(0) + scale * src_var.sqrt().unsqueeze(0) * noise.to(src_mean.device)
        self.register_buffer("component_means", means)  # (K, C)
        self.register_buffer("component_vars", ((1.0 - alpha) * src_var).unsqueeze(0).repeat(num_components, 1))
        self.weight = None if bn.weight is None else nn.Parameter(bn.weight.detach().clone())
        self.bias = None if bn.bias is None else nn.Parameter(bn.bias.detach().clone())
        self._views = ViewCache()

    def momentum(self, batch_size: int) -> float:
        """M = 1 - (1 - m_bn)^(B / B_max) (UnMix-TNS paper sec. 3): 0.1 at B = B_max, about 0.0016 at B = 1 of 64."""
        return 1.0 - (1.0 - self.bn_momentum) ** (batch_size / self.max_batch_size)

    def assignments(self, inst_mean: Tensor) -> Tensor:
        """p_ik = softmax_k(cos(mu_i, mu_k) / 0.07), (B, K); no gradient (as the reference)."""
        return self._weights(inst_mean).transpose(0, 1)

    def _weights(self, inst_mean: Tensor) -> Tensor:
        """The assignments, laid out (K, B)."""
        with torch.no_grad():
            inst = inst_mean.detach() if inst_mean.requires_grad else inst_mean
            # F.normalize's x / max(||x||, 1e-12), written out (fewer operators)
            inst = inst / torch.linalg.vector_norm(inst, dim=1, keepdim=True).clamp_min(1e-12)
            comp = self.component_means
            comp = comp / torch.linalg.vector_norm(comp, dim=1, keepdim=True).clamp_min(1e-12)
            sim = torch.mm(comp, inst.transpose(0, 1))
            return torch.softmax(torch.div(sim, constant(TEMPERATURE, sim)), dim=0)

    @float32_forward
    def forward(self, x: Tensor) -> Tensor:
        if x.ndim != 4:
            raise ValueError(f"UnMixTNS2d expects (B, C, H, W) input, got shape {tuple(x.shape)}")
        B, C, K = x.shape[0], self.num_features, self.num_components
        inst_mean, inst_var = instance_mean_var(x, self.paths, keepdim=True)  # (B, C, 1, 1) each
        p = self._weights(inst_mean.view(B, C)).view(K, B, 1, 1, 1)
        # everything below is laid out (K, B, C, 1, 1), so that the instance statistics broadcast as they
        # are and the mixture statistics come out as (B, C, 1, 1) maps of x. Component k mixed with the
        # instance: (1 - p) mu_k + p mu_i (torch.lerp), likewise the variances
        comp_mean = self._views.get("component_means", self.component_means, (K, 1, C, 1, 1))
        comp_var = self._views.get("component_vars", self.component_vars, (K, 1, C, 1, 1))
        mixed_means = torch.lerp(comp_mean, inst_mean, p)
        mixed_vars = torch.lerp(comp_var, inst_var, p)
        # the uniform mixture of the K mixed components: its mean, and its variance by the law of total
        # variance (mean of the variances + biased variance of the means, the latter in two passes)
        between, mean = torch.var_mean(mixed_means, dim=0, unbiased=False)
        var = torch.add(between, mixed_vars.sum(0), alpha=1.0 / K)  # >= 0: no clamp needed
        if self.update_stats and self.row_mask is not None:
            with torch.no_grad():  # the same update from the rows the mask keeps (``row_mask.masked_rows``)
                w = row_weights(self.row_mask, x).unsqueeze(0)  # (1, B, 1, 1, 1)
                kept = w.sum()
                momentum = 1.0 - torch.pow(1.0 - self.bn_momentum, kept / self.max_batch_size)
                rate = momentum / kept.clamp_min(1.0)
                comp_mean.add_(((mixed_means - comp_mean) * w).sum(1, keepdim=True) * rate)
                comp_var.add_(((mixed_vars - comp_var) * w).sum(1, keepdim=True) * rate)
        elif self.update_stats:
            with torch.no_grad():
                # mu_k += M mean_i p_ik (mu_i - mu_k), likewise the variances
                rate = self.momentum(B) / B
                comp_mean.add_((mixed_means - comp_mean).sum(1, keepdim=True), alpha=rate)
                comp_var.add_((mixed_vars - comp_var).sum(1, keepdim=True), alpha=rate)
        scale = torch.rsqrt(torch.add(var, constant(self.eps, var)))
        if self.weight is not None:
            scale = scale * self._views.get("weight", self.weight, (C, 1, 1))
        if self.bias is None:
            return x * scale - mean * scale
        bias = self._views.get("bias", self.bias, (C, 1, 1))
        return torch.addcmul(torch.addcmul(bias, mean, scale, value=-1.0), x, scale)

    def extra_repr(self) -> str:
        return f"{self.num_features}, components={self.num_components}, max_batch_size={self.max_batch_size}"


def convert_to_unmixtns(
    model: nn.Module, num_components: int, max_batch_size: int, generator: torch.Generator,
    paths: DevicePaths | None = None,
) -> dict[str, UnMixTNS2d]:
    """Replace every BatchNorm2d of ``model`` in place by an UnMixTNS2d; BatchNorm1d layers are left in
    eval mode with their source statistics (the reference's UnMixTNS1d does exactly that).
    Returns {name: layer}."""
    layers = {}
    for name, bn in named_batchnorms(model):
        if isinstance(bn, nn.BatchNorm2d):
            momentum = bn.momentum if bn.momentum is not None else 0.1
            layer = UnMixTNS2d(bn, num_components, max_batch_size, generator, bn_momentum=momentum, paths=paths)
            set_submodule(model, name, layer.to(bn.running_mean.device))
            layers[name] = layer
    if not layers:
        raise ValueError("model has no BatchNorm2d layer to convert to UnMix-TNS")
    return layers

"""What every method needs to know about a model, beyond its weights."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ModelInfo:
    """Model metadata (docs/models.md).

    name: model name (robustbench name, torchvision name, 'resnet20', 'vit_tiny', ...).
    dataset: dataset family the model was trained for ('cifar10', 'cifar100', 'imagenet', 'fmnist').
    classifier: dotted name of the final linear layer (COFA, LAME and UniTTA split the model there).
    bn_layers: dotted names of every BatchNorm layer, in module order (empty for LayerNorm/GroupNorm models).
    bdn_layer: default BDN domain-prediction layer (one of bn_layers); None for a model without BatchNorm.
    num_classes: K.
    input_size: image side in pixels (32 for CIFAR-sized sets, 224 for ImageNet).
    norm_kind: the model's normalisation kind, 'batch' | 'layer' | 'group' (``unitta.nn.norms.norm_kind``);
        a method runs on the model only if its ``norm_kinds`` include it (docs/methods.md).
    norm_layers: dotted names of every normalisation layer of any kind (BatchNorm, LayerNorm, GroupNorm), in
        module order; empty means "the same as bn_layers" (ModelInfo objects built before norm kinds existed).
    """

    name: str
    dataset: str
    classifier: str
    bn_layers: tuple[str, ...]
    bdn_layer: str | None
    num_classes: int
    input_size: int = 32
    extra: dict = field(default_factory=dict, compare=False)
    norm_kind: str = "batch"
    norm_layers: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.norm_layers and self.norm_kind == "batch":
            object.__setattr__(self, "norm_layers", tuple(self.bn_layers))

    def check_bn_layer(self, layer: str) -> str:
        """Return ``layer`` if it is one of the model's BatchNorm layers, else a clear error."""
        if not self.bn_layers:
            raise ValueError(
                f"model {self.name!r} has no BatchNorm layer (its normalisation kind is {self.norm_kind!r}), "
                f"so {layer!r} cannot be a BatchNorm layer"
            )
        if layer not in self.bn_layers:
            raise ValueError(
                f"{layer!r} is not a BatchNorm layer of model {self.name!r}; "
                f"its BatchNorm layers are: {', '.join(self.bn_layers)}"
            )
        return layer

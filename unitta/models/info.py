"""What every method needs to know about a model, beyond its weights."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ModelInfo:
    """Model metadata (docs/models.md).

    name: model name (robustbench name or 'resnet20').
    dataset: dataset family the model was trained for ('cifar10', 'cifar100', 'imagenet', 'fmnist').
    classifier: dotted name of the final linear layer (COFA, LAME and UniTTA split the model there).
    bn_layers: dotted names of every BatchNorm layer, in module order.
    bdn_layer: default BDN domain-prediction layer (one of bn_layers).
    num_classes: K.
    input_size: image side in pixels (32 for CIFAR-sized sets, 224 for ImageNet).
    """

    name: str
    dataset: str
    classifier: str
    bn_layers: tuple[str, ...]
    bdn_layer: str
    num_classes: int
    input_size: int = 32
    extra: dict = field(default_factory=dict, compare=False)

    def check_bn_layer(self, layer: str) -> str:
        """Return ``layer`` if it is one of the model's BatchNorm layers, else a clear error."""
        if layer not in self.bn_layers:
            raise ValueError(
                f"{layer!r} is not a BatchNorm layer of model {self.name!r}; "
                f"its BatchNorm layers are: {', '.join(self.bn_layers)}"
            )
        return layer

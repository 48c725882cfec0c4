"""Split a classifier into its feature extractor and its final linear layer (COFA, LAME, UniTTA, RMT, AdaContrast)."""

from __future__ import annotations

from torch import Tensor, nn

from unitta.nn.batchnorm import get_submodule, set_submodule


class FeatureModel(nn.Module):
    """Wraps a model so that ``forward`` returns the classifier's input (penultimate features).

    The classifier named in ModelInfo is swapped for ``nn.Identity`` inside ``backbone``; ``head``
    holds the original linear layer, so ``head(backbone(x)) == model(x)``.
    """

    def __init__(self, model: nn.Module, classifier: str):
        super().__init__()
        head = get_submodule(model, classifier)
        if not isinstance(head, nn.Linear):
            raise ValueError(f"classifier {classifier!r} is a {type(head).__name__}, expected nn.Linear")
        set_submodule(model, classifier, nn.Identity())
        self.backbone = model
        self.head = head

    def forward(self, x: Tensor) -> Tensor:
        return self.backbone(x)

    def logits(self, features: Tensor) -> Tensor:
        return self.head(features)


class SplitModel(FeatureModel):
    """The model as encoder + classifier (RMT, AdaContrast; the mariodoebler TTA benchmark's ``split_up_model``).

    ``forward`` gives the logits ``head(backbone(x))``, as the original model; ``encode`` the classifier's input.
    """

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.backbone(x))

    def encode(self, x: Tensor) -> Tensor:
        return self.backbone(x)

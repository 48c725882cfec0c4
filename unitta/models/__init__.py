"""Models: the embedded ResNet-20 for Fashion-MNIST-C and the paper's robustbench models (docs/models.md).

``load_model(dataset, name=None, checkpoint_dir='ckpt') -> (model in eval mode, ModelInfo)``; see
``unitta.models.zoo``. robustbench is imported only when a paper model is built.
"""

from unitta.models.info import ModelInfo
from unitta.models.zoo import build_model, checkpoint_path, list_models, load_model

__all__ = ["ModelInfo", "build_model", "checkpoint_path", "list_models", "load_model"]

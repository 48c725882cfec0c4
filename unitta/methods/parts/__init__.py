"""What the registered methods are made of (``unitta/methods/`` itself holds only the methods, one module each).

- ``tta_method``: the base class every method subclasses (``TTAMethod``, ``MethodCost``);
- ``registry``: ``register_method``, ``get_method``, the per-dataset presets and the built-in methods found
  in the ``unitta/methods/`` folder; ``profiles``: the method profiles (``default``, ``reference``);
- building blocks shared by several methods, never copied between them: augmentations (``augment``,
  ``augmix``), losses (``losses``, ``contrastive``, ``entropy_filter``), teachers and memories (``ema``,
  ``memory``, ``snapshot``), optimisation (``optim``, ``sam``, and ``whole_step``: a self-training step as one
  compiled graph), heads and validation (``heads``, ``validate``),
  labelled source batches (``source_batches``);
- frameworks several methods share: UniTTA's three-forward BDN procedure (``bdn_framework``, for ``unitta`` and
  the BDN ablations) and COFA's feature averaging (``feature_averaging``, for ``cofa`` and ``unitta``);
- ``backend``: the PyTorch backend settings (precision, TF32, cuDNN's benchmark mode) a cell's method runs under,
  shared by the adaptation loop and ``bench/gpu.py``.

The normalisation layers are the sibling package ``unitta/methods/norm/``.
"""

"""Training with Lightning: the trainer set-up, the data and the recipes (each model's LightningModule sits
in its folder under :mod:`composer.models`).

* ``data``: the data module (CRG programs + feature store, ViLBERT-style negatives, exact resume).
* ``recipes``: a run's settings from a model's named recipe and typed overrides.
* ``fit``: train one recipe with checkpoints, logs and exact resume; test; ``results.json``.
* ``checkpoint``: reading a Lightning checkpoint's model back without unpickling.
"""

__all__ = ["data", "recipes", "fit", "checkpoint", "caption_neighbours"]

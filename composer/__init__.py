"""COMPOSER: recursive, visually grounded concept composition (Zhang et al., 2021, §3), its baselines,
training, evaluation and the study.

* ``models``: every model, one folder each (``models/composer``, ``models/flat``, ``models/vse``,
  ``models/clip``: configuration and presets, model, LightningModule), the pieces they share
  (``models/common``: saving and loading, the training schedule) and the one registry
  (``models/registry.py``) that maps a model's name to all of it.
* ``retrieval``: cross-scoring (caption, image) matrices and recall@K.
* ``provenance``: what a result records about where it was computed (git SHA, hardware).

Sub-packages above the models: ``training`` (the Lightning trainer, data, recipes), ``evaluation``,
``study`` and ``cli`` (the command-line programs).
docs/composer.md explains the model.
"""

__all__ = ["models", "retrieval", "provenance", "training", "evaluation", "study", "cli"]

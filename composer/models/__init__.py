"""Every model the library trains, one folder each, and the registry that names them.

* ``composer``: COMPOSER itself (Zhang et al., 2021): its config and presets, the CRG composition program,
  the losses and negatives, every layer, :class:`~composer.models.composer.model.Composer` and its
  LightningModule.
* ``flat``: the flat cross-modal transformer (COMPOSER's parts on the whole caption, no composition).
* ``vse``: a visual-semantic embedding (two towers, dot product; VSE++'s hinge loss).
* ``clip``: CLIP, codebook-CLIP and IL-CLIP (Zheng et al., 2024) over region features: one family, three
  registry entries.
* ``common``: what every model shares: ``save_pretrained`` / ``from_pretrained``, the LightningModule base
  with the schedule and retrieval validation.
* ``registry``: the model names, each mapped to its config, presets, classes and named recipes.

A model folder imports Lightning only in its ``module.py`` and never imports ``composer.training``,
``composer.evaluation``, ``composer.study`` or ``composer.cli``.
"""

__all__ = ["common", "composer", "flat", "vse", "clip", "registry"]

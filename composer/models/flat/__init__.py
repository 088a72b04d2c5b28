"""The flat cross-modal transformer (§5.1): COMPOSER's Predicate and Composition Transformers on the whole
caption, no composition.

* ``model``: :class:`FlatCrossTransformer` (config: COMPOSER's :class:`ComposerConfig`).
* ``module``: its LightningModule (l_MATCH, optionally phrase-level MVSA: Table 5's "ViLBERT + MVSA").
"""

__all__ = ["model", "module"]

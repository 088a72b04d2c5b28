"""COMPOSER (Zhang et al., 2021, §3 and Appendix C): everything the model is, one concept per module.

* ``config``: the configuration dataclasses and size presets (the paper's defaults).
* ``program``: a caption's CRG as a composition program, batched level by level.
* ``attention``: the transformer and co-attention layers every part is built from.
* ``primitive_encoder``: CrossAtt of a primitive's sub-words over the image regions (§3.2).
* ``predicate_transformer``: the Predicate Transformer over a template's words (BERT-initialised).
* ``film``: the FiLM modulator that binds a child's embedding to a predicate's placeholder.
* ``composition_transformer``: the Composition Transformer (co-attention with the image) and the scorer.
* ``model``: :class:`Composer`, composing a caption's concepts bottom-up along its CRG program.
* ``losses``: match, MVSA and order losses (§3.3), on tensors.
* ``negative_sampling``: MVSA's negatives drawn from the batch's captions and images (pure functions).
* ``module``: :class:`ComposerModule`, the LightningModule that trains it (the only module here that
  imports Lightning).
"""

__all__ = ["config", "program", "attention", "primitive_encoder", "predicate_transformer", "film",
           "composition_transformer", "model", "losses", "negative_sampling", "module"]

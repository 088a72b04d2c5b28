"""What every model folder shares.

* ``pretrained``: ``save_pretrained`` / ``from_pretrained`` (config.json + model.safetensors + tokenizer).
* ``retrieval_module``: the LightningModule base (:class:`RetrievalModule`: the learning-rate schedule of
  :class:`OptimConfig`, exact-resume random states, retrieval validation).
"""

__all__ = ["pretrained", "retrieval_module"]

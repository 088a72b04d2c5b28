"""CLIP, codebook-CLIP and IL-CLIP (Zheng et al., 2024) over region features: one family, three registry
entries (``clip``, ``codebook_clip``, ``il_clip``), one model class.

* ``model``: the dual encoder :class:`ClipModel`, :class:`ClipConfig` and its presets.
* ``codebook``: the codebook layer (sparsemax over max-cosine code scores).
* ``iterated_learning``: the iterated-learning schedule (spawn, distil, interact; §3.3, Table 5).
* ``module``: the LightningModule of all three kinds.
"""

__all__ = ["model", "codebook", "iterated_learning", "module"]

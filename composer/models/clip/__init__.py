"""CLIP, codebook-CLIP, IL-CLIP (Zheng et al., 2024) and NegCLIP over region features: one family, four registry
entries (``clip``, ``codebook_clip``, ``il_clip``, ``negclip``), one model class.

* ``model``: the dual encoder :class:`ClipModel`, :class:`ClipConfig` and its presets.
* ``codebook``: the codebook layer (sparsemax over max-cosine code scores).
* ``iterated_learning``: the iterated-learning schedule (spawn, distil, interact; §3.3, Table 5).
* ``negatives``: NegCLIP's running pool of image representations (its nearest-neighbour image negatives).
* ``module``: the LightningModule of all four kinds.
"""

__all__ = ["model", "codebook", "iterated_learning", "negatives", "module"]

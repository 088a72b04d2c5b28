"""A visual-semantic embedding (§5.1): two towers, dot product, VSE++'s hinge loss.

* ``model``: :class:`VSE`, :class:`VSEConfig` and its presets.
* ``module``: its LightningModule (the in-batch triplet hinge).
"""

__all__ = ["model", "module"]

"""What evaluation needs of a dataset's exact truth, as a protocol: no dataset is imported here.

Real corpora only know which caption was written for which image. A dataset that knows more (the
generated world's scene graphs: :class:`features.world.truth.WorldTruth`) says whether any text of its
language is true of an image, so phrase retrieval counts every correct image (multi-positive) and an
interpretation can say whether a caption holds. :func:`features.catalog.exact_truth` finds a dataset's
truth; evaluation code only calls the methods below.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np

__all__ = ["ExactTruth"]


@runtime_checkable
class ExactTruth(Protocol):
    """Exact denotations of texts over a dataset's images."""

    def has_image(self, image_id: str) -> bool:
        """Whether the truth knows this image."""

    def holds_among(self, text: str, image_ids: Sequence[str]) -> np.ndarray | None:
        """``(I,)`` bool: whether ``text`` is true of each image; None if the text is outside the truth's
        language (then callers fall back to the corpus' own denotations)."""

    def is_true(self, text: str, image_id: str) -> bool | None:
        """Whether ``text`` holds in one image; None if it is outside the truth's language."""

    def picture(self, image_id: str):
        """The image as a ``PIL.Image`` where the dataset can draw it, else None."""

    def positives(self, texts: Sequence[str], image_ids: Sequence[str]) -> np.ndarray | None:
        """``(C, I)`` bool: whether each text is true of each image (multi-positive retrieval); None if any
        text is outside the truth's language."""

    def oracle_scores(self, texts: Sequence[str], image_ids: Sequence[str]) -> dict[str, np.ndarray] | None:
        """``{oracle name: (C, I) scores}`` of the dataset's oracles (ties kept), the ceilings printed beside
        a model's retrieval; None if the dataset has none or a text is outside its language."""

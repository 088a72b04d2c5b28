"""Exact ground truth of a generated world: is a text true of an image, and which images is it true of.

Real corpora only know that a caption was written for an image; the world knows its scene graphs, so
any caption or phrase of its language has an exact denotation. Phrase-to-image retrieval can then be
scored with all correct answers, and hard negatives can be guaranteed false.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from features.world.grammar import parse_phrase
from features.world.scene import Scene, WorldConfig
from features.world.semantics import holds

__all__ = ["WorldTruth"]


class WorldTruth:
    """Scene graphs of a world, queried with texts (the evaluation's
    :class:`composer.evaluation.truth.ExactTruth` protocol).

    >>> from features.world.scene import SceneObject
    >>> s = Scene("im", [SceneObject("ball", "red", "small", "metal", 0.2, 0.5),
    ...                  SceneObject("cube", "blue", "large", "wooden", 0.7, 0.5)])
    >>> truth = WorldTruth({"im": s})
    >>> truth.is_true("A red ball to the left of a blue cube.", "im"), truth.is_true("a blue ball", "im")
    (True, False)
    """

    def __init__(self, scenes: dict[str, Scene], cfg: WorldConfig = WorldConfig()):
        self.scenes = scenes
        self.cfg = cfg
        self._cache: dict[str, frozenset[str] | None] = {}

    @classmethod
    def load(cls, world_dir: str | Path) -> "WorldTruth":
        from features.world.generate import load_scenes

        return cls(load_scenes(Path(world_dir) / "scenes.jsonl.gz"))

    def has_image(self, image_id: str) -> bool:
        return image_id in self.scenes

    def holds_among(self, text: str, image_ids) -> np.ndarray | None:
        """``(I,)`` bool over ``image_ids``: the text's truth in each scene; ``None`` if it is not of the
        world's language. Only the given scenes are evaluated (a full denotation scans the whole world).

        >>> from features.world.scene import SceneObject
        >>> truth = WorldTruth({"a": Scene("a", [SceneObject("ball", "red", "small", "metal", 0.2, 0.5)]),
        ...                     "b": Scene("b", [SceneObject("cube", "red", "small", "metal", 0.2, 0.5)])})
        >>> truth.holds_among("a red ball", ["b", "a"]).tolist(), truth.holds_among("a red tree", ["a"])
        ([False, True], None)
        """
        lf = parse_phrase(text, self.cfg)
        if lf is None:
            return None
        return np.fromiter((holds(self.scenes[i], lf) for i in image_ids), dtype=bool, count=len(image_ids))

    def positives(self, texts, image_ids) -> np.ndarray | None:
        """``(C, I)`` bool: whether each text is true of each image; None if any text is outside the language."""
        rows = [self.holds_among(t, image_ids) for t in texts]
        if any(r is None for r in rows):
            return None
        return np.stack(rows) if rows else np.zeros((0, len(image_ids)), dtype=bool)

    def oracle_scores(self, texts, image_ids) -> dict[str, np.ndarray] | None:
        """``{oracle: (C, I) scores}`` of :data:`features.world.oracles.ORACLES` (exact truth, a bag of bound
        objects, a bag of words), ties kept; None if any text is outside the world's language.

        >>> from features.world.scene import SceneObject
        >>> truth = WorldTruth({"a": Scene("a", [SceneObject("ball", "red", "small", "metal", 0.2, 0.5),
        ...                                      SceneObject("cube", "blue", "small", "metal", 0.7, 0.5)])})
        >>> s = truth.oracle_scores(["a blue ball and a red cube"], ["a"])
        >>> s["exact"].tolist(), s["bound_objects"].tolist(), s["bag_of_words"].tolist()
        ([[0.0]], [[0.0]], [[1.0]])
        """
        from features.world.oracles import ORACLES, oracle_matrix

        forms = [parse_phrase(t, self.cfg) for t in texts]
        if any(f is None for f in forms):
            return None
        scenes = [self.scenes[i] for i in image_ids]
        return {name: oracle_matrix(name, forms, scenes, tie_break=None) for name in ORACLES}

    def picture(self, image_id: str):
        """The image's scene drawn as a ``PIL.Image``."""
        from features.world.render import render_scene

        return render_scene(self.scenes[image_id])

    def is_true(self, text: str, image_id: str) -> bool | None:
        """Whether the text holds in the image's scene; ``None`` if it is not of the world's language."""
        lf = parse_phrase(text, self.cfg)
        if lf is None:
            return None
        return holds(self.scenes[image_id], lf)

    def denotation(self, text: str) -> frozenset[str] | None:
        """Ids of every image the text is true of; ``None`` if it is not of the world's language."""
        key = " ".join(text.lower().split())
        if key not in self._cache:
            lf = parse_phrase(key, self.cfg)
            self._cache[key] = None if lf is None else frozenset(
                i for i, scene in self.scenes.items() if holds(scene, lf))
        return self._cache[key]

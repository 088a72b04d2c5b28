"""Structural negatives for training: the world's verified-false hard negatives as extra caption negatives.

Why (issue 36): the match loss's caption negatives are captions of random other images, which almost never
differ from the positive only by the order of two arguments or the binding of an attribute, so nothing in
training asks a model to read either. The generated world can make such captions and *prove* them false of
the image (:class:`features.world.hard_negatives.WorldHardNegatives`: CREPE's HN-SWAP / HN-ATOM / HN-NEG /
HN-COMP on the caption's logical form, checked against the scene graph before and after realisation).

A training negative is kept only when

* it is false of its image (the generator's check, repeated on the realised text with the world's exact
  truth: a negative true of its image would teach the wrong thing);
* it mentions no held-out compound of a compositional world (``world.json``'s ``held_out``): a model must
  not meet a held-out colour-shape pair or relation fact in training, not even as a negative;

(both in :mod:`features.world.training_negatives`, reached through :func:`features.catalog.world_training_negatives`)
and

* it is no evaluation caption (any caption of the validation and test sets, case and spacing aside).

Negatives are made lazily, per training caption, and kept (deterministic: the generator seeds each
(type, image, caption) stream itself). Real corpora have no scene graphs: a clear error says so.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["STRUCTURAL_KINDS", "StructuralNegativeConfig", "StructuralNegativeSource", "normalize_text"]

logger = logging.getLogger(__name__)

STRUCTURAL_KINDS = ("HN-ATOM", "HN-SWAP", "HN-NEG", "HN-COMP")  # crg.hard_negatives.HN_TYPES (no import: no torch here)


@dataclass
class StructuralNegativeConfig:
    """Which verified-false negatives join the training batches, and how many (defaults: off).

    Attributes:
        kinds: CREPE types among :data:`STRUCTURAL_KINDS`; () = off (every model trains as before).
        per_caption: structural negatives per positive caption (extra caption-negative columns S).
        rate: the share of positives that get them (the rest get random captions in those columns, which the
            dual encoders mask out); 1 = all.
        per_type: negatives the generator keeps per caption and type, the pool each draw picks from.
        seed: the generator's seed (which candidates are tried first).
    """

    kinds: tuple[str, ...] = ()
    per_caption: int = 1
    rate: float = 1.0
    per_type: int = 2
    seed: int = 0

    def __post_init__(self):
        self.kinds = tuple(self.kinds)
        bad = [k for k in self.kinds if k not in STRUCTURAL_KINDS]
        if bad or len(set(self.kinds)) != len(self.kinds):
            raise ValueError(f"StructuralNegativeConfig.kinds={self.kinds}: choose distinct kinds among "
                             f"{STRUCTURAL_KINDS}")
        if self.per_caption < 1 or self.per_type < 1 or not 0.0 <= self.rate <= 1.0:
            raise ValueError(f"StructuralNegativeConfig: per_caption and per_type must be >= 1 and rate in [0, 1], "
                             f"got {self.per_caption}, {self.per_type}, {self.rate}")

    @property
    def enabled(self) -> bool:
        return bool(self.kinds)

    def leave_out(self, kind: str) -> StructuralNegativeConfig:
        """The same settings without ``kind`` (leave-one-kind-out transfer)."""
        return StructuralNegativeConfig(tuple(k for k in self.kinds if k != kind), self.per_caption, self.rate,
                                        self.per_type, self.seed)


def normalize_text(text: str) -> str:
    """Case, punctuation and spacing aside: how two captions are compared.

    >>> normalize_text("A red ball,  left of a cube.")
    'a red ball left of a cube'
    """
    return " ".join(text.lower().replace(",", " ").replace(".", " ").split())


class StructuralNegativeSource:
    """Verified-false negatives of training captions of a generated world, filtered as the module says.

    Args:
        world_dir: the world's directory (``scenes.jsonl.gz``, ``world.json``).
        cfg: the kinds and sizes.
        banned_texts: captions no negative may equal (the evaluation sets' captions).
    """

    def __init__(self, world_dir: str | Path, cfg: StructuralNegativeConfig, banned_texts: Iterable[str] = ()):
        from features.catalog import world_training_negatives

        self.cfg = cfg
        # verified false of the image and free of held-out compounds (the world's checks, in features/)
        self.verified = world_training_negatives(world_dir, cfg.kinds, per_type=cfg.per_type, seed=cfg.seed)
        self.banned = {normalize_text(t) for t in banned_texts}
        self._cache: dict[tuple[str, str], tuple[str, ...]] = {}

    @property
    def stats(self):
        """Kept and dropped negatives by reason (``features.world.training_negatives.TrainingNegativeStats``)."""
        return self.verified.stats

    def negatives(self, image_id: str, caption: str) -> tuple[str, ...]:
        """The kept negatives of one training caption of ``image_id`` (possibly none)."""
        key = (image_id, caption)
        if key not in self._cache:
            kept = []
            for text, kind in self.verified.typed_negatives(image_id, caption):
                if normalize_text(text) in self.banned:
                    self.stats.drop("an evaluation caption")
                    self.stats.count_kept(kind, -1)
                    continue
                kept.append(text)
            self._cache[key] = tuple(kept)
        return self._cache[key]

    def describe(self) -> str:
        """One line for the log: what was kept, by kind, and what was dropped and why, over the training captions
        this process has drawn negatives for (a resumed run: since it resumed)."""
        s = self.stats
        return (f"structural negatives ({', '.join(self.cfg.kinds)}): {s.kept} kept for {s.captions} captions "
                f"({', '.join(f'{k} {n}' for k, n in sorted(s.kept_by_kind.items())) or 'none'}); "
                f"dropped {s.dropped or 'none'}")


def texts_of(roles: Sequence[str], graphs: dict) -> list[str]:
    """Every caption text of the graphs of ``roles`` (the evaluation captions a negative may not be)."""
    return [t for r in roles if r in graphs for t in graphs[r].caption_texts]

"""Structural negatives for training: the world's verified-false hard negatives as extra caption negatives.

Why (issue 36): the match loss's caption negatives are captions of random other images, which almost never
differ from the positive only by the order of two arguments or the binding of an attribute, so nothing in
training asks a model to read either. The generated world can make such captions and *prove* them false of
the image (:class:`features.world.hard_negatives.WorldHardNegatives`: CREPE's HN-SWAP / HN-ATOM / HN-NEG /
HN-COMP on the caption's logical form, checked against the scene graph before and after realisation).

A training negative is kept only when

* it is false of its image (the generator's check, repeated here on the realised text with the world's
  exact truth: a negative true of its image would teach the wrong thing);
* it mentions no held-out compound of a compositional world (``world.json``'s ``held_out``): a model must
  not meet a held-out colour-shape pair or relation fact in training, not even as a negative;
* it is no evaluation caption (any caption of the validation and test sets, case and spacing aside).

Negatives are made lazily, per training caption, and kept (deterministic: the generator seeds each
(type, image, caption) stream itself). Real corpora have no scene graphs: a clear error says so.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
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


@dataclass
class _Stats:
    """Candidates the filters dropped (logged once per run: what the option really gave)."""

    captions: int = 0
    kept: int = 0
    dropped: dict[str, int] = field(default_factory=dict)

    def drop(self, why: str) -> None:
        self.dropped[why] = self.dropped.get(why, 0) + 1


class StructuralNegativeSource:
    """Verified-false negatives of training captions of a generated world, filtered as the module says.

    Args:
        world_dir: the world's directory (``scenes.jsonl.gz``, ``world.json``).
        cfg: the kinds and sizes.
        banned_texts: captions no negative may equal (the evaluation sets' captions).
    """

    def __init__(self, world_dir: str | Path, cfg: StructuralNegativeConfig, banned_texts: Iterable[str] = ()):
        from features.world.compositional import HeldOut
        from features.world.generate import load_scenes
        from features.world.hard_negatives import WorldHardNegatives, WorldNegativeConfig
        from features.world.truth import WorldTruth

        world_dir = Path(world_dir)
        if not (world_dir / "scenes.jsonl.gz").exists():
            raise FileNotFoundError(f"structural negatives need the world's scene graphs: {world_dir / 'scenes.jsonl.gz'} "
                                    f"is missing")
        self.cfg = cfg
        scenes = load_scenes(world_dir / "scenes.jsonl.gz")
        meta = json.loads((world_dir / "world.json").read_text()) if (world_dir / "world.json").exists() else {}
        held = meta.get("held_out")
        self.held_out = None if not held else HeldOut(
            held["attribute_kind"], frozenset(map(tuple, held["attributes"])), frozenset(map(tuple, held["relations"])))
        self.truth = WorldTruth(scenes)
        self.generator = WorldHardNegatives(scenes, config=WorldNegativeConfig(
            types=cfg.kinds, per_type=cfg.per_type, seed=cfg.seed, distractor_images=0))
        self.banned = {normalize_text(t) for t in banned_texts}
        self._cache: dict[tuple[str, str], tuple[str, ...]] = {}
        self.stats = _Stats()

    def negatives(self, image_id: str, caption: str) -> tuple[str, ...]:
        """The kept negatives of one training caption of ``image_id`` (possibly none)."""
        key = (image_id, caption)
        if key not in self._cache:
            self._cache[key] = tuple(self._make(image_id, caption))
        return self._cache[key]

    def _make(self, image_id: str, caption: str) -> list[str]:
        from features.world.compositional import caption_compounds
        from features.world.grammar import parse_caption

        self.stats.captions += 1
        kept = []
        for neg in self.generator.caption_negatives(image_id, caption).negatives:
            text = neg.text
            if normalize_text(text) in self.banned:
                self.stats.drop("an evaluation caption")
                continue
            if self.truth.is_true(text, image_id) is not False:
                self.stats.drop("not verifiably false of its image")
                continue
            if self.held_out is not None:
                lf = parse_caption(text, self.generator.world)
                if lf is None or self.held_out.holds_any(caption_compounds(lf, self.held_out.attribute_kind)):
                    self.stats.drop("mentions a held-out compound")
                    continue
            kept.append(text)
        self.stats.kept += len(kept)
        return kept

    def describe(self) -> str:
        s = self.stats
        return (f"structural negatives ({', '.join(self.cfg.kinds)}): {s.kept} kept for {s.captions} captions; "
                f"dropped {s.dropped or 'none'}")


def texts_of(roles: Sequence[str], graphs: dict) -> list[str]:
    """Every caption text of the graphs of ``roles`` (the evaluation captions a negative may not be)."""
    return [t for r in roles if r in graphs for t in graphs[r].caption_texts]

"""Hard negatives a model may *train* on: verified false of their image, and free of held-out compounds.

Training with the world's hard negatives (issue 36, :mod:`composer.training.structural_negatives`) needs two
guarantees beyond what the evaluation's negatives need (:mod:`features.world.hard_negatives` already checks
each one against the scene graph, before and after realisation):

* the realised text is false of its image by the world's exact truth (:class:`features.world.truth.WorldTruth`,
  the evaluation's oracle, parsing the text as a phrase): checked again, so the two checkers must agree;
* it mentions no held-out compound of a compositional world (``world.json``'s ``held_out``, read through
  :func:`features.world.compositional.caption_compounds` on its logical form): the systematic test sets measure
  compounds never met in training, not even inside a negative.

Which kinds, how many per caption and the seed are the caller's; everything is deterministic.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from features.world.compositional import HeldOut, caption_compounds
from features.world.generate import load_scenes
from features.world.grammar import parse_caption
from features.world.hard_negatives import WorldHardNegatives, WorldNegativeConfig
from features.world.scene import WorldConfig
from features.world.truth import WorldTruth

__all__ = ["TrainingNegativeStats", "WorldTrainingNegatives", "load_held_out"]


def load_held_out(world_dir: str | Path) -> HeldOut | None:
    """The held-out compounds a compositional world recorded in ``world.json`` (None for a random split)."""
    path = Path(world_dir) / "world.json"
    held = json.loads(path.read_text()).get("held_out") if path.exists() else None
    if not held:
        return None
    return HeldOut(held["attribute_kind"], frozenset(map(tuple, held["attributes"])),
                   frozenset(map(tuple, held["relations"])))


@dataclass
class TrainingNegativeStats:
    """What the checks kept and dropped (by reason), over the captions asked so far."""

    captions: int = 0
    kept: int = 0
    kept_by_kind: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=dict)

    def drop(self, why: str) -> None:
        self.dropped[why] = self.dropped.get(why, 0) + 1

    def count_kept(self, kind: str, n: int = 1) -> None:
        """``n`` more kept negatives of ``kind`` (negative ``n``: dropped after all, by a later check)."""
        self.kept += n
        self.kept_by_kind[kind] = self.kept_by_kind.get(kind, 0) + n

    def as_dict(self) -> dict:
        return {"captions": self.captions, "kept": self.kept,
                "kept_by_kind": dict(sorted(self.kept_by_kind.items())), "dropped": dict(sorted(self.dropped.items()))}


class WorldTrainingNegatives:
    """Verified-false, held-out-free hard negatives of a world's captions.

    Args:
        world_dir: the world's directory (``scenes.jsonl.gz``; ``world.json`` for the held-out compounds).
        kinds: CREPE types (``HN-ATOM``, ``HN-SWAP``, ``HN-NEG``, ``HN-COMP``).
        per_type: negatives the generator keeps per caption and type; seed: its seed.
    """

    def __init__(self, world_dir: str | Path, kinds: tuple[str, ...], *, per_type: int = 2, seed: int = 0):
        world_dir = Path(world_dir)
        if not (world_dir / "scenes.jsonl.gz").exists():
            raise FileNotFoundError(f"training negatives need the world's scene graphs: "
                                    f"{world_dir / 'scenes.jsonl.gz'} is missing")
        scenes = load_scenes(world_dir / "scenes.jsonl.gz")
        self.world = WorldConfig()
        self.held_out = load_held_out(world_dir)
        self.truth = WorldTruth(scenes, self.world)
        self.generator = WorldHardNegatives(scenes, self.world, WorldNegativeConfig(
            types=tuple(kinds), per_type=per_type, seed=seed, distractor_images=0))
        self.stats = TrainingNegativeStats()

    def negatives(self, image_id: str, caption: str) -> list[str]:
        """The negatives of one caption of ``image_id`` that pass both checks (possibly none)."""
        return [text for text, _ in self.typed_negatives(image_id, caption)]

    def typed_negatives(self, image_id: str, caption: str) -> list[tuple[str, str]]:
        """``(text, CREPE type)`` of each negative :meth:`negatives` keeps."""
        self.stats.captions += 1
        kept = []
        for neg in self.generator.caption_negatives(image_id, caption).negatives:
            if self.truth.is_true(neg.text, image_id) is not False:
                self.stats.drop("not verifiably false of its image")
                continue
            if self.held_out is not None:
                lf = parse_caption(neg.text, self.world)
                if lf is None or self.held_out.holds_any(caption_compounds(lf, self.held_out.attribute_kind)):
                    self.stats.drop("mentions a held-out compound")
                    continue
            kept.append((neg.text, neg.type))
            self.stats.count_kept(neg.type)
        return kept

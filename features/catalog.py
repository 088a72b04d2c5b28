"""Named datasets for ``--data NAME``: where the captions and features are, and which splits to use.

* ``world`` -- the generated world (the offline default). Generated on first use into
  ``$GC_DATA_DIR/world-v{version}-{split}-s{seed}-n{num_images}`` (default ``~/.cache/grounded_composer/data``),
  then reused; same seed, same files. Its CRG is built from the gold trees of its own grammar
  (``gold_trees.jsonl``; ``parser="spacy"`` parses the captions instead).
  ``world_split="compositional"`` (default) holds compounds out of training (docs/world.md): the model
  trains on ``train``, validates on ``val``, is tested in-domain on ``test_iid`` and, as extra evaluation
  sets, on ``test_systematic`` (held-out combinations) and ``test_productivity`` (longer captions).
  ``world_split="random"`` is the earlier i.i.d. 80/10/10 split. ``world_held_out_seed`` / ``_pairs`` /
  ``_facts`` choose which compounds are held out (the generator's ``--held-out-seed`` / ``--held-out-pairs`` /
  ``--held-out-facts``); other than the defaults (0, 8, 6) they are in the folder's name
  (``...-n4000-h4321p8f6``), and a folder whose ``world.json`` records other settings is refused, never reused.
* ``f30k`` -- Flickr30K, Karpathy splits (train / val / test = 29,000 / 1,014 / 1,000 images). Captions
  default to ``../shared/data/flickr30k/captions.jsonl`` when present; features must be given
  (``--features STORE``, see docs/features.md).
* ``coco`` -- COCO, Karpathy splits; training uses train + restval, testing the 5K test (or 1K folds).

Anything else is read as a path: ``--data my_captions.jsonl --features my_store.h5``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["DatasetSpec", "resolve_dataset", "DATASETS", "WORLD_SPLITS", "data_root", "exact_truth", "world_config",
           "world_dir", "world_hard_negatives", "world_training_negatives"]

_REPO = Path(__file__).resolve().parents[1]
_SHARED = _REPO.parent / "shared" / "data"
DATASETS = ("world", "f30k", "coco")
WORLD_SPLITS = ("compositional", "random")  # how the generated world's images are split


@dataclass
class DatasetSpec:
    """Where a dataset lives and how it is split.

    Attributes:
        name: the dataset's name.
        captions: caption corpus (any format :func:`crg.read_corpus` reads).
        features: feature store (``.h5``), or ``None`` when not available yet.
        train_splits, val_splits, test_splits: split labels of each role.
        eval_splits: further evaluation sets beyond ``test`` (name -> split labels), scored after
            training beside it, e.g. the compositional world's ``systematic`` and ``productivity``.
        world_dir: for the generated world, its directory (scene graphs for exact truth).
        parser, parser_model: the CRG's default constituency parser (:func:`crg.parse.make_parser`):
            spaCy for real captions; for the generated world, its gold trees (``world``: the trees of its own
            grammar for any text of its language, the same as its ``gold_trees.jsonl``; docs/world.md "Gold
            parses").
    """

    name: str
    captions: Path
    features: Path | None
    train_splits: tuple[str, ...] = ("train",)
    val_splits: tuple[str, ...] = ("val",)
    test_splits: tuple[str, ...] = ("test",)
    eval_splits: dict[str, tuple[str, ...]] = field(default_factory=dict)
    world_dir: Path | None = None
    extra: dict = field(default_factory=dict)
    parser: str = "spacy"
    parser_model: str | None = None

    def parser_for(self, parser: str | None = None, parser_model: str | None = None) -> tuple[str, str | None]:
        """``(parser, parser_model)`` to build this dataset's CRG with: the one asked for, else the dataset's.

        >>> spec = DatasetSpec("w", Path("c.jsonl"), None, parser="preparsed", parser_model="gold_trees.jsonl")
        >>> spec.parser_for(), spec.parser_for("spacy")
        (('preparsed', 'gold_trees.jsonl'), ('spacy', None))
        """
        if parser is None:
            if parser_model is not None:
                raise ValueError(f"parser model {parser_model!r} given without a parser: name its parser too "
                                 f"(--parser spacy|benepar|preparsed|world), or give neither for {self.name!r}'s default "
                                 f"({self.parser})")
            return self.parser, self.parser_model
        return parser, parser_model

    def require_features(self) -> Path:
        if self.features is None or not Path(self.features).exists():
            raise FileNotFoundError(
                f"dataset {self.name!r} needs a feature store: pass --features STORE "
                f"(got {self.features}); docs/features.md shows how to convert bottom-up features")
        return Path(self.features)


def exact_truth(world_dir: str | Path | None):
    """The exact truth of a generated world's directory (:class:`features.world.truth.WorldTruth`), or
    None when there is no world (real corpora know only which caption was written for which image)."""
    if world_dir is None:
        return None
    from features.world.truth import WorldTruth

    return WorldTruth.load(world_dir)


def world_hard_negatives(world_dir: str | Path, captions, *, images, per_type: int = 5, distractor_images: int = 5,
                         seed: int = 0):
    """Hard negatives of a generated world's ``(image_id, caption)`` pairs, verified false against the scene
    graphs of ``world_dir`` (:class:`features.world.hard_negatives.WorldHardNegatives`, given the scenes of
    ``images`` only): ``(negatives, report, distractors)`` as its ``generate`` returns them. Raises
    ValueError naming the images that have no scene."""
    from features.world.generate import load_scenes
    from features.world.hard_negatives import WorldHardNegatives, WorldNegativeConfig

    scenes = load_scenes(Path(world_dir) / "scenes.jsonl.gz")
    unknown = sorted(set(images) - set(scenes))
    if unknown:
        raise ValueError(f"{len(unknown)} images have no scene graph in {world_dir} (first: {unknown[:3]})")
    gen = WorldHardNegatives({i: scenes[i] for i in sorted(set(images))},
                             config=WorldNegativeConfig(per_type=per_type, seed=seed,
                                                        distractor_images=distractor_images))
    return gen.generate(list(captions))


def world_training_negatives(world_dir: str | Path, kinds, *, per_type: int = 2, seed: int = 0):
    """Hard negatives of a generated world's captions fit to train on: verified false of their image and free
    of the world's held-out compounds (:class:`features.world.training_negatives.WorldTrainingNegatives`)."""
    from features.world.training_negatives import WorldTrainingNegatives

    return WorldTrainingNegatives(world_dir, tuple(kinds), per_type=per_type, seed=seed)


def data_root() -> Path:
    root = os.environ.get("GC_DATA_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "grounded_composer", "data")
    return Path(root)


_HELD_OUT_DEFAULTS = (0, 8, 6)  # CompositionalConfig's seed, attribute and relation compounds


def world_config(world_images: int, world_seed: int = 0, world_split: str = "compositional",
                 held_out_seed: int = 0, held_out_pairs: int = 8, held_out_facts: int = 6):
    """The generator's config of ``--data world`` (:class:`features.world.generate.GenerateConfig`)."""
    from features.world.compositional import CompositionalConfig
    from features.world.generate import GenerateConfig

    if world_split not in WORLD_SPLITS:
        raise ValueError(f"world_split must be one of {WORLD_SPLITS}, got {world_split!r}")
    held = (held_out_seed, held_out_pairs, held_out_facts)
    if world_split == "random":
        if held != _HELD_OUT_DEFAULTS:
            raise ValueError(f"world held-out settings {held} given for a random split, which holds nothing out")
        return GenerateConfig(num_images=world_images, seed=world_seed)
    return GenerateConfig(num_images=world_images, seed=world_seed, compositional=CompositionalConfig(
        seed=held_out_seed, num_attribute_compounds=held_out_pairs, num_relation_compounds=held_out_facts))


def world_dir(world_images: int, world_seed: int = 0, world_split: str = "compositional",
              held_out_seed: int = 0, held_out_pairs: int = 8, held_out_facts: int = 6) -> Path:
    """Where ``--data world`` lives; the generator's version is in the name, so a world of an older
    generator is never taken for today's, and so are held-out settings other than the defaults."""
    from features.world.generate import WORLD_VERSION

    if world_split not in WORLD_SPLITS:
        raise ValueError(f"world_split must be one of {WORLD_SPLITS}, got {world_split!r}")
    held = (held_out_seed, held_out_pairs, held_out_facts)
    suffix = "" if held == _HELD_OUT_DEFAULTS else f"-h{held_out_seed}p{held_out_pairs}f{held_out_facts}"
    return data_root() / f"world-v{WORLD_VERSION}-{world_split}-s{world_seed}-n{world_images}{suffix}"


def _check_world_settings(out: Path, cfg) -> None:
    """Refuse a cached world whose ``world.json`` records other generator settings (e.g. another held-out set)."""
    import json

    from features.world.generate import generator_settings

    recorded = json.loads((out / "world.json").read_text(encoding="utf-8"))
    want = generator_settings(cfg)
    # what is rendered (PNGs) does not change the data
    if recorded.get("version") != want["version"] or \
            {k: v for k, v in (recorded.get("config") or {}).items() if k != "render"} != \
            {k: v for k, v in want["config"].items() if k != "render"}:
        raise ValueError(f"{out}/world.json records other generator settings than asked for (version "
                         f"{recorded.get('version')}, compositional {recorded.get('config', {}).get('compositional')}; "
                         f"asked: version {want['version']}, compositional {want['config']['compositional']}): "
                         f"delete the folder or set GC_DATA_DIR elsewhere")


def resolve_dataset(name: str, *, captions: str | Path | None = None, features: str | Path | None = None,
                    world_images: int = 4000, world_seed: int = 0, world_split: str = "compositional",
                    world_held_out_seed: int = 0, world_held_out_pairs: int = 8, world_held_out_facts: int = 6,
                    progress: bool = True) -> DatasetSpec:
    """Resolve ``--data NAME`` (plus optional ``--captions`` / ``--features`` overrides)."""
    if name == "world":
        from features.world.generate import generate_world

        held = (world_held_out_seed, world_held_out_pairs, world_held_out_facts)
        cfg = world_config(world_images, world_seed, world_split, *held)
        out = world_dir(world_images, world_seed, world_split, *held)
        compositional = world_split == "compositional"
        if not (out / "world.json").exists():
            generate_world(out, cfg, progress=progress)
        else:
            _check_world_settings(out, cfg)
        spec = DatasetSpec("world", Path(captions or out / "captions.jsonl"), Path(features or out / "features.h5"),
                           world_dir=out, parser="world")
        if compositional:
            spec.test_splits = ("test_iid",)
            spec.eval_splits = {"systematic": ("test_systematic",), "productivity": ("test_productivity",)}
        return spec
    if name == "f30k":
        default = _SHARED / "flickr30k" / "captions.jsonl"
        caps = Path(captions) if captions else default
        if not caps.exists():
            raise FileNotFoundError(f"Flickr30K captions not found at {caps}; pass --captions PATH "
                                    f"(the shared JSONL, or Karpathy's dataset_flickr30k.json)")
        return DatasetSpec("f30k", caps, Path(features) if features else None)
    if name == "coco":
        default = _SHARED / "coco" / "captions.jsonl.gz"
        caps = Path(captions) if captions else default
        if not caps.exists():
            raise FileNotFoundError(f"COCO captions not found at {caps}; pass --captions PATH "
                                    f"(Karpathy's dataset_coco.json, or the shared JSONL)")
        return DatasetSpec("coco", caps, Path(features) if features else None,
                           train_splits=("train", "restval"))
    path = Path(name)
    if path.exists():
        return DatasetSpec(path.stem, path, Path(features) if features else None)
    raise ValueError(f"unknown dataset {name!r}: choose one of {DATASETS} or give a caption file path")

"""An evaluation set from any corpus: its CRG, the candidate images' regions, and (for the world) exact truth.

The images are chosen as validation does during training (:func:`select_eval_images`: the first
``eval_images`` images of the split in corpus order, with all their captions), so a checkpoint's
numbers here match its training-time validation. Any corpus works, which is how cross-dataset
evaluation is run: a model trained on one corpus, evaluated on another's test split, or on an MCD
split file written by ``experiments/make_mcd_split.py`` (``split="all"``: every image of the file).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

__all__ = ["EvalData", "EvalImages", "EvalSets", "load_eval_data", "resolve_splits", "select_eval_images"]

log = logging.getLogger(__name__)


@dataclass
class EvalImages:
    """Images and captions scored by retrieval: every caption against every image."""

    image_ids: list[str]
    captions: list[int]            # caption indices into the split's graph
    caption_image: np.ndarray      # (C,) index into image_ids of each caption's own image


def select_eval_images(graph, max_images: int) -> EvalImages:
    """The first ``max_images`` images of ``graph`` in corpus order (the order of their first caption),
    with all their captions: the candidates of validation, test and offline evaluation alike.

    >>> from types import SimpleNamespace
    >>> g = SimpleNamespace(image_ids=["a", "b", "c"], caption_image=[1, 1, 0, 2], num_captions=4)
    >>> ev = select_eval_images(g, 2)
    >>> ev.image_ids, ev.captions, ev.caption_image.tolist()
    (['b', 'a'], [0, 1, 2], [0, 0, 1])
    """
    if max_images < 1:
        raise ValueError(f"eval_images (--eval-images) must be at least 1, got {max_images}")
    order: list[str] = []
    seen: set[str] = set()
    for i in graph.caption_image:
        image = graph.image_ids[i]
        if image not in seen:
            seen.add(image)
            order.append(image)
    keep = order[:max_images]
    index = {im: k for k, im in enumerate(keep)}
    caps = [c for c in range(graph.num_captions) if graph.image_ids[graph.caption_image[c]] in index]
    return EvalImages(keep, caps, np.asarray([index[graph.image_ids[graph.caption_image[c]]] for c in caps]))


@dataclass
class EvalData:
    """Candidates and queries of one evaluation.

    Attributes:
        name: the dataset's name; split: what was selected (``test``, ``all``, ``val,test`` ...).
        graph: the CRG of the selected split (all its images, not only the candidates).
        image_ids: (I,) candidate images.
        captions: (C,) graph caption indices of the candidates' captions (the sentence queries).
        caption_image: (C,) index into ``image_ids`` of each caption's image.
        regions, geometry, region_mask: (I, R, Dr), (I, R, 5), (I, R) bool (True = real region).
        truth: the dataset's exact truth (:class:`composer.evaluation.truth.ExactTruth`; the generated
            world has one), else None.
        store: the feature store, for images outside the candidates; max_regions: regions read per image.
        parser: ``(parser, parser_model)`` the CRG was built with, for texts outside it.
        training_texts: the corpus's training captions (its ``train_splits``) when the evaluated images are not
            among them, for R@1 on the captions not seen verbatim in training; else None.
        twin_groups: the minimal-pair twin groups (a compositional world's ``twins.jsonl`` records) of the
            selected splits; empty for other data.
    """

    name: str
    split: str
    graph: object
    image_ids: list[str]
    captions: list[int]
    caption_image: np.ndarray
    regions: torch.Tensor
    geometry: torch.Tensor
    region_mask: torch.Tensor
    truth: object | None
    store: object
    max_regions: int
    parser: tuple[str, str | None] = ("spacy", None)
    twin_groups: list = field(default_factory=list)
    training_texts: list[str] | None = None


def resolve_splits(spec, split: str) -> tuple[str, ...] | None:
    """Split labels for ``split``: a role (``train``, ``val``, ``test``: the dataset's own labels for it, or a
    further evaluation set such as the compositional world's ``systematic``), ``all`` (None: every image) or
    comma-separated labels."""
    roles = {"train": spec.train_splits, "val": spec.val_splits, "test": spec.test_splits, **spec.eval_splits}
    if split in roles:
        return tuple(roles[split])
    if split == "all":
        return None
    labels = tuple(s.strip() for s in split.split(",") if s.strip())
    if not labels:
        raise ValueError(f"split {split!r}: give train, val, test, all, or comma-separated split labels")
    return labels


def load_eval_data(data: str, *, split: str = "test", captions: str | None = None, features: str | None = None,
                   eval_images: int = 1000, max_regions: int = 100, world_images: int = 4000,
                   world_split: str = "compositional", world_held_out_seed: int = 0,
                   world_held_out_pairs: int = 8, world_held_out_facts: int = 6,
                   world_dir: str | Path | None = None, parser: str | None = None,
                   parser_model: str | None = None,
                   device: str | torch.device = "cpu", progress: bool = False, prune_probability: float = 0.0,
                   prune_seed: int = 0) -> EvalData:
    """Load an evaluation set (see the module docstring).

    Args:
        data: ``world``, ``f30k``, ``coco`` or a caption file (as ``--data`` of the training script).
        captions, features: override the dataset's caption corpus / feature store.
        eval_images: candidate images (the paper's 1,000).
        max_regions: detector regions per image (plus the global one), as in training.
        world_images, world_split, world_held_out_seed, world_held_out_pairs, world_held_out_facts: the
            generated world's (:class:`composer.training.data.DataConfig`).
        world_dir: a generated world's directory, for exact truth when ``data`` is one of its files
            (e.g. an MCD split of the world); found automatically for ``data="world"``.
        parser, parser_model: the CRG's parser (default: the dataset's; the world: its gold trees).
        prune_probability, prune_seed: the CRG from degraded parses (Table 7; see :class:`DataConfig`).
    """
    from crg.corpus import read_corpus
    from crg.graph_cache import get_or_build_graph
    from features.check import require_valid_store
    from features.catalog import exact_truth, resolve_dataset
    from features.store import FeatureStore

    spec = resolve_dataset(data, captions=captions, features=features, world_images=world_images,
                           world_split=world_split, world_held_out_seed=world_held_out_seed,
                           world_held_out_pairs=world_held_out_pairs, world_held_out_facts=world_held_out_facts,
                           progress=progress)
    splits = resolve_splits(spec, split)
    parser, parser_model = spec.parser_for(parser, parser_model)  # None: the dataset's (the world: its gold trees)
    graph, _ = get_or_build_graph(spec.captions, splits, parser_name=parser, parser_model=parser_model,
                                  progress=progress, prune_probability=prune_probability, prune_seed=prune_seed)
    if graph.num_captions == 0:
        raise ValueError(f"{spec.captions} has no caption in split(s) {splits}: choose --split among its labels "
                         f"(e.g. 'all' for an MCD split file)")
    ev = select_eval_images(graph, eval_images)  # the same image selection as validation during training
    store_path = spec.require_features()
    # as training does: a damaged store (NaN values, missing images, wrong shapes) is refused here, with
    # the problems listed, instead of turning into wrong scores
    corpus = read_corpus(spec.captions)
    require_valid_store(store_path, corpus)
    training_texts = None
    if splits is not None and not set(splits) & set(spec.train_splits):
        training_texts = [c for im in corpus.images if im.split in spec.train_splits for c in im.captions] or None
    store = FeatureStore(store_path)
    batch = store.read_batch(ev.image_ids, max_regions, add_global=True)
    world = Path(world_dir) if world_dir is not None else spec.world_dir
    truth = exact_truth(world)
    if truth is not None:
        missing = [i for i in ev.image_ids if not truth.has_image(i)]
        if missing:  # before any scoring: the truth of another world would fail, or lie, at its end
            raise ValueError(f"{'--world-dir ' if world_dir is not None else ''}{world}: {len(missing)} of the "
                             f"{len(ev.image_ids)} evaluation images are not scenes of this world (first: "
                             f"{missing[0]!r}); give the world the captions and features come from")
    log.info("%s/%s: %d images, %d captions; exact truth: %s", spec.name, split, len(ev.image_ids),
             len(ev.captions), world is not None)
    twins = []
    if world is not None and captions is None and (world / "twins.jsonl").exists():
        with open(world / "twins.jsonl", encoding="utf-8") as f:
            twins = [g for g in map(json.loads, f) if splits is None or g["split"] in set(splits)]
    return EvalData(name=spec.name, split=split, graph=graph, image_ids=list(ev.image_ids), captions=list(ev.captions),
                    caption_image=np.asarray(ev.caption_image), regions=torch.from_numpy(batch.features).to(device),
                    geometry=torch.from_numpy(batch.geometry).to(device),
                    region_mask=torch.from_numpy(batch.mask).to(device), truth=truth,
                    store=store, max_regions=max_regions, parser=(parser, parser_model),
                    training_texts=training_texts, twin_groups=twins)


class EvalSets:
    """The generated world's evaluation sets in one process, each loaded on first use per (parser, parse pruning,
    regions per image): the first ``eval_images`` images of its test split (``world``: its
    :class:`composer.training.data.DataConfig` fields), split files over the ``features`` store (an MCD split,
    its windows) and the hard-negative set at ``hard_negatives`` with its texts as programs. Parses are pruned
    with ``prune_seed`` (pruned parses are data: the same for every model seed)."""

    _shared: dict = {}

    def __init__(self, world: dict, eval_images: int, features: str, hard_negatives: str, prune_seed: int = 0):
        self.world, self.eval_images, self.features, self.prune_seed = world, eval_images, features, prune_seed
        self._cache: dict = {}
        self.hn_set = json.loads(Path(hard_negatives).read_text())

    @classmethod
    def shared(cls, *args) -> EvalSets:
        """This process's sets for these arguments (a study's Ray worker or driver loads each set once for all
        its runs)."""
        key = json.dumps(args, sort_keys=True)
        if key not in cls._shared:
            cls._shared.clear()
            cls._shared[key] = cls(*args)
        return cls._shared[key]

    def _get(self, key, make):
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def test(self, prune: float, max_regions: int, parser: str = "world"):
        return self._get(("test", parser, prune, max_regions), lambda: load_eval_data(
            "world", split="test", eval_images=self.eval_images, max_regions=max_regions, **self.world,
            parser=parser, prune_probability=prune, prune_seed=self.prune_seed))

    def split_file(self, path: str, num_images: int, prune: float, max_regions: int, parser: str = "world"):
        return self._get(("file", path, parser, prune, max_regions), lambda: load_eval_data(
            path, split="all", features=self.features, eval_images=num_images, max_regions=max_regions,
            parser=parser, prune_probability=prune, prune_seed=self.prune_seed))

    def hn_programs(self, prune: float, parser: str = "world") -> dict:
        from composer.evaluation.hard_negatives import eval_pairs
        from composer.evaluation.text_pairs import programs_for_texts

        texts = [t for _, t in eval_pairs(self.hn_set)]
        return self._get(("hn", parser, prune), lambda: programs_for_texts(texts, parser_name=parser,
                                                                           prune_probability=prune,
                                                                           prune_seed=self.prune_seed))

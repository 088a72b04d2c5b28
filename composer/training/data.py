"""Training and evaluation data for COMPOSER: captions as CRG programs, images from a feature store.

A training batch holds B positive (image, caption) pairs and, for each, negatives after ViLBERT's
retrieval fine-tuning: ``negative_captions`` captions of other images paired with the positive image,
and ``negative_images`` other images paired with the positive caption. Every pair is composed on its
image, so the batch has ``Q = B * (1 + K)`` pairs, ``K`` negatives per positive. By default every
caption negative is random; ViLBERT draws one of them from the positive's nearest neighbours
(``hard_negative_captions=1``, :mod:`composer.training.caption_neighbours`).

Structural negatives (a recipe option, off by default; :mod:`composer.training.structural_negatives`): on
the generated world, ``structural_negatives.per_caption`` more caption-negative columns per positive hold
captions verified false of the positive's image (CREPE's swap / atom / negation / binding edits of its
caption), never a held-out compound nor an evaluation caption; a positive without one (or not drawn, at
``rate`` < 1) gets a random caption there, marked in ``TrainBatch.structural_valid``. COMPOSER's and the flat
model's match loss read every column as it is; the dual encoders read the valid ones as extra text negatives
of that image. They are drawn from their own random stream, so the other negatives stay as they were.

Determinism: the caption order of epoch ``e`` is a permutation seeded by ``(seed, e)``, and the
negatives of batch ``b`` come from a generator seeded by ``(seed, e, b)``. The training loader is
*stateful*: Lightning stores its position (the batches the model has trained on) in checkpoints and
hands it back on resume, so a run killed mid-epoch continues with exactly the batches it would have
seen.

Validation and test: text-to-image retrieval ranks every caption of the split's evaluation set against
every one of its images, which no per-batch metric can do. The validation (test) loader's one batch is
therefore the whole evaluation set, a :class:`composer.evaluation.sentence_retrieval.SentenceRetrievalSet`
(image ids, caption programs, each caption's image, and a reader for the regions, called only where the
set is scored); the LightningModule scores it at the end of the epoch on one process
(:class:`composer.models.common.retrieval_module.RetrievalModule`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from functools import partial

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, Sampler

from composer.evaluation.eval_sets import EvalImages, select_eval_images
from composer.evaluation.sentence_retrieval import SentenceRetrievalSet, ceiling_reports
from composer.models.composer.program import ConceptProgram, ProgramBatch
from composer.training.structural_negatives import StructuralNegativeConfig

__all__ = ["DataConfig", "CompositionDataModule", "TrainBatch", "EvalImages", "EpochBatchSampler",
           "StructuralNegativeConfig"]

logger = logging.getLogger(__name__)


@dataclass
class DataConfig:
    """Where the data are and how batches are drawn (paper: batch 64, 100 regions, ViLBERT's negatives).

    Attributes:
        data: ``world`` (generated offline), ``f30k``, ``coco``, or a caption file (features/catalog.py).
        captions, features: override the dataset's caption corpus and feature store.
        batch_size: positive pairs per batch.
        negative_captions: other images' captions paired with each positive image.
        negative_images: other images paired with each positive caption.
        hard_negative_captions: how many of the ``negative_captions`` are hard: drawn from the positive
            caption's ``hard_negative_pool`` nearest captions of other images (ViLBERT's hard distractor,
            :mod:`composer.training.caption_neighbours`); 0 = every caption negative at random.
        hard_negative_pool: the nearest captions a hard negative is drawn from (ViLBERT: 100).
        max_regions: detector regions kept per image (plus the global region).
        eval_images: images scored in validation/test retrieval (the paper's 1,000 images x 5 captions).
        val_images: images of the validation set scored *during training* (the plateau's monitor); None =
            ``eval_images``. A smaller one makes frequent validation affordable for the cross-encoders.
        parser, parser_model: the constituency parser for the CRG (``--parser``); ``None``: the dataset's
            (:meth:`features.catalog.DatasetSpec.parser_for`: the world's gold trees, spaCy for real captions).
        world_images: size of the generated world for ``data=world``.
        world_split: ``compositional`` (default: compounds held out of training, tested in-domain on
            ``test_iid`` and on the ``systematic`` / ``productivity`` sets) or ``random`` (an i.i.d. split).
        world_held_out_seed, world_held_out_pairs, world_held_out_facts: which compounds the compositional
            world holds out: their seed, colour-shape pairs and relation facts (``python -m
            features.world.generate --held-out-seed/--held-out-pairs/--held-out-facts``; docs/world.md).
        prune_probability, prune_seed: build every split's CRG from parses whose branches are removed
            with this probability (the paper's Table 7, :func:`crg.extract.prune_tree`); 0 = the parser's trees.
        structural_negatives: verified-false caption negatives of the positive's own image (kinds, rate;
            :class:`composer.training.structural_negatives.StructuralNegativeConfig`; off by default).
    """

    data: str = "world"
    captions: str | None = None
    features: str | None = None
    batch_size: int = 64
    negative_captions: int = 2
    negative_images: int = 1
    hard_negative_captions: int = 0
    hard_negative_pool: int = 100
    max_regions: int = 100
    eval_images: int = 1000
    val_images: int | None = None
    num_workers: int = 0
    seed: int = 0
    parser: str | None = None
    parser_model: str | None = None
    world_images: int = 4000
    world_split: str = "compositional"
    world_held_out_seed: int = 0
    world_held_out_pairs: int = 8
    world_held_out_facts: int = 6
    prune_probability: float = 0.0
    prune_seed: int = 0
    structural_negatives: StructuralNegativeConfig = field(default_factory=StructuralNegativeConfig)

    def __post_init__(self):
        if isinstance(self.structural_negatives, dict):  # from a saved run's settings
            self.structural_negatives = StructuralNegativeConfig(**self.structural_negatives)
        if not 0.0 <= self.prune_probability <= 1.0:
            raise ValueError(f"prune_probability must lie in [0, 1], got {self.prune_probability}")
        if self.batch_size < 1 or self.negative_captions < 0 or self.negative_images < 0:
            raise ValueError(f"batch_size must be >= 1 and negatives >= 0, got {self.batch_size}, "
                             f"{self.negative_captions}, {self.negative_images}")
        if self.negative_captions + self.negative_images == 0:
            raise ValueError("the match loss needs at least one negative (negative_captions or negative_images)")
        if not 0 <= self.hard_negative_captions <= self.negative_captions or self.hard_negative_pool < 1:
            raise ValueError(f"hard_negative_captions must lie in [0, negative_captions={self.negative_captions}] "
                             f"and hard_negative_pool be >= 1, got {self.hard_negative_captions}, "
                             f"{self.hard_negative_pool}")


@dataclass
class TrainBatch:
    """One training batch.

    Attributes:
        regions: (I, R, Dr) region features of the batch's distinct images; geometry (I, R, 5);
            region_mask (I, R) bool, True = real region.
        programs: the C distinct captions' composition programs.
        pair_image, pair_caption: (B, 1 + K) long indices; column 0 is the positive pair, columns
            1..Kc the caption negatives (positive image, other caption), the rest the image
            negatives (other image, positive caption).
        num_caption_negatives: Kc.
        image_ids: (I,) the images' ids, in ``regions``' order (NegCLIP's image pool knows images by id).
        structural_negatives: S, the last S of the Kc caption-negative columns hold structural negatives.
        structural_valid: (B, S) bool, True = a caption verified false of the row's image; False = a random
            caption filled the column (no structural negative for that positive). None when S = 0.
    """

    regions: torch.Tensor
    geometry: torch.Tensor
    region_mask: torch.Tensor
    programs: ProgramBatch
    pair_image: torch.Tensor
    pair_caption: torch.Tensor
    num_caption_negatives: int
    image_ids: tuple[str, ...] | None = None
    structural_negatives: int = 0
    structural_valid: torch.Tensor | None = None

    def to(self, device) -> "TrainBatch":
        return TrainBatch(self.regions.to(device), self.geometry.to(device), self.region_mask.to(device),
                          self.programs, self.pair_image.to(device), self.pair_caption.to(device),
                          self.num_caption_negatives, self.image_ids, self.structural_negatives,
                          None if self.structural_valid is None else self.structural_valid.to(device))


class EpochBatchSampler(Sampler[list[int]]):
    """Batches of caption indices; epoch ``e``'s order is fixed by ``(seed, e)``.

    The epoch is read from ``epoch_fn`` at each pass (the trainer's current epoch; Lightning calls
    ``set_epoch`` only on samplers, not on batch samplers). :meth:`resume_at` makes the next pass of
    that epoch skip the batches already trained on.

    Under DDP each of ``num_replicas`` processes takes every ``num_replicas``-th batch of the one global
    order, from its ``rank`` on, all processes the same number (the last incomplete round is dropped, as
    the last partial batch is): a step of N processes trains on N distinct batches, and each batch keeps
    its global index, which seeds its negatives. Lightning cannot shard a batch sampler itself
    (``use_distributed_sampler=False``, :func:`composer.training.fit.fit_and_report`).
    """

    def __init__(self, num_items: int, batch_size: int, seed: int, epoch_fn=None, *, num_replicas: int = 1,
                 rank: int = 0):
        if not 0 <= rank < num_replicas:
            raise ValueError(f"rank {rank} is not one of {num_replicas} replicas")
        self.num_items, self.batch_size, self.seed = num_items, batch_size, seed
        self.num_replicas, self.rank = num_replicas, rank
        self.epoch_fn = epoch_fn or (lambda: 0)
        self._resume: tuple[int, int] | None = None

    def resume_at(self, epoch: int, done: int) -> None:
        """Skip the first ``done`` of this process's batches when the next pass is epoch ``epoch``."""
        self._resume = (epoch, done)

    def global_batches(self, epoch: int) -> list[list[int]]:
        """Every process's batches of ``epoch``, in the order they are trained."""
        order = np.random.default_rng([self.seed, epoch]).permutation(self.num_items)
        n = self.num_items // self.batch_size  # drop the last partial batch: equal-size steps
        return [order[k * self.batch_size:(k + 1) * self.batch_size].tolist() for k in range(n)]

    def batches(self, epoch: int) -> list[tuple[int, list[int]]]:
        """This process's batches of ``epoch``: (global batch index, caption indices)."""
        everyone = self.global_batches(epoch)
        mine = list(enumerate(everyone))[self.rank::self.num_replicas]
        return mine[:len(self)]

    def __iter__(self):
        epoch = int(self.epoch_fn())
        start = 0
        if self._resume is not None:
            if self._resume[0] == epoch:
                start = self._resume[1]
            self._resume = None
        for k, batch in self.batches(epoch)[start:]:
            yield [(epoch, k, i) for i in batch]

    def __len__(self) -> int:
        # the full epoch even when resuming: Lightning counts the restored batches as done
        return (self.num_items // self.batch_size) // self.num_replicas


class TrainingPosition:
    """Batches trained on so far: (epoch, batches done in it). Shared by the data module and every
    copy of its training loader (Lightning may re-instantiate loaders), and set by the training step."""

    def __init__(self):
        self.epoch, self.done = 0, 0


class _StatefulLoader(DataLoader):
    """A DataLoader Lightning can checkpoint: its state is the :class:`TrainingPosition`.

    The position comes from the training loop, not from the iterator, which runs ahead of training
    by the prefetched batches.
    """

    def __init__(self, *args, batch_sampler: EpochBatchSampler, position: TrainingPosition, **kwargs):
        super().__init__(*args, batch_sampler=batch_sampler, **kwargs)
        self.position = position

    def state_dict(self) -> dict:
        return {"epoch": self.position.epoch, "batches_done": self.position.done}

    def load_state_dict(self, state: dict) -> None:
        self.batch_sampler.resume_at(int(state["epoch"]), int(state["batches_done"]))
        self.position.epoch, self.position.done = int(state["epoch"]), int(state["batches_done"])


class CompositionDataModule(L.LightningDataModule):
    """Captions (as CRG graphs per split) and a feature store, batched for COMPOSER."""

    def __init__(self, cfg: DataConfig, tokenizer=None):
        super().__init__()
        self.cfg = cfg
        self.tokenizer = tokenizer
        self.graphs: dict = {}
        self.position = TrainingPosition()

    # ------------------------------------------------------------------ setup
    def prepare_data(self) -> None:
        """Generate the world / build and cache the graphs once (no state kept here)."""
        for role in self.roles():
            self._graph(role)

    def dataset_spec(self):
        """The dataset's files and split labels (:class:`features.catalog.DatasetSpec`); generates the
        world on first use for ``data="world"``."""
        from features.catalog import resolve_dataset

        return resolve_dataset(self.cfg.data, captions=self.cfg.captions, features=self.cfg.features,
                               world_images=self.cfg.world_images, world_split=self.cfg.world_split,
                               world_held_out_seed=self.cfg.world_held_out_seed,
                               world_held_out_pairs=self.cfg.world_held_out_pairs,
                               world_held_out_facts=self.cfg.world_held_out_facts)

    def roles(self) -> tuple[str, ...]:
        """``train``, ``val``, ``test`` and the dataset's further evaluation sets (``systematic``, ...)."""
        return ("train", "val", "test", *self.dataset_spec().eval_splits)

    def eval_roles(self) -> tuple[str, ...]:
        """The dataset's further evaluation sets, scored after training beside ``test``."""
        return tuple(self.dataset_spec().eval_splits)

    def splits_of(self, role: str) -> tuple[str, ...]:
        """The dataset's split labels of a role (``train``, ``val``, ``test``, or a further evaluation set)."""
        spec = self.dataset_spec()
        return tuple({"train": spec.train_splits, "val": spec.val_splits, "test": spec.test_splits,
                      **spec.eval_splits}[role])

    def parser(self) -> tuple[str, str | None]:
        """``(parser, parser_model)`` the CRGs are built with: the configured one, else the dataset's."""
        return self.dataset_spec().parser_for(self.cfg.parser, self.cfg.parser_model)

    def twin_groups(self, role: str) -> list[dict]:
        """The minimal-pair twin groups (a compositional world's ``twins.jsonl`` records) of a role's splits;
        none for other datasets or with ``captions`` overridden."""
        import json

        world = self.dataset_spec().world_dir
        path = None if world is None or self.cfg.captions is not None else world / "twins.jsonl"
        if path is None or not path.exists():
            return []
        splits = set(self.splits_of(role))
        with open(path, encoding="utf-8") as f:
            return [g for g in map(json.loads, f) if g["split"] in splits]

    def _graph(self, role: str):
        from crg.graph_cache import get_or_build_graph

        spec = self.dataset_spec()
        splits = self.splits_of(role)
        parser_name, parser_model = self.parser()
        graph, _ = get_or_build_graph(spec.captions, list(splits), parser_name=parser_name,
                                      parser_model=parser_model, progress=False,
                                      prune_probability=self.cfg.prune_probability, prune_seed=self.cfg.prune_seed)
        return graph

    def setup(self, stage: str | None = None) -> None:
        from crg.corpus import read_corpus
        from features.check import require_valid_store
        from features.store import FeatureStore

        spec = self.dataset_spec()
        self.spec = spec
        store_path = spec.require_features()
        require_valid_store(store_path, read_corpus(spec.captions))
        self.store = FeatureStore(store_path)
        for role in self.roles():
            if role not in self.graphs:
                self.graphs[role] = self._graph(role)
        g = self.graphs["train"]
        self.train_caption_image = [g.image_ids[i] for i in g.caption_image]
        self.train_by_image: dict[str, list[int]] = {}
        for c, image in enumerate(self.train_caption_image):
            self.train_by_image.setdefault(image, []).append(c)
        self.train_images = sorted(self.train_by_image)
        self.structural = None  # StructuralNegativeSource, when structural negatives are on
        if self.cfg.structural_negatives.enabled:
            self.structural = self._structural_source(spec)
        self.hard_pool = None  # (N_train_captions, P) nearest captions of other images, when hard negatives are on
        if self.cfg.hard_negative_captions:
            from composer.training.caption_neighbours import hard_caption_pool

            self.hard_pool = hard_caption_pool(g.caption_texts, g.caption_image, self.cfg.hard_negative_pool)
            if self.hard_pool.shape[1] == 0:
                raise ValueError("hard caption negatives: no training caption of another image to draw from")
        logger.info("train: %d images, %d captions; val %d, test %d captions", len(self.train_images),
                    g.num_captions, self.graphs["val"].num_captions, self.graphs["test"].num_captions)

    def _structural_source(self, spec):
        """The structural negatives' source: the world's scene graphs, banning every evaluation caption."""
        from composer.training.structural_negatives import StructuralNegativeSource, texts_of

        if spec.world_dir is None or self.cfg.captions is not None:
            raise ValueError(f"structural negatives need a generated world's scene graphs to verify them false; "
                             f"data={self.cfg.data!r} (captions={self.cfg.captions!r}) has none: use data='world' "
                             f"or turn structural_negatives off")
        banned = texts_of([r for r in self.roles() if r != "train"], self.graphs)
        source = StructuralNegativeSource(spec.world_dir, self.cfg.structural_negatives, banned)
        self._structural_programs: dict[str, ConceptProgram | None] = {}
        sn = self.cfg.structural_negatives
        logger.info("structural negatives on: %s, %d per caption at rate %.2f (verified false of the image; no "
                    "held-out compound; none of the %d evaluation captions)", ", ".join(sn.kinds), sn.per_caption,
                    sn.rate, len(source.banned))
        return source

    def _programs_of(self, texts: list[str]) -> dict[str, ConceptProgram | None]:
        """Programs of negative texts, parsed as the training CRG's captions are (same parser and pruning)."""
        from composer.evaluation.text_pairs import programs_for_texts

        todo = [t for t in dict.fromkeys(texts) if t not in self._structural_programs]
        if todo:
            name, model = self.parser()
            self._structural_programs.update(programs_for_texts(
                todo, parser_name=name, parser_model=model, prune_probability=self.cfg.prune_probability,
                prune_seed=self.cfg.prune_seed))
        return self._structural_programs

    def _structural_choices(self, positives: list[int], rng: np.random.Generator) -> list[list[str]]:
        """Per positive, its drawn structural negatives (at most ``per_caption``; [] when not drawn). Only the
        drawn ones are parsed (a negative whose parse fails is replaced by the next in the drawn order)."""
        cfg = self.cfg.structural_negatives
        g = self.graphs["train"]
        orders = []
        for c in positives:
            texts = self.structural.negatives(self.train_caption_image[c], g.caption_texts[c])
            drawn = rng.random() < cfg.rate
            order = [texts[int(k)] for k in rng.permutation(len(texts))]  # either way: rate shifts no stream
            orders.append(order if drawn else [])
        chosen = [order[:cfg.per_caption] for order in orders]
        nxt = [cfg.per_caption] * len(orders)
        while True:
            programs = self._programs_of([t for row in chosen for t in row])
            short = False
            for r, order in enumerate(orders):
                kept = [t for t in chosen[r] if programs.get(t) is not None]
                while len(kept) < min(cfg.per_caption, len(order)) and nxt[r] < len(order):
                    kept.append(order[nxt[r]])  # parsed on the next pass
                    nxt[r] += 1
                    short = True
                chosen[r] = kept
            if not short:
                return [[t for t in row if programs.get(t) is not None] for row in chosen]

    # ------------------------------------------------------------------ training batches
    def train_dataloader(self) -> DataLoader:
        g = self.graphs["train"]
        replicas, rank = self._replicas()
        sampler = EpochBatchSampler(g.num_captions, self.cfg.batch_size, self.cfg.seed,
                                    epoch_fn=lambda: self.trainer.current_epoch if self.trainer is not None else 0,
                                    num_replicas=replicas, rank=rank)
        # its own generator: making an iterator must not draw from the global RNG (dropout's), or a
        # resumed run's dropout masks would shift by one draw
        return _StatefulLoader(_Indices(), batch_sampler=sampler, position=self.position,
                               collate_fn=self.collate_train, num_workers=self.cfg.num_workers,
                               generator=torch.Generator().manual_seed(self.cfg.seed))

    def _replicas(self) -> tuple[int, int]:
        """(processes training, this one's global rank): (1, 0) outside a trainer or without DDP."""
        if self.trainer is None:
            return 1, 0
        return self.trainer.world_size, self.trainer.global_rank

    def steps_per_epoch(self) -> int:
        """Optimizer steps per epoch: under DDP each step takes one batch per process."""
        if "train" not in self.graphs:
            self.setup()
        return max(1, self.graphs["train"].num_captions // self.cfg.batch_size // self._replicas()[0])

    def mark_trained(self, epoch: int, batch_idx: int) -> None:
        """Record that the batch ``batch_idx`` of ``epoch`` has been trained on (called by the step)."""
        self.position.epoch, self.position.done = epoch, batch_idx + 1

    def collate_train(self, items: list[tuple[int, int, int]]) -> TrainBatch:
        epoch, batch_idx = items[0][0], items[0][1]
        positives = [i for _, _, i in items]
        rng = np.random.default_rng([self.cfg.seed, epoch, batch_idx, 1])
        g = self.graphs["train"]
        captions: list[int] = []       # distinct caption indices of the batch
        images: list[str] = []         # distinct image ids of the batch
        cap_slot: dict[int, int] = {}
        img_slot: dict[str, int] = {}

        def cap(c: int) -> int:
            if c not in cap_slot:
                cap_slot[c] = len(captions)
                captions.append(c)
            return cap_slot[c]

        def img(i: str) -> int:
            if i not in img_slot:
                img_slot[i] = len(images)
                images.append(i)
            return img_slot[i]

        n_img = len(self.train_images)
        S = self.cfg.structural_negatives.per_caption if self.structural is not None else 0
        extra: list[str] = []          # structural negative texts of the batch (caption slots after the graph's)
        extra_slot: dict[str, int] = {}
        chosen = self._structural_choices(positives, np.random.default_rng([self.cfg.seed, epoch, batch_idx, 2])) \
            if S else [[] for _ in positives]
        structural_valid = []
        pair_image, pair_caption = [], []
        for c, struct in zip(positives, chosen):
            own = self.train_caption_image[c]
            row_i, row_c = [img(own)], [cap(c)]
            n_hard = self.cfg.hard_negative_captions
            for _ in range(self.cfg.negative_captions - n_hard):  # another image's caption, on this image
                other = self.train_images[int(rng.integers(n_img))]
                while other == own and n_img > 1:
                    other = self.train_images[int(rng.integers(n_img))]
                choices = self.train_by_image[other]
                row_i.append(img(own))
                row_c.append(cap(choices[int(rng.integers(len(choices)))]))
            for _ in range(n_hard):  # one of this caption's nearest captions of other images, on this image
                row_i.append(img(own))
                row_c.append(cap(int(self.hard_pool[c, int(rng.integers(self.hard_pool.shape[1]))])))
            if S:
                fill = np.random.default_rng([self.cfg.seed, epoch, batch_idx, 3, c])
                valid = []
                for k in range(S):  # a verified-false caption of this image, else a random other image's caption
                    row_i.append(img(own))
                    if k < len(struct):
                        text = struct[k]
                        if text not in extra_slot:
                            extra_slot[text] = len(extra)
                            extra.append(text)
                        row_c.append(-1 - extra_slot[text])  # resolved after the graph's captions are known
                        valid.append(True)
                    else:
                        other = self.train_images[int(fill.integers(n_img))]
                        while other == own and n_img > 1:
                            other = self.train_images[int(fill.integers(n_img))]
                        choices = self.train_by_image[other]
                        row_c.append(cap(choices[int(fill.integers(len(choices)))]))
                        valid.append(False)
                structural_valid.append(valid)
            for _ in range(self.cfg.negative_images):  # another image, with this caption
                other = self.train_images[int(rng.integers(n_img))]
                while other == own and n_img > 1:
                    other = self.train_images[int(rng.integers(n_img))]
                row_i.append(img(other))
                row_c.append(cap(c))
            pair_image.append(row_i)
            pair_caption.append(row_c)
        regions = self.store.read_batch(images, self.cfg.max_regions, add_global=True)
        if extra:
            n = len(captions)
            pair_caption = [[n - 1 - x if x < 0 else x for x in row] for row in pair_caption]  # -1 - j -> n + j
            parsed = self._structural_programs
            programs = ProgramBatch.collate([ConceptProgram.from_graph(g, c) for c in captions]
                                            + [parsed[t] for t in extra], self.tokenizer)
        else:
            programs = ProgramBatch.from_graph(g, captions, self.tokenizer)
        return TrainBatch(torch.from_numpy(regions.features), torch.from_numpy(regions.geometry),
                          torch.from_numpy(regions.mask), programs, torch.tensor(pair_image),
                          torch.tensor(pair_caption), self.cfg.negative_captions + S, tuple(images), S,
                          torch.tensor(structural_valid, dtype=torch.bool) if S else None)

    # ------------------------------------------------------------------ evaluation sets
    def eval_set(self, role: str, max_images: int | None = None) -> EvalImages:
        """The first ``max_images`` (default ``cfg.eval_images``) images of a split in corpus order and all
        their captions (:func:`composer.evaluation.eval_sets.select_eval_images`); needs only ``graphs[role]``."""
        return select_eval_images(self.graphs[role], max_images or self.cfg.eval_images)

    def retrieval_set(self, role: str, max_images: int | None = None) -> SentenceRetrievalSet:
        """The split's sentence-retrieval set: :meth:`eval_set`'s images and captions, the captions as
        programs, and a reader of the images' regions (``cfg.max_regions`` plus the global region, as in
        training) from the feature store. Needs :meth:`setup`."""
        if getattr(self, "store", None) is None:
            raise RuntimeError(f"retrieval_set({role!r}) reads regions from the feature store: call setup() first")
        ev = self.eval_set(role, max_images)
        graph = self.graphs[role]
        programs = [ConceptProgram.from_graph(graph, c) for c in ev.captions]
        image_ids = list(ev.image_ids)
        positives = ceilings = None
        truth = self.exact_truth()
        if truth is not None:  # the world: any-true retrieval and the oracles' ceilings beside the model's
            texts = [p.texts[p.root] for p in programs]
            positives = truth.positives(texts, image_ids)
            oracles = truth.oracle_scores(texts, image_ids)
            if oracles is not None:
                ceilings = ceiling_reports(oracles, ev.caption_image, positives)
        unseen = None
        if role != "train" and "train" in self.graphs:  # captions also written, word for word, in training
            from composer.evaluation.caption_subsets import unseen_in_training

            unseen = unseen_in_training([p.texts[p.root] for p in programs], self.graphs["train"].caption_texts)
        return SentenceRetrievalSet(role, image_ids, programs, ev.caption_image,
                                    partial(_read_regions, self.store, image_ids, self.cfg.max_regions),
                                    positives=positives, ceilings=ceilings, unseen_in_training=unseen)

    def exact_truth(self):
        """The dataset's exact truth (:class:`composer.evaluation.truth.ExactTruth`), or None; loaded once."""
        if not hasattr(self, "_truth"):
            from features.catalog import exact_truth

            self._truth = exact_truth(self.dataset_spec().world_dir) if self.cfg.captions is None else None
        return self._truth

    def val_dataloader(self) -> DataLoader:
        """One batch: the validation split's :meth:`retrieval_set`."""
        return _one_batch(self.retrieval_set("val", self.cfg.val_images))

    def test_dataloader(self) -> DataLoader:
        """One batch: the test split's :meth:`retrieval_set`."""
        return _one_batch(self.retrieval_set("test"))

    def eval_dataloader(self, role: str) -> DataLoader:
        """One batch: a further evaluation set's :meth:`retrieval_set` (``trainer.test(dataloaders=...)``)."""
        return _one_batch(self.retrieval_set(role))


def _read_regions(store, image_ids: list[str], max_regions: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(regions (I, R, Dr), geometry (I, R, 5), mask (I, R)) of ``image_ids`` as CPU tensors."""
    batch = store.read_batch(image_ids, max_regions, add_global=True)
    return torch.from_numpy(batch.features), torch.from_numpy(batch.geometry), torch.from_numpy(batch.mask)


def _first(items: list):
    return items[0]


def _one_batch(item) -> DataLoader:
    """A loader whose only batch is ``item`` (Lightning's distributed sampler hands it to every process).

    It has no generator of its own, so each pass draws one number from torch's global RNG (as any such
    DataLoader does) and the dropout masks after a validation depend on it; trained weights are
    reproducible as they are, and a generator here would change them."""
    return DataLoader([item], batch_size=1, collate_fn=_first)


class _Indices(torch.utils.data.Dataset):
    """A dataset whose items are the sampler's indices: collation does all the work."""

    def __init__(self, n: int = 0):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i):
        return i

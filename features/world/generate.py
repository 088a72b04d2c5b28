"""Generate the synthetic world: captions, scene graphs, region features and pictures, on disk in
the same formats as real data.

    python -m features.world.generate --out runs/world --num-images 4000 --seed 0 --render 24

writes into ``--out``:

* ``captions.jsonl`` -- the shared corpus schema (``image_id``, ``split``, ``captions``) plus, one list
  entry per caption, its complexity (CREPE's number of atoms), and the ``compounds`` and ``atoms`` its
  logical form mentions (:mod:`features.world.semantic_compounds`; what ``--compounds semantic`` MCD splits read);
* ``gold_trees.jsonl`` -- each caption's gold constituency tree from the world's grammar
  (:mod:`features.world.gold_trees`), ``{"caption": ..., "tree": ...}`` lines in ``captions.jsonl``'s order:
  the world's default parser (:class:`crg.preparsed.PreparsedTrees`);
* ``scenes.jsonl.gz`` -- the ground-truth scene graph of every image (objects, attributes, positions,
  every true relation);
* ``features.h5`` -- a feature store (:mod:`features.store`): detector-like region features, pixel
  boxes, image size;
* ``images/<id>.png`` -- rendered pictures of the first ``--render`` images (``-1``: all);
* ``world.json`` -- the configuration, seed and counts (and the held-out compounds of a compositional world);
* ``twins.jsonl`` -- compositional worlds: minimal-pair twin groups of the test images (two captions with
  the same words, two images that differ in two objects; :mod:`features.world.twins`), whose images
  ``<id>~<kind>~0`` / ``~1`` are in the feature store beside the scenes' own.

Same seed and options give byte-identical files. Images are generated in fixed chunks of
:data:`CHUNK` by worker processes; each image's discrete choices come from its own seeded stream,
each chunk's Gaussian noise from the chunk's stream. Workers also serialise their chunk (JSON lines,
float16 features, PNGs), so the main process only appends bytes to the files and rows to the store.
"""

from __future__ import annotations

import argparse
import gzip
import json
import logging
import multiprocessing as mp
import multiprocessing.pool
import os
import random
import sys
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits
from tqdm.auto import tqdm

from crg.fork_pool import fork_pool
from crg.outputs import write_text_atomic
from features.world.compositional import (ROLES, CompositionalConfig, HeldOut, caption_compounds, choose_control,
                                          choose_held_out, sample_role_captions, sample_role_scene, scene_compounds)
from features.world.detector import SyntheticDetector
from features.world.gold_trees import gold_tree_line
from features.world.grammar import sample_captions
from features.world.scene import Scene, SceneObject, WorldConfig, sample_scene
from features.world.semantic_compounds import caption_atoms, semantic_compounds

__all__ = ["GenerateConfig", "generate_world", "image_id", "load_scenes", "main", "CHUNK", "WORLD_VERSION",
           "worker_pool"]

logger = logging.getLogger(__name__)

CHUNK = 500
STORE_COMMIT_EVERY = 4 * CHUNK  # a commit costs ~17 ms (index resizes, two flushes): not one per 256 images
SCENES_GZIP_LEVEL = 3  # 3x faster than 6 for 30 % more bytes (173 against 131 per scene)
# 3: gold_trees.jsonl, per-caption compounds and atoms; 4: test_iid drawn around seen control compounds,
# in-domain twins free of held-out compounds, binding twins with the same words
WORLD_VERSION = 4


@dataclass
class GenerateConfig:
    """What to generate.

    ``split_fractions`` are the train/val/test shares of a random split. With ``compositional`` set, the
    images are split into :data:`features.world.compositional.ROLES` instead (its own fractions), and a
    seeded set of compounds is held out of every training image and caption (docs/world.md, "Compositional
    splits").
    """

    num_images: int = 4000
    seed: int = 0
    captions_per_image: int = 5
    split_fractions: tuple[float, float, float] = (0.8, 0.1, 0.1)
    render: int = 24
    workers: int = 0  # 0: all cores
    world: WorldConfig = field(default_factory=WorldConfig)
    compositional: CompositionalConfig | None = None

    def __post_init__(self):
        if self.num_images < 1:
            raise ValueError(f"num_images must be positive, got {self.num_images}")
        if len(self.split_fractions) != 3 or abs(sum(self.split_fractions) - 1) > 1e-6 or min(self.split_fractions) < 0:
            raise ValueError(f"split_fractions must be three non-negative shares summing to 1, got {self.split_fractions}")


def image_id(seed: int, index: int) -> str:
    return f"w{seed}-{index:06d}"


def _image_rng(seed: int, index: int) -> random.Random:
    return random.Random(f"world:{seed}:{index}")  # str seeds hash with SHA-512: stable across runs


@dataclass
class _Chunk:
    """One chunk of images, generated and serialised by a worker: a few large objects, cheap to pickle.

    Attributes:
        image_ids: the chunk's ``B`` image ids, in order.
        captions: their ``captions.jsonl`` lines, joined.
        scenes: their ``scenes.jsonl.gz`` lines, joined, utf-8 (compressed by the main process: one stream).
        num_captions: captions in ``captions``.
        counts: ``(B,)`` regions per image.
        features: ``(sum counts, D)`` float16, the images' regions one after another (the store's dtype).
        boxes: ``(sum counts, 4)`` float32 pixel boxes.
        twins: ``twins.jsonl`` lines of the chunk's test images (compositional worlds); their images are the
            last entries of ``image_ids`` (after the ``num_images`` scenes').
        num_images: the chunk's scenes.
        gold_trees: their captions' ``gold_trees.jsonl`` lines, in ``captions``' order.
    """

    image_ids: list[str]
    captions: str
    scenes: bytes
    num_captions: int
    counts: np.ndarray
    features: np.ndarray
    boxes: np.ndarray
    twins: str = ""
    num_images: int = 0
    gold_trees: str = ""


def _generate_chunk(args) -> _Chunk:
    cfg, start, stop, splits, images_dir = args
    det = _detector(cfg)
    rngs = [_image_rng(cfg.seed, i) for i in range(start, stop)]
    if cfg.compositional is None:
        scenes = [sample_scene(r, cfg.world, image_id(cfg.seed, i)) for r, i in zip(rngs, range(start, stop))]
        captions = [sample_captions(r, s, cfg.captions_per_image) for r, s in zip(rngs, scenes)]
    else:
        held = choose_held_out(cfg.world, cfg.compositional)
        control = choose_control(cfg.world, cfg.compositional, held) if cfg.compositional.match_in_domain else None
        scenes = [sample_role_scene(r, cfg.world, image_id(cfg.seed, i), role, held, control)[0]
                  for r, i, role in zip(rngs, range(start, stop), splits)]
        captions = [sample_role_captions(r, s, cfg.captions_per_image, role, held, cfg.compositional,
                                         control=control)
                    for r, s, role in zip(rngs, scenes, splits)]
    # One BLAS thread: the same bytes whatever the core count (OpenBLAS's threaded products differ in the
    # last bit), and no oversubscription with a worker per core (2 cores: 975 against 690 us per image).
    with threadpool_limits(limits=1, user_api="blas"):
        regions = det.encode_many(rngs, scenes, np.random.default_rng([cfg.seed, start, 17]))
    cap_lines, scene_lines, tree_lines = [], [], []
    for scene, caps, split in zip(scenes, captions, splits):
        rec = {"image_id": scene.image_id, "split": split, "captions": [c for c, _ in caps],
               "complexity": [lf.atoms() for _, lf in caps],
               "compounds": [semantic_compounds(lf) for _, lf in caps], "atoms": [caption_atoms(lf) for _, lf in caps]}
        cap_lines.append(json.dumps(rec) + "\n")
        scene_lines.append(_scene_line(scene))
        tree_lines += [gold_tree_line(c, cfg.world) for c, _ in caps]
    for index, scene in zip(range(start, stop), scenes):
        if cfg.render < 0 or index < cfg.render:
            from features.world.render import save_png

            save_png(scene, images_dir / f"{scene.image_id}.png", cfg.world.image_size)
    ids = [s.image_id for s in scenes]
    counts, features, boxes = regions.counts, regions.features.astype(np.float16), regions.boxes
    twin_lines = ""
    if cfg.compositional is not None:
        with threadpool_limits(limits=1, user_api="blas"):
            groups = _twin_groups(cfg, det, range(start, stop), scenes, captions, splits, images_dir)
        twin_lines = "".join(json.dumps(g.record) + "\n" for g in groups)
        for g in groups:
            ids += g.image_ids
            counts = np.concatenate([counts, g.counts])
            features = np.concatenate([features, g.features])
            boxes = np.concatenate([boxes, g.boxes])
    return _Chunk(ids, "".join(cap_lines), "".join(scene_lines).encode("utf-8"), sum(len(c) for c in captions),
                  counts, features, boxes, twin_lines, len(scenes), "".join(tree_lines))


@dataclass
class _TwinGroup:
    record: dict            # one twins.jsonl line
    image_ids: list[str]    # its two images' ids in the store
    counts: np.ndarray      # (2,)
    features: np.ndarray    # (sum counts, D) float16
    boxes: np.ndarray       # (sum counts, 4)


def _free_of(held: HeldOut):
    """``allowed`` for :func:`features.world.twins.find_twin`: a twin caption and twin image that hold no
    held-out compound (a binding twin's swapped attribute, or a relation twin's moved objects, can make one)."""
    kind = held.attribute_kind
    return lambda lf, scene: not held.holds_any(caption_compounds(lf, kind)) \
        and not held.holds_any(scene_compounds(scene, kind))


def _twin_groups(cfg: GenerateConfig, det: SyntheticDetector, indices, scenes, captions, splits,
                 images_dir: Path) -> list[_TwinGroup]:
    """At most one group per test image and twin kind: the first of its captions that has a verified twin
    (features/world/twins.py); outside ``test_systematic`` the twin caption and image hold no held-out
    compound. Both images are featurized afresh with the same draws."""
    from features.world.twins import TWIN_KINDS, canonical_text, find_twin

    free = _free_of(choose_held_out(cfg.world, cfg.compositional))
    out = []
    for index, scene, caps, split in zip(indices, scenes, captions, splits):
        if not split.startswith("test"):
            continue
        allowed = None if split == "test_systematic" else free
        for kind_id, kind in enumerate(TWIN_KINDS):
            twin = next((t for t in (find_twin(scene, lf, kind, allowed) for _, lf in caps) if t is not None), None)
            if twin is None:
                continue
            ids = [f"{scene.image_id}~{kind}~0", f"{scene.image_id}~{kind}~1"]
            feats, boxes, counts = [], [], []
            for pair_scene in (scene, twin.scene_1):  # the same draws for both: they differ in two objects only
                r = det.encode_many([random.Random(f"twin:{cfg.seed}:{index}:{kind}")], [pair_scene],
                                    np.random.default_rng([cfg.seed, index, kind_id, 23]))
                feats.append(r.features.astype(np.float16))
                boxes.append(r.boxes)
                counts.append(int(r.counts[0]))
            if cfg.render < 0 or index < cfg.render:
                from features.world.render import save_png

                save_png(twin.scene_1, images_dir / f"{ids[1]}.png", cfg.world.image_size)
            record = {"group": f"{scene.image_id}~{kind}", "kind": kind, "split": split,
                      "source_image": scene.image_id, "image_0": ids[0], "image_1": ids[1],
                      "caption_0": canonical_text(twin.caption_0), "caption_1": canonical_text(twin.caption_1),
                      "scene_1": json.loads(_scene_line(twin.scene_1))}
            out.append(_TwinGroup(record, ids, np.asarray(counts), np.concatenate(feats), np.concatenate(boxes)))
    return out


_OBJECT_FIELDS = tuple(f.name for f in fields(SceneObject))


def _scene_line(scene: Scene) -> str:
    """``json.dumps(scene.to_dict()) + "\\n"``, the same text, without ``dataclasses.asdict``'s deep copies
    of the (scalar) object fields: 2.5x faster, and the scene lines were the workers' largest cost after
    sampling."""
    objects = [{name: getattr(o, name) for name in _OBJECT_FIELDS} for o in scene.objects]
    return json.dumps({"image_id": scene.image_id, "objects": objects, "relations": scene.relations()}) + "\n"


def worker_pool(workers: int) -> mp.pool.Pool:
    """The generator's worker processes (forked where the platform can; stoppable by terminate())."""
    return fork_pool(workers)


_DETECTORS: dict = {}


def _detector(cfg: GenerateConfig) -> SyntheticDetector:
    key = (cfg.seed, cfg.world)
    if key not in _DETECTORS:
        _DETECTORS[key] = SyntheticDetector(cfg.world, seed=cfg.seed)
    return _DETECTORS[key]


def split_names(cfg: GenerateConfig) -> tuple[str, ...]:
    """The split labels of a world generated with ``cfg``."""
    return ROLES if cfg.compositional is not None else ("train", "val", "test")


def _splits(cfg: GenerateConfig) -> list[str]:
    """Each image's split label: a seeded permutation cut at the fractions' cumulative counts."""
    order = list(range(cfg.num_images))
    random.Random(f"splits:{cfg.seed}").shuffle(order)
    names = split_names(cfg)
    fractions = cfg.compositional.split_fractions if cfg.compositional is not None else cfg.split_fractions
    bounds = [round(sum(fractions[:k + 1]) * cfg.num_images) for k in range(len(names))]
    labels = [""] * cfg.num_images
    for rank, i in enumerate(order):
        labels[i] = names[next(k for k, b in enumerate(bounds) if rank < b or k == len(bounds) - 1)]
    return labels


@dataclass
class WorldSummary:
    out: Path
    num_images: int
    num_captions: int
    seconds: float
    images_per_second: float


# what generation writes in its folder (``overwrite`` deletes these and nothing else)
OWNED = ("images", "features.h5", "captions.jsonl", "scenes.jsonl.gz", "world.json", "twins.jsonl", "gold_trees.jsonl",
         "captions.jsonl.tmp", "scenes.jsonl.gz.tmp", "twins.jsonl.tmp", "gold_trees.jsonl.tmp")


def generator_settings(cfg: GenerateConfig) -> dict:
    """What decides the world's files (how many processes made them changes nothing in them)."""
    config = _jsonable(asdict(cfg))
    config.pop("workers")
    return {"version": WORLD_VERSION, "config": config}


def generate_world(out: str | Path, cfg: GenerateConfig, *, progress: bool = True,
                   mode: str = "resume") -> WorldSummary:
    """Generate the world into ``out`` (see the module docstring).

    ``mode`` is the output-folder policy (:func:`crg.outputs.prepare_output_dir`): ``resume`` (default)
    continues a killed generation with the same settings, starts in an empty or missing folder, and
    refuses a folder made with other settings (listing them) or holding other files; ``new`` refuses any
    non-empty folder; ``overwrite`` deletes an earlier world first.
    """
    from crg.outputs import prepare_output_dir, read_manifest
    from features.store import FeatureStoreWriter

    out = Path(out)
    if mode == "resume" and (not out.exists() or not any(out.iterdir()) or read_manifest(out) is None):
        mode = "new"  # nothing of ours to continue: start, or refuse a folder of other files
    prepare_output_dir(out, command="generate_world", settings=generator_settings(cfg), mode=mode, owned=OWNED)
    (out / "images").mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    splits = _splits(cfg)
    chunks = [(cfg, s, min(s + CHUNK, cfg.num_images), splits[s:s + CHUNK], out / "images")
              for s in range(0, cfg.num_images, CHUNK)]
    workers = cfg.workers or os.cpu_count() or 1
    tmp_caps = out / "captions.jsonl.tmp"
    tmp_scenes = out / "scenes.jsonl.gz.tmp"
    tmp_twins = out / "twins.jsonl.tmp"
    tmp_trees = out / "gold_trees.jsonl.tmp"
    n_caps = 0
    with FeatureStoreWriter(out / "features.h5", feature_dim=cfg.world.feature_dim, commit_every=STORE_COMMIT_EVERY,
                            source=f"synthetic world v{WORLD_VERSION}, seed {cfg.seed}") as store, \
            open(tmp_caps, "w", encoding="utf-8") as fcap, open(tmp_twins, "w", encoding="utf-8") as ftwin, \
            open(tmp_trees, "w", encoding="utf-8") as ftree, \
            gzip.GzipFile(tmp_scenes, "wb", compresslevel=SCENES_GZIP_LEVEL, mtime=0) as fscene:
        bar = tqdm(total=cfg.num_images, desc="generating world", unit="img", disable=not progress)
        pool = worker_pool(workers) if workers > 1 and len(chunks) > 1 else None
        try:
            results = pool.imap(_generate_chunk, chunks) if pool else map(_generate_chunk, chunks)
            width, height = cfg.world.image_size
            for chunk in results:
                fcap.write(chunk.captions)
                fscene.write(chunk.scenes)
                ftwin.write(chunk.twins)
                ftree.write(chunk.gold_trees)
                new = np.array([image not in store for image in chunk.image_ids])  # a resumed run keeps the rest
                if new.any():
                    rows = np.repeat(new, chunk.counts)                               # (sum R_i,)
                    store.add_many([i for i, keep in zip(chunk.image_ids, new) if keep], chunk.features[rows],
                                   chunk.counts[new], chunk.boxes[rows], width, height)
                n_caps += chunk.num_captions
                bar.update(chunk.num_images)
        finally:
            if pool:
                pool.close()
                pool.join()
            bar.close()
    tmp_caps.replace(out / "captions.jsonl")
    tmp_trees.replace(out / "gold_trees.jsonl")
    tmp_scenes.replace(out / "scenes.jsonl.gz")
    if cfg.compositional is not None:
        tmp_twins.replace(out / "twins.jsonl")
    else:
        tmp_twins.unlink()
    seconds = time.perf_counter() - started
    meta = {**generator_settings(cfg), "num_images": cfg.num_images,
            "num_captions": n_caps, "splits": {s: splits.count(s) for s in split_names(cfg)}}
    if cfg.compositional is not None:
        held = choose_held_out(cfg.world, cfg.compositional)
        meta["held_out"] = held.to_dict()
        if cfg.compositional.match_in_domain:
            meta["control"] = choose_control(cfg.world, cfg.compositional, held).to_dict()
    write_text_atomic(out / "world.json", json.dumps(meta, indent=2, sort_keys=True) + "\n")
    logger.info("generated %d images (%d captions) in %.1f s: %.0f images/s", cfg.num_images, n_caps, seconds,
                cfg.num_images / seconds)
    return WorldSummary(out, cfg.num_images, n_caps, seconds, cfg.num_images / seconds)


def _jsonable(x):
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    return x


def load_scenes(path: str | Path) -> dict[str, Scene]:
    """Scene graphs by image id, from ``scenes.jsonl.gz``."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return {d["image_id"]: Scene.from_dict(d) for d in map(json.loads, f)}


def build_argparser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m features.world.generate", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--num-images", type=int, default=10_000,
                    help="images (default 10,000: 1,000 in each compositional test split)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--split", choices=("compositional", "random"), default="compositional",
                    help="compositional (default): compounds held out of training, splits train / val / test_iid / "
                         "test_systematic / test_productivity (docs/world.md); random: an i.i.d. 80/10/10 split")
    ap.add_argument("--held-out-seed", type=int, default=0,
                    help="compositional: which compounds are held out (default 0; independent of --seed, so that "
                         "worlds of several seeds hold out the same ones unless asked)")
    ap.add_argument("--held-out-pairs", type=int, default=CompositionalConfig.num_attribute_compounds,
                    help="compositional: held-out colour-shape pairs (default %(default)s; at most one per colour)")
    ap.add_argument("--held-out-facts", type=int, default=CompositionalConfig.num_relation_compounds,
                    help="compositional: held-out relation facts between two shapes, e.g. a cube left of a ball "
                         "(default %(default)s)")
    ap.add_argument("--render", type=int, default=24, help="render PNGs of the first N images (-1: all)")
    ap.add_argument("--workers", type=int, default=0, help="processes (0: all cores)")
    for f in fields(WorldConfig):
        if f.type in ("int", "float"):
            ap.add_argument(f"--{f.name.replace('_', '-')}", type=int if f.type == "int" else float,
                            default=f.default, help=f"world knob (default {f.default}); see docs/world.md")
    ap.add_argument("--overwrite", action="store_true",
                    help="replace a world in --out made with other settings (default: continue a killed "
                         "generation with the same settings, refuse other settings)")
    ap.add_argument("--quiet", action="store_true")
    return ap


def main(argv=None) -> int:
    args = build_argparser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        world = WorldConfig(**{f.name: getattr(args, f.name) for f in fields(WorldConfig)
                               if f.type in ("int", "float")})
    except ValueError as err:
        raise SystemExit(f"error: {err}") from None
    held_out = {"seed": args.held_out_seed, "num_attribute_compounds": args.held_out_pairs,
                "num_relation_compounds": args.held_out_facts}
    compositional = None
    if args.split == "compositional":
        try:
            compositional = CompositionalConfig(**held_out)
            choose_held_out(world, compositional)  # too many for the world's colours or shapes: say so now
        except ValueError as err:
            raise SystemExit(f"error: --held-out-seed/--held-out-pairs/--held-out-facts: {err}") from None
    elif held_out != {"seed": 0, "num_attribute_compounds": CompositionalConfig.num_attribute_compounds,
                      "num_relation_compounds": CompositionalConfig.num_relation_compounds}:
        raise SystemExit("error: --held-out-seed/--held-out-pairs/--held-out-facts apply to --split compositional "
                         "only (a random split holds nothing out)")
    cfg = GenerateConfig(num_images=args.num_images, seed=args.seed, render=args.render, workers=args.workers,
                         world=world, compositional=compositional)
    from crg.outputs import OutputDirError

    try:
        summary = generate_world(args.out, cfg, progress=not args.quiet,
                                 mode="overwrite" if args.overwrite else "resume")
    except OutputDirError as err:
        raise SystemExit(f"error: {err}") from None
    print(json.dumps({"out": str(summary.out), "num_images": summary.num_images, "num_captions": summary.num_captions,
                      "seconds": round(summary.seconds, 2), "images_per_second": round(summary.images_per_second)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The generated world: deterministic, every caption true of its scene, real formats, exact denotations."""

import filecmp
import json
import random

import numpy as np
import pytest

from features.world.generate import GenerateConfig, generate_world, load_scenes
from features.world.grammar import parse_caption, parse_phrase, sample_captions
from features.world.scene import Scene, SceneObject, WorldConfig, relation_holds, sample_scene
from features.world.semantics import Caption, ObjectRef, holds
from features.world.truth import WorldTruth

N_IMAGES = 240


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    out = tmp_path_factory.mktemp("world")
    generate_world(out, GenerateConfig(num_images=N_IMAGES, seed=3, render=4, workers=2), progress=False)
    return out


def test_same_seed_gives_byte_identical_files(world, tmp_path):
    generate_world(tmp_path, GenerateConfig(num_images=N_IMAGES, seed=3, render=4, workers=1), progress=False)
    for name in ("captions.jsonl", "scenes.jsonl.gz", "features.h5", "world.json", "images/w3-000002.png"):
        assert filecmp.cmp(world / name, tmp_path / name, shallow=False), name
    other = tmp_path / "other"
    generate_world(other, GenerateConfig(num_images=N_IMAGES, seed=4, render=0), progress=False)
    assert (other / "captions.jsonl").read_text() != (world / "captions.jsonl").read_text()


def test_bytes_do_not_depend_on_blas_threads_or_workers(world, tmp_path):
    """OpenBLAS's threaded products differ in the last bit from single-threaded ones: the generator fixes one
    thread, or the features would change with the machine's core count. Several chunks go through the pool."""
    from threadpoolctl import threadpool_limits

    for blas_threads, workers in ((1, 1), (2, 2)):
        with threadpool_limits(limits=blas_threads, user_api="blas"):
            generate_world(tmp_path / f"t{blas_threads}", GenerateConfig(num_images=1100, seed=3, render=0,
                                                                          workers=workers), progress=False)
    for name in ("captions.jsonl", "scenes.jsonl.gz", "features.h5"):
        assert filecmp.cmp(tmp_path / "t1" / name, tmp_path / "t2" / name, shallow=False), name


def test_every_caption_is_verified_true_of_its_scene_graph(world):
    scenes = load_scenes(world / "scenes.jsonl.gz")
    rows = [json.loads(line) for line in (world / "captions.jsonl").read_text().splitlines()]
    assert len(rows) == N_IMAGES and all(len(r["captions"]) == 5 for r in rows)
    for r in rows:
        for text in r["captions"]:
            lf = parse_caption(text)
            assert lf is not None, f"not of the world's language: {text!r}"
            assert holds(scenes[r["image_id"]], lf), f"false of {r['image_id']}: {text!r}"
    splits = {r["split"] for r in rows}
    assert splits == {"train", "val", "test"}


def test_captions_vary_in_form_and_complexity(world):
    rows = [json.loads(line) for line in (world / "captions.jsonl").read_text().splitlines()]
    texts = [t for r in rows for t in r["captions"]]
    complexity = [c for r in rows for c in r["complexity"]]
    assert min(complexity) <= 2 and max(complexity) >= 10
    assert any(t.lower().startswith("there is") for t in texts)
    assert any(" that is " in t or " which is " in t for t in texts)
    assert any(" and " in t for t in texts)
    assert any(t[0].islower() for t in texts) and any(t.endswith(".") for t in texts)
    assert len(set(texts)) > 0.8 * len(texts)


def test_store_passes_features_check_and_boxes_match_objects(world):
    from features.check import validate_store
    from features.store import FeatureStore

    from crg.corpus import read_corpus

    problems = validate_store(world / "features.h5", read_corpus(world / "captions.jsonl"))
    assert problems == []
    store = FeatureStore(world / "features.h5")
    scenes = load_scenes(world / "scenes.jsonl.gz")
    first = sorted(scenes)[0]
    feats, boxes = store.read_raw(first)
    assert feats.shape[1] == WorldConfig().feature_dim
    assert len(feats) >= len(scenes[first].objects) + WorldConfig().background_regions[0]
    assert np.isfinite(feats.astype(np.float32)).all() and (boxes[:, 2] > boxes[:, 0]).all()


def test_world_builds_a_crg_and_crg_denotations_are_within_exact_ones(world, spacy_parser):
    from crg.build import build_crg
    from crg.corpus import read_corpus

    corpus = read_corpus(world / "captions.jsonl").select("train")
    graph, report = build_crg(corpus, spacy_parser, progress=False)
    assert report.num_used == 5 * len(corpus) and not report.skipped
    truth = WorldTruth.load(world)
    exact = 0
    for cid, text in enumerate(graph.concept_texts):
        d = truth.denotation(text)
        if d is not None:
            exact += 1
            assert set(graph.denotation(cid)) <= d, text  # every caption's concepts are true of its image
    assert exact > 0.5 * graph.num_concepts


def test_relations_come_from_geometry_and_ambiguous_gaps_satisfy_neither():
    s = Scene("s", [SceneObject("ball", "red", "small", "metal", 0.20, 0.5),
                    SceneObject("cube", "blue", "large", "wooden", 0.50, 0.5),
                    SceneObject("cone", "green", "small", "glass", 0.53, 0.9)])
    assert relation_holds(s, 0, "left_of", 1) and relation_holds(s, 1, "right_of", 0)
    assert not relation_holds(s, 1, "left_of", 2) and not relation_holds(s, 2, "right_of", 1)  # gap < margin
    assert relation_holds(s, 2, "behind", 1) and relation_holds(s, 1, "in_front_of", 2)
    assert not relation_holds(s, 0, "next_to", 2)


def test_counts_are_exact_and_coordination_needs_distinct_objects():
    balls = [SceneObject("ball", "red", "small", "rubber", x, 0.5) for x in (0.1, 0.5)]
    s = Scene("s", balls + [SceneObject("cube", "red", "small", "rubber", 0.9, 0.5)])
    two = ObjectRef("ball", (("color", "red"),), None, 2)
    assert holds(s, Caption("np", (two,)))
    assert not holds(s, Caption("np", (ObjectRef("ball", (), None, 3),)))
    red_ball = ObjectRef("ball", (("color", "red"),))
    assert holds(s, Caption("and", (red_ball, red_ball)))
    assert not holds(s, Caption("and", (red_ball, red_ball, red_ball)))


def test_generated_language_parses_back_to_the_same_truth_conditions():
    cfg = WorldConfig()
    for i in range(150):
        rng = random.Random(i)
        scene = sample_scene(rng, cfg, f"s{i}")
        for text, lf in sample_captions(rng, scene):
            back = parse_caption(text)
            assert back is not None and holds(scene, back) == holds(scene, lf) is True
    assert parse_phrase("red balls") == Caption("np", (ObjectRef("ball", (("color", "red"),)),))
    assert parse_phrase("that is behind a cube") is None


def test_bad_world_config_is_rejected():
    with pytest.raises(ValueError, match="min_objects"):
        WorldConfig(min_objects=5, max_objects=3)
    with pytest.raises(ValueError, match="split_fractions"):
        GenerateConfig(split_fractions=(0.5, 0.5, 0.5))


def test_fast_scene_lines_equal_the_scene_dicts_json():
    from features.world.generate import _scene_line

    cfg = WorldConfig()
    for i in range(50):
        scene = sample_scene(random.Random(i), cfg, f"w-{i}")
        assert _scene_line(scene) == json.dumps(scene.to_dict()) + "\n"

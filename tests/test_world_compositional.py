"""The compositional world: held-out compounds never reach training, checked from scene graphs and logical
forms (never by string match); systematic captions hold one, productivity captions are longer than any
training caption; regeneration is byte-identical."""

from __future__ import annotations

import filecmp
import json
import random
from collections import Counter

import pytest

from features.world.compositional import (CompositionalConfig, HeldOut, caption_compounds, choose_held_out,
                                          force_compound, repair_scene, scene_compounds)
from features.world.generate import GenerateConfig, generate_world, load_scenes
from features.world.grammar import parse_caption
from features.world.scene import WorldConfig, sample_scene
from features.world.semantics import Caption, ObjectRef, holds

N_IMAGES = 600
COMP = CompositionalConfig()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    out = tmp_path_factory.mktemp("cworld")
    generate_world(out, GenerateConfig(num_images=N_IMAGES, seed=7, render=0, workers=1, compositional=COMP),
                   progress=False)
    return out


def _held(world) -> HeldOut:
    h = json.loads((world / "world.json").read_text())["held_out"]
    return HeldOut(h["attribute_kind"], frozenset(map(tuple, h["attributes"])), frozenset(map(tuple, h["relations"])))


def _rows(world):
    return [json.loads(line) for line in (world / "captions.jsonl").read_text().splitlines()]


def test_held_out_compounds_never_reach_a_training_image_or_caption(world):
    held, scenes = _held(world), load_scenes(world / "scenes.jsonl.gz")
    assert held == choose_held_out(WorldConfig(), COMP)
    per_role = Counter()
    for r in _rows(world):
        role, scene = r["split"], scenes[r["image_id"]]
        per_role[role] += 1
        in_scene = held.holds_any(scene_compounds(scene, held.attribute_kind))
        lfs = [parse_caption(text) for text in r["captions"]]
        assert all(lf is not None and holds(scene, lf) for lf in lfs), r
        in_captions = [held.holds_any(caption_compounds(lf, held.attribute_kind)) for lf in lfs]
        atoms = [lf.atoms() for lf in lfs]
        assert len(lfs) == 5
        if role == "test_systematic":
            assert in_scene and all(in_captions), r
            assert max(atoms) <= COMP.max_train_atoms, r
        else:
            assert not in_scene and not any(in_captions), r
            if role == "test_productivity":
                assert min(atoms) > COMP.max_train_atoms, r
            else:
                assert max(atoms) <= COMP.max_train_atoms, r
    assert set(per_role) == {"train", "val", "test_iid", "test_systematic", "test_productivity"}
    assert per_role["train"] == round(0.6 * N_IMAGES)


def test_every_atom_and_caption_form_still_occurs_in_training(world):
    rows = [r for r in _rows(world) if r["split"] == "train"]
    scenes = load_scenes(world / "scenes.jsonl.gz")
    colours, shapes, kinds = Counter(), Counter(), Counter()
    for r in rows:
        for o in scenes[r["image_id"]].objects:
            colours[o.color] += 1
            shapes[o.shape] += 1
        kinds.update(parse_caption(t).kind for t in r["captions"])
    world_cfg = WorldConfig()
    assert set(colours) == set(world_cfg.colors) and min(colours.values()) > 0.3 * max(colours.values())
    assert set(shapes) == set(world_cfg.shapes)
    assert {"np", "there", "clause", "and", "two_clauses"} <= set(kinds)


def test_regeneration_is_byte_identical(world, tmp_path):
    generate_world(tmp_path, GenerateConfig(num_images=N_IMAGES, seed=7, render=0, workers=2, compositional=COMP),
                   progress=False)
    for name in ("captions.jsonl", "scenes.jsonl.gz", "features.h5", "world.json"):
        assert filecmp.cmp(world / name, tmp_path / name, shallow=False), name


def test_compounds_are_read_from_meanings():
    red_cube, ball = ObjectRef("cube", (("color", "red"),)), ObjectRef("ball")
    # the same fact said both ways is one compound; "a red object" names no compound
    assert caption_compounds(Caption("clause", (red_cube, ball), "left_of")) == \
        caption_compounds(Caption("np", (ObjectRef("ball", (), ("right_of", red_cube)),))) == \
        {("red", "cube"), ("cube", "left_of", "ball")}
    assert caption_compounds(Caption("np", (ObjectRef(None, (("color", "red"),)),))) == set()


def test_repair_and_force_change_scenes_as_they_say():
    world = WorldConfig()
    held = choose_held_out(world, COMP)
    rng = random.Random(0)
    for k in range(200):
        scene = sample_scene(rng, world, f"s{k}")
        if repair_scene(rng, scene, world, held):
            assert not held.holds_any(scene_compounds(scene))
        compound = force_compound(rng, scene, world, held)
        assert compound in scene_compounds(scene) and held.holds_any([compound])


def test_twin_groups_are_minimal_pairs_verified_from_the_scene_graphs(world):
    from features.store import FeatureStore
    from features.world.scene import Scene

    scenes = load_scenes(world / "scenes.jsonl.gz")
    groups = [json.loads(line) for line in (world / "twins.jsonl").read_text().splitlines()]
    kinds = Counter((g["split"], g["kind"]) for g in groups)
    assert kinds[("test_systematic", "relation")] > 10 and kinds[("test_iid", "binding")] > 5, kinds
    with FeatureStore(world / "features.h5") as store:
        for g in groups:
            c0, c1 = parse_caption(g["caption_0"]), parse_caption(g["caption_1"])
            assert sorted(g["caption_0"].split()) == sorted(g["caption_1"].split()) and c0 != c1
            s0, s1 = scenes[g["source_image"]], Scene.from_dict(g["scene_1"])
            assert holds(s0, c0) and not holds(s0, c1), g           # the twin caption is false of the original
            assert holds(s1, c1) and not holds(s1, c0), g           # and true of the twin image
            changed = [k for k, (a, b) in enumerate(zip(s0.objects, s1.objects)) if a != b]
            assert len(changed) == 2 and len(s0.objects) == len(s1.objects)
            batch = store.read_batch([g["image_0"], g["image_1"]], 64, add_global=False)
            features = abs(batch.features[0].astype("float32") - batch.features[1].astype("float32")).sum(1) > 0
            boxes = abs(batch.geometry[0] - batch.geometry[1]).sum(1) > 0
            # the same draws: only the exchanged objects' regions (and parts of them) differ: their boxes
            # for a relation twin, their codes (and boxes, for a size) for a binding twin
            # (a detector confusion can make one of the two objects' codes coincide)
            assert 1 <= (features | boxes).sum() <= 8, g["group"]
            assert not features.any() if g["kind"] == "relation" else features.any(), g["group"]


def test_oracle_ceilings_on_twin_groups(world):
    """Twin groups measure structure: the exact oracle wins every group, a bag-of-words oracle ties on every
    text comparison (the captions share their words), a bag of bound objects ties on relation twins."""
    import numpy as np

    from composer.evaluation.twins import twin_scores
    from features.world.oracles import oracle_matrix
    from features.world.scene import Scene

    scenes = load_scenes(world / "scenes.jsonl.gz")
    groups = [json.loads(line) for line in (world / "twins.jsonl").read_text().splitlines()]
    kinds = [g["kind"] for g in groups]
    results = {}
    for oracle in ("exact", "bound_objects", "bag_of_words"):
        scores = [oracle_matrix(oracle, [parse_caption(g["caption_0"]), parse_caption(g["caption_1"])],
                                [scenes[g["source_image"]], Scene.from_dict(g["scene_1"])], tie_break=None)
                  for g in groups]
        results[oracle] = twin_scores(np.stack(scores), kinds)
    assert results["exact"]["group"] == 100.0
    assert results["bag_of_words"]["text"] <= 50.0
    assert results["bound_objects"]["relation"]["text"] <= 50.0
    assert results["bound_objects"]["binding"]["text"] > 50.0


def test_the_store_check_expects_twin_images_but_still_reports_other_extra_images(world, tmp_path):
    from crg.corpus import read_corpus
    from features.check import validate_store

    def extra(captions):
        return [p for p in validate_store(world / "features.h5", read_corpus(captions)) if p.code == "extra_image"]

    from features.store import FeatureStore

    assert any("~" in i for i in FeatureStore(world / "features.h5").image_ids)  # the store holds twin images
    assert extra(world / "captions.jsonl") == []  # the twins (<id>~relation~1, ...) are the store's own
    fewer = tmp_path / "captions.jsonl"  # a corpus without its first image: that image is extra, the twins are not
    fewer.write_text("".join((world / "captions.jsonl").read_text().splitlines(keepends=True)[1:]))
    problems = extra(fewer)
    assert len(problems) == 1 and problems[0].message.startswith("1 image(s)")

"""``--data world`` is the compositional world: trained on ``train``, tested in-domain (``test_iid``) and on the
held-out combinations (``systematic``) and longer captions (``productivity``), each report with the any-true
protocol and the oracles' ceilings beside the model's numbers."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from composer.evaluation.sentence_retrieval import SentenceRetrievalSet, format_retrieval_table
from composer.models.common.retrieval import recall_at_k_multi


@pytest.fixture()
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("GC_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def test_the_world_is_compositional_by_default_and_random_one_flag_away(data_dir):
    from features.catalog import resolve_dataset
    from features.world.generate import WORLD_VERSION

    spec = resolve_dataset("world", world_images=60, progress=False)
    assert spec.world_dir.name == f"world-v{WORLD_VERSION}-compositional-s0-n60"
    assert spec.train_splits == ("train",) and spec.val_splits == ("val",) and spec.test_splits == ("test_iid",)
    assert spec.eval_splits == {"systematic": ("test_systematic",), "productivity": ("test_productivity",)}
    random = resolve_dataset("world", world_images=60, world_split="random", progress=False)
    assert random.world_dir != spec.world_dir and random.test_splits == ("test",) and random.eval_splits == {}
    with pytest.raises(ValueError, match="world_split"):
        resolve_dataset("world", world_images=60, world_split="iid", progress=False)


def test_training_reports_every_test_set_with_any_true_recall_and_ceilings(data_dir, tmp_path):
    from composer.training.fit import TrainerOptions, train
    from composer.training.recipes import RecipeOverrides, named_recipe

    recipe = named_recipe("composer", "world", RecipeOverrides(world_images=80, preset="tiny", batch_size=4,
                                                               max_regions=6, eval_images=8))
    results = train(recipe, TrainerOptions(max_steps=2, progress=False), tmp_path / "run")
    for name in ("test", "systematic", "productivity"):
        report = results[name]
        assert report["num_images"] == 8
        single, any_true = report["sentence"], report["sentence_any_true"]
        assert all(any_true[k] >= single[k] for k in single)  # the caption's own image is one of its true images
        ceilings = report["ceilings"]
        assert set(ceilings) == {"exact", "bound_objects", "bag_of_words"}
        assert ceilings["exact"]["sentence_any_true"]["R@1"] == 100.0  # exact truth ranks a true image first
        assert ceilings["bag_of_words"]["sentence"]["R@1"] <= ceilings["exact"]["sentence"]["R@1"] + 1e-9
    for name in ("test", "systematic", "productivity"):  # R@1 within caption-length buckets covers every caption
        by_length = results[name]["sentence_by_length"]
        assert sum(b["num_captions"] for b in by_length.values()) == results[name]["num_captions"]
    # in-domain R@1 on the captions not written word for word in training, counted here from the files
    import json

    rows = [json.loads(line) for line in (results_world(data_dir) / "captions.jsonl").read_text().splitlines()]
    norm = lambda t: " ".join(t.lower().replace(".", " ").replace(",", " ").split())  # noqa: E731
    train_texts = {norm(c) for r in rows if r["split"] == "train" for c in r["captions"]}
    test_texts = [c for r in [r for r in rows if r["split"] == "test_iid"][:8] for c in r["captions"]]
    unseen = results["test"]["unseen_in_training"]
    assert unseen["num_captions"] == sum(norm(c) not in train_texts for c in test_texts)
    assert unseen["num_captions"] < len(test_texts) or unseen["R@1"] == results["test"]["sentence"]["R@1"]
    for name in ("test", "systematic"):  # the world's minimal pairs, scored by the trained model
        twins = results[name]["twins"]
        assert twins["groups"] > 0 and all(0.0 <= twins[k] <= 100.0 for k in ("text", "image", "group"))
        assert twins["group"] <= min(twins["text"], twins["image"])
    table = format_retrieval_table({k: results[k] for k in ("test", "systematic", "productivity")})
    assert "twins, systematic: text" in table
    assert "generalisation gap" in table and "systematic" in table and "bound_objects" in table
    assert "relative to each set's exact-truth ceiling" in table
    assert "R@1 by caption length" in table and "not seen verbatim in training" in table


def results_world(data_dir):
    (world,) = [d for d in data_dir.iterdir() if d.name.endswith("-n80")]
    return world


def _set(positives, caption_image=(0, 1)):
    programs = [SimpleNamespace(texts=[text], root=0) for text in ("a red cube", "a blue ball")]
    return SentenceRetrievalSet("t", ["a", "b", "c"], programs, np.array(caption_image), lambda: None,
                                positives=np.array(positives))


def test_any_true_recall_counts_every_true_image():
    scores = np.array([[0.1, 0.9, 0.5], [0.2, 0.8, 0.3]])      # caption 0's top image is b, which is also true
    eval_set = _set([[True, True, False], [False, True, False]])
    report = eval_set.report(scores, seconds=1.0, ks=(1,))
    assert report["sentence"]["R@1"] == 50.0                     # single-positive: only caption 1 hits
    assert report["sentence_any_true"]["R@1"] == 100.0
    assert report["sentence_any_true"] == recall_at_k_multi(scores, eval_set.positives, (1,))


def test_truth_that_denies_a_caption_its_own_image_is_refused():
    with pytest.raises(ValueError, match="'a red cube'.* false of its own image a"):
        _set([[False, True, False], [False, True, False]])
    with pytest.raises(ValueError, match="shape"):
        _set([[True, True], [False, True]])


def test_evaluation_sets_know_the_training_captions_for_r1_on_unseen_captions(data_dir):
    import json

    from composer.evaluation.eval_sets import load_eval_data

    data = load_eval_data("world", split="test", eval_images=5, max_regions=6, world_images=60)
    (world,) = [d for d in data_dir.iterdir() if d.name.endswith("-n60")]
    rows = [json.loads(line) for line in (world / "captions.jsonl").read_text().splitlines()]
    assert data.training_texts == [c for r in rows if r["split"] == "train" for c in r["captions"]]
    assert load_eval_data("world", split="train", eval_images=5, max_regions=6, world_images=60).training_texts is None

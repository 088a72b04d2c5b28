"""The twin interaction diagnostic (issue 36): how much of a caption preference depends on the image, on
constructed score matrices whose answer is known."""

import json

import numpy as np
import pytest

from composer.evaluation.sentence_retrieval import format_retrieval_table
from composer.evaluation.twin_interaction import OUTCOMES, interaction_summary, twin_interaction
from composer.evaluation.twins import twin_scores


def _naive(scores):
    """The definitions written out group by group."""
    num = den = 0.0
    counts = dict.fromkeys(OUTCOMES, 0)
    for s in scores:
        d0, d1 = s[0][0] - s[1][0], s[0][1] - s[1][1]
        num += abs(d0 - d1)
        den += abs(d0) + abs(d1)
        if d0 == 0 or d1 == 0:
            counts["tie"] += 1
        elif (d0 > 0) == (d1 > 0):
            counts["same_caption"] += 1
        elif d0 > 0:
            counts["right_way"] += 1
        else:
            counts["wrong_way"] += 1
    return (num / den if den else None), {k: 100.0 * v / len(scores) for k, v in counts.items()}


def test_an_additive_scorer_has_no_image_dependence_and_the_same_caption_always_wins():
    rng = np.random.default_rng(3)
    f = rng.normal(size=(37, 2))                      # f(caption), per group
    g = rng.normal(size=(37, 2)) * 5                  # g(image): large image effects change nothing
    scores = f[:, :, None] + g[:, None, :]            # (G, caption, image)
    out = interaction_summary(scores)
    assert out["image_dependence"] == pytest.approx(0.0, abs=1e-12)
    assert out["same_caption"] == 100.0 and out["tie"] == out["right_way"] == out["wrong_way"] == 0.0
    assert twin_scores(scores)["text"] == 0.0         # and so Winoground's text score is 0 by construction


def test_a_scorer_reading_the_difference_has_full_dependence_right_or_wrong_way():
    right = np.array([[[2.0, 1.0], [1.0, 2.0]]] * 3)  # each image prefers its own caption
    wrong = right[:, ::-1, :]                         # the captions exchanged: each prefers the other
    r, w = interaction_summary(right), interaction_summary(wrong)
    assert r["image_dependence"] == w["image_dependence"] == 1.0
    assert (r["right_way"], r["wrong_way"], w["right_way"], w["wrong_way"]) == (100.0, 0.0, 0.0, 100.0)
    assert twin_scores(wrong)["group"] == 0.0         # a 0 group score, but not a blind model


def test_random_scores_agree_with_the_naive_definitions_and_outcomes_partition_the_groups():
    rng = np.random.default_rng(11)
    scores = rng.integers(-2, 3, size=(200, 2, 2)).astype(float)  # small integers: exact ties happen
    dependence, shares = _naive(scores)
    out = interaction_summary(scores)
    assert out["image_dependence"] == pytest.approx(dependence, abs=1e-4)
    for k in OUTCOMES:
        assert out[k] == pytest.approx(shares[k], abs=0.01)
    assert out["tie"] > 0 and sum(out[k] for k in OUTCOMES) == pytest.approx(100.0)
    assert 0.0 <= out["image_dependence"] <= 1.0
    # the right-way share is Winoground's text score
    assert out["right_way"] == pytest.approx(twin_scores(scores)["text"], abs=0.01)


def test_per_kind_split_and_bad_input():
    additive = np.array([[[1.0, 3.0], [0.0, 2.0]]])
    reading = np.array([[[2.0, 1.0], [1.0, 2.0]]])
    out = twin_interaction(np.concatenate([additive, reading]), ["binding", "relation"])
    assert out["binding"]["image_dependence"] == 0.0 and out["relation"]["image_dependence"] == 1.0
    assert out["image_dependence"] == pytest.approx(2 / 4)   # (0 + 2) / ((1 + 1) + (1 + 1))
    assert interaction_summary(np.zeros((2, 2, 2)))["image_dependence"] is None  # no preference anywhere
    with pytest.raises(ValueError, match="2 captions, 2 images"):
        interaction_summary(np.zeros((3, 2)))
    with pytest.raises(ValueError, match="one label per group"):
        twin_interaction(np.zeros((2, 2, 2)), ["a"])


def test_the_retrieval_summary_prints_it_beside_the_twin_scores():
    scores = np.array([[[1.0, 3.0], [0.0, 2.0]], [[2.0, 1.0], [1.0, 2.0]]])
    twins = {**twin_scores(scores, ["relation", "binding"]),
             "interaction": twin_interaction(scores, ["relation", "binding"])}
    report = {"sentence": {"R@1": 1.0, "R@5": 2.0, "R@10": 3.0}, "twins": twins}
    text = format_retrieval_table({"test": report})
    assert "image dependence of the caption preference 0.50 (relation 0.00, binding 1.00)" in text
    assert "same caption on both images 50.0%" in text


def test_training_and_gc_evaluate_report_it_for_the_world_twin_groups(tmp_path, monkeypatch):
    """A tiny VSE trained on the compositional world: results.json's twin groups carry the diagnostic, and
    ``gc-evaluate`` on the same test split reports the same twin scores and diagnostic."""
    from composer.cli import evaluate, train_baseline

    monkeypatch.setenv("GC_DATA_DIR", str(tmp_path / "data"))
    world = ["--data", "world", "--world-images", "80"]
    run = tmp_path / "vse"
    assert train_baseline.main(["--model", "vse", *world, "--preset", "tiny", "--batch-size", "8", "--max-regions",
                                "6", "--eval-images", "6", "--epochs", "1", "--max-steps", "2", "--lr", "1e-3",
                                "--accelerator", "cpu", "--quiet", "--out", str(run)]) == 0
    trained = json.loads((run / "results.json").read_text())["test"]["twins"]
    assert trained["groups"] > 0 and trained["interaction"]["groups"] == trained["groups"]
    out = tmp_path / "eval.json"
    assert evaluate.main(["--model", str(run / "model"), *world, "--split", "test", "--eval-images", "6",
                          "--max-regions", "6", "--no-phrases", "--quiet", "--out", str(out)]) == 0
    evaluated = json.loads(out.read_text())["twins"]
    assert evaluated["interaction"] == trained["interaction"]
    assert {k: evaluated[k] for k in ("text", "image", "group", "groups")} == \
        {k: trained[k] for k in ("text", "image", "group", "groups")}

"""R@1 on caption subsets (by length; unseen in training) against naive per-caption loops."""

from __future__ import annotations

import numpy as np
import pytest

from composer.evaluation.caption_subsets import (caption_length, length_bucket_labels, own_image_ranks,
                                                 recall_by_length, recall_on_subset, unseen_in_training)
from composer.models.common.retrieval import recall_at_k


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_ranks_and_bucket_recalls_match_naive_loops(seed):
    rng = np.random.default_rng(seed)
    c, i = 200, 30
    scores = rng.integers(0, 6, size=(c, i)).astype(float)  # many ties: they count against the caption
    scores[rng.random((c, i)) < 0.02] = np.nan
    target = rng.integers(0, i, size=c)
    lengths = rng.integers(1, 25, size=c)
    ranks = own_image_ranks(scores, target)
    for q in range(c):  # naive: how many other images score at least as high (a NaN own score: all of them)
        own = scores[q, target[q]]
        naive = sum(1 for j in range(i) if j != target[q] and (np.isnan(own) or scores[q, j] >= own))
        assert ranks[q] == naive
    edges = (7, 10, 13, 16)
    by = recall_by_length(ranks, lengths, edges)
    assert list(by) == length_bucket_labels(edges) == ["1-6", "7-9", "10-12", "13-15", "16+"]
    bounds = [(1, 6), (7, 9), (10, 12), (13, 15), (16, 10 ** 9)]
    for (lo, hi), label in zip(bounds, by):
        members = [q for q in range(c) if lo <= lengths[q] <= hi]
        hits = [ranks[q] == 0 for q in members]
        assert by[label]["num_captions"] == len(members)
        assert by[label]["R@1"] == (round(100.0 * sum(hits) / len(hits), 3) if hits else None)
    assert sum(b["num_captions"] for b in by.values()) == c


def test_recall_without_nans_equals_the_library_recall():
    rng = np.random.default_rng(5)
    scores, target = rng.normal(size=(50, 10)), rng.integers(0, 10, size=50)
    ranks = own_image_ranks(scores, target)
    assert recall_on_subset(ranks, np.ones(50, bool))["R@1"] == pytest.approx(recall_at_k(scores, target, (1,))["R@1"])
    assert recall_on_subset(ranks, np.ones(50, bool), k=5)["R@5"] == pytest.approx(
        recall_at_k(scores, target, (5,))["R@5"])
    assert recall_on_subset(ranks, np.zeros(50, bool)) == {"R@1": None, "num_captions": 0}


def test_unseen_in_training_ignores_case_and_punctuation_only():
    train = ["A red ball.", "there is a big cube", "a ring, a cone and a ball"]
    texts = ["a red ball", "There is a big cube.", "a ring , a cone and a ball", "a red balls", "a big cube"]
    assert unseen_in_training(texts, train).tolist() == [False, False, False, True, True]
    assert caption_length("A medium-sized ring is to the left of a cone.") == 10
    with pytest.raises(ValueError, match="ascending"):
        recall_by_length([0], [3], edges=(10, 7))

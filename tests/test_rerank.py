"""Shortlist-and-rerank: fake first stages and cross models with known scores, a naive reference ranking,
and the real COMPOSER scoring only the shortlisted pairs exactly as full cross-scoring would."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from composer.models.composer.config import composer_config
from composer.models.composer.model import Composer
from composer.models.composer.predicate_transformer import TemplateTokenizer
from composer.models.composer.program import ConceptProgram
from composer.evaluation.rerank import (combine_rankings, cross_score_shortlist, dual_encoder_scores, shortlist_and_rerank,
                             shortlist_recall, shortlist_top_k)
from composer.models.common.retrieval import recall_at_k, score_matrix

Q, N_IMG = 7, 9  # captions, images


@pytest.fixture(scope="module")
def tokenizer():
    return TemplateTokenizer.from_config(composer_config("tiny"))


def captions(n: int) -> list[ConceptProgram]:
    """n distinct one-step captions ("a ball0", "a ball1", ...)."""
    return [ConceptProgram.from_derivations([(f"a ball{k}", "a [NN]", [f"ball{k}"])]) for k in range(n)]


def numbered_images(n: int, r: int = 4, d: int = 11):
    regions = torch.randn(n, r, d)
    regions[:, 0, 0] = torch.arange(n, dtype=torch.float)  # the image's number, read by the fakes
    return regions, torch.rand(n, r, 5), torch.ones(n, r, dtype=torch.bool)


class TableCross:
    """A cross model whose score of (caption k, image i) is ``table[k, i]``; counts the pairs it scores."""

    training = False

    def __init__(self, table: np.ndarray):
        self.table, self.pairs, self.calls = table, 0, 0

    def score_pairs(self, regions, geometry, region_mask, programs, pair_image, pair_caption):
        image = regions[pair_image, 0, 0].long().numpy()
        cap = np.array([int(programs.programs[c].texts[-1].removeprefix("a ball")) for c in pair_caption.tolist()])
        self.pairs += len(image)
        self.calls += 1
        return torch.from_numpy(self.table[cap, image])


class OneHotDual:
    """A dual encoder: image i -> e_i, caption "a ballk" -> row k of ``table``; so scores = table."""

    def __init__(self, table: np.ndarray):
        self.table = torch.from_numpy(table)

    def encode_images(self, regions, geometry, region_mask):
        return torch.eye(self.table.shape[1])[regions[:, 0, 0].long()]

    def encode_texts(self, texts):
        return self.table[[int(t.removeprefix("a ball")) for t in texts]]


class SentenceDual(OneHotDual):
    """The same, with composer.models.vse.model.VSE's method names: encode_sentences takes strings, encode_texts token ids."""

    def encode_sentences(self, texts):
        return super().encode_texts(texts)

    def encode_texts(self, token_ids, token_mask):
        raise AssertionError("token ids are not what a first stage is given")


def naive_rank(first: np.ndarray, shortlist: np.ndarray, cross: np.ndarray, target: int) -> int:
    """0-based position of ``target`` in the final order, built by sorting explicitly."""
    listed = [int(i) for i in shortlist]
    by_cross = sorted(range(len(listed)), key=lambda j: -cross[j])
    rest = sorted((i for i in range(len(first)) if i not in listed), key=lambda i: -first[i])
    order = [listed[j] for j in by_cross] + rest
    return order.index(target)


def test_shortlist_keeps_the_best_first_and_checks_k():
    rng = np.random.default_rng(0)
    s = rng.normal(size=(Q, N_IMG))
    sl = shortlist_top_k(s, 4)
    assert sl.shape == (Q, 4)
    for q in range(Q):
        assert list(sl[q]) == list(np.argsort(-s[q])[:4])
    for bad in (0, N_IMG + 1):
        with pytest.raises(ValueError, match="shortlist size"):
            shortlist_top_k(s, bad)
    target = sl[:, 3].copy()                                  # in the shortlist ...
    for q in range(3):                                        # ... except for the first three captions
        target[q] = next(i for i in range(N_IMG) if i not in sl[q])
    assert shortlist_recall(sl, target) == pytest.approx(100 * (Q - 3) / Q)


def test_combined_ranking_matches_an_explicit_sort():
    rng = np.random.default_rng(1)
    first, k = rng.normal(size=(Q, N_IMG)), 4
    sl = shortlist_top_k(first, k)
    cross = rng.normal(size=(Q, k))
    target = rng.integers(0, N_IMG, size=Q)
    final = combine_rankings(first, sl, cross)
    ranks = np.array([naive_rank(first[q], sl[q], cross[q], target[q]) for q in range(Q)])
    for kk in (1, 3, 4, 6, N_IMG):
        assert recall_at_k(final, target, ks=(kk,))[f"R@{kk}"] == pytest.approx(100 * np.mean(ranks < kk))


def test_ties_still_count_against_the_query():
    first = np.array([[0.9, 0.5, 0.5, 0.1]])
    final = combine_rankings(first, np.array([[0, 1]]), np.array([[1.0, 1.0]]))
    assert recall_at_k(final, np.array([1]), ks=(1, 2)) == {"R@1": 0.0, "R@2": 100.0}  # tied with image 0
    final = combine_rankings(first, np.array([[0, 3]]), np.array([[2.0, 1.0]]))
    assert recall_at_k(final, np.array([2]), ks=(3, 4)) == {"R@3": 0.0, "R@4": 100.0}  # tied with image 1


def test_rerank_recovers_the_cross_models_order_inside_the_shortlist(tokenizer):
    rng = np.random.default_rng(2)
    cross_table = rng.normal(size=(Q, N_IMG))
    target = cross_table.argmax(1)                          # the cross model is always right
    first = rng.normal(size=(Q, N_IMG))
    first[np.arange(Q), target] += 10.0                     # the first stage keeps the right image ...
    first[0, target[0]] -= 20.0                             # ... except for caption 0
    regions, geometry, mask = numbered_images(N_IMG)
    model = TableCross(cross_table)
    res = shortlist_and_rerank(model, regions, geometry, mask, captions(Q), tokenizer, target, first_stage=first,
                               k=3, max_pairs=5)
    assert res.shortlist_recall == pytest.approx(100 * (Q - 1) / Q)
    assert res.reranked["R@1"] == pytest.approx(100 * (Q - 1) / Q)  # every caption whose image survived
    assert res.first_stage == recall_at_k(first, target)
    assert res.pairs_scored == model.pairs == Q * 3 and res.pairs_full == Q * N_IMG
    assert model.calls == Q  # max_pairs=5 < 2 captions x 3 images: one caption per call
    d = res.to_dict()
    assert d["pairs_fraction"] == pytest.approx(3 / N_IMG)


def test_full_shortlist_equals_full_cross_scoring(tokenizer):
    rng = np.random.default_rng(3)
    cross_table = rng.normal(size=(Q, N_IMG))
    target = rng.integers(0, N_IMG, size=Q)
    regions, geometry, mask = numbered_images(N_IMG)
    res = shortlist_and_rerank(TableCross(cross_table), regions, geometry, mask, captions(Q), tokenizer, target,
                               first_stage=rng.normal(size=(Q, N_IMG)), k=N_IMG)
    assert res.reranked == recall_at_k(cross_table, target) and res.shortlist_recall == 100.0


def test_a_dual_encoder_first_stage(tokenizer):
    rng = np.random.default_rng(4)
    table = rng.normal(size=(Q, N_IMG)).astype(np.float32)
    regions, geometry, mask = numbered_images(N_IMG)
    progs = captions(Q)
    scores = dual_encoder_scores(OneHotDual(table), regions, geometry, mask, [p.texts[p.root] for p in progs],
                                 batch_size=4)
    np.testing.assert_allclose(scores, table, rtol=1e-6)
    sentences = dual_encoder_scores(SentenceDual(table), regions, geometry, mask, [p.texts[p.root] for p in progs])
    np.testing.assert_allclose(sentences, table, rtol=1e-6)
    target = table.argmax(1)
    res = shortlist_and_rerank(TableCross(-table.astype(np.float64)), regions, geometry, mask, progs, tokenizer,
                               target, first_stage=OneHotDual(table), k=2)
    assert res.first_stage["R@1"] == 100.0 and res.reranked["R@1"] == 0.0  # a cross model that inverts the order
    with pytest.raises(TypeError, match="dual encoder"):
        shortlist_and_rerank(TableCross(table), regions, geometry, mask, progs, tokenizer, target,
                             first_stage=object(), k=2)
    with pytest.raises(ValueError, match="captions, images"):
        shortlist_and_rerank(TableCross(table), regions, geometry, mask, progs, tokenizer, target,
                             first_stage=table[:, :-1], k=2)


def test_composer_scores_the_shortlist_as_full_scoring_does(tokenizer):
    """Each chunk passes COMPOSER only its shortlisted images, re-indexed; the scores must not change."""
    torch.manual_seed(0)
    model = Composer(composer_config("tiny"), load_pretrained=False).eval()
    progs = [ConceptProgram.from_derivations([("a red ball", "a red [NN]", ["ball"]),
                                              ("a red ball is left of a cube", "[NP] is left of [NP]",
                                               ["a red ball", "cube"])]),
             ConceptProgram.from_derivations([], root="dogs"),
             ConceptProgram.from_derivations([("two cubes", "two [NNS]", ["cubes"])])]
    n_img = 5
    regions, geometry, mask = torch.randn(n_img, 4, 11), torch.rand(n_img, 4, 5), torch.ones(n_img, 4, dtype=torch.bool)
    mask[1, 2:] = False
    full = score_matrix(model, regions, geometry, mask, progs, tokenizer).scores      # (3, I)
    sl = np.array([[4, 1], [0, 3], [2, 4]])
    got = cross_score_shortlist(model, regions, geometry, mask, progs, tokenizer, sl, max_pairs=4)
    np.testing.assert_allclose(got, np.take_along_axis(full, sl, 1), rtol=1e-4, atol=1e-5)

"""MVSA's negative sampling (composer.models.composer.negative_sampling) against plain Python loops.

Sizes all differ (B = 3 positives, Kc = 2 caption and Ki = 4 image negatives, N = 5 node slots) so that a
transposed axis cannot pass. The references draw one ``torch.multinomial`` per (negative, positive) row
with the same seeded generator; torch's CPU sampler consumes a batched draw row by row, so the same
seed gives the same picks.
"""

from __future__ import annotations

import pytest
import torch

from composer.models.composer.losses import LossConfig, composer_loss
from composer.models.composer.negative_sampling import (
    ConceptNegatives,
    FlatMVSAPlan,
    flat_mvsa_scores,
    mvsa_scores,
    sample_concept_negatives,
)

B, KC, KI, N = 3, 2, 4, 5
SEED = 1234


def batch(seed: int = 0, *, kc: int = KC, ki: int = KI, empty: tuple[int, int] | None = (1, 2)):
    """Random (B, 1 + K, N) node scores and concept mask; the positive always has a concept, and the
    caption negative ``empty`` = (b, column) has none."""
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(B, 1 + kc + ki, N, generator=g)
    concept = torch.rand(B, 1 + kc + ki, N, generator=g) > 0.5
    concept[:, :, 0] = True
    if empty is not None and kc > 0:
        concept[empty[0], empty[1]] = False
    return scores, concept


def reference_mvsa(scores: torch.Tensor, concept: torch.Tensor, kc: int, seed: int) -> dict:
    """MVSA's tensors by loops over positives, slots and negatives (nested lists)."""
    gen = torch.Generator().manual_seed(seed)
    b, k1, n = scores.shape
    ki = k1 - 1 - kc
    pick = [[[0] * kc for _ in range(n)] for _ in range(b)]
    for k in range(kc):
        for i in range(b):
            weights = [float(concept[i, 1 + k, j]) + 1e-9 for j in range(n)]
            row = torch.multinomial(torch.tensor(weights), n, replacement=True, generator=gen)
            for s in range(n):
                pick[i][s][k] = int(row[s])
    neg_c, neg_c_mask, neg_i, neg_i_mask = [], [], [], []
    for i in range(b):
        neg_c.append([]), neg_c_mask.append([]), neg_i.append([]), neg_i_mask.append([])
        for s in range(n):
            has_concept = [any(bool(concept[i, 1 + k, j]) for j in range(n)) for k in range(kc)]
            neg_c[i].append([float(scores[i, 1 + k, pick[i][s][k]]) for k in range(kc)] or [0.0])
            neg_c_mask[i].append([bool(concept[i, 1 + k, pick[i][s][k]]) and has_concept[k] for k in range(kc)]
                                 or [False])
            neg_i[i].append([float(scores[i, 1 + kc + k, s]) for k in range(ki)])
            neg_i_mask[i].append([bool(concept[i, 0, s])] * ki)
    return {"pick": pick, "positive": scores[:, 0].tolist(), "mask": concept[:, 0].tolist(),
            "negative_concept": neg_c, "negative_concept_mask": neg_c_mask,
            "negative_image": neg_i, "negative_image_mask": neg_i_mask}


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mvsa_scores_match_the_loop_reference(seed):
    scores, concept = batch(seed)
    got = mvsa_scores(scores, concept, KC, torch.Generator().manual_seed(SEED + seed))
    ref = reference_mvsa(scores, concept, KC, SEED + seed)
    assert got.positive.shape == (B, N) and got.negative_concept.shape == (B, N, KC)
    assert got.negative_image.shape == (B, N, KI)
    for name in ("positive", "mask", "negative_concept", "negative_concept_mask", "negative_image",
                 "negative_image_mask"):
        assert getattr(got, name).tolist() == ref[name], name
    drawn = sample_concept_negatives(scores[:, 1:1 + KC], concept[:, 1:1 + KC],
                                     torch.Generator().manual_seed(SEED + seed))
    assert drawn.pick.tolist() == ref["pick"]  # the same seed, the same picks


def test_draws_land_on_concepts_and_follow_the_seed():
    scores, concept = batch(5)
    a = sample_concept_negatives(scores[:, 1:1 + KC], concept[:, 1:1 + KC], torch.Generator().manual_seed(7))
    b = sample_concept_negatives(scores[:, 1:1 + KC], concept[:, 1:1 + KC], torch.Generator().manual_seed(7))
    c = sample_concept_negatives(scores[:, 1:1 + KC], concept[:, 1:1 + KC], torch.Generator().manual_seed(8))
    assert isinstance(a, ConceptNegatives) and torch.equal(a.pick, b.pick) and not torch.equal(a.pick, c.pick)
    for i in range(B):
        for k in range(KC):
            if concept[i, 1 + k].any():  # a non-concept has weight 1e-9: never drawn in practice
                assert all(bool(concept[i, 1 + k, j]) for j in a.pick[i, :, k].tolist()), (i, k)
                assert a.mask[i, :, k].all()


def test_a_caption_negative_without_concepts_is_masked_out():
    scores, concept = batch(3, empty=(1, 2))                 # positive 1's second caption negative: no concept
    got = mvsa_scores(scores, concept, KC, torch.Generator().manual_seed(0))
    assert not got.negative_concept_mask[1, :, 1].any()
    assert got.negative_concept_mask[1, :, 0].all()           # its other negative still counts
    everything_empty = concept.clone()
    everything_empty[:, 1:1 + KC] = False
    got = mvsa_scores(scores, everything_empty, KC, torch.Generator().manual_seed(0))
    assert not got.negative_concept_mask.any() and got.negative_image_mask.any()
    loss = composer_loss(scores[:, 1:].sum(-1), got, None, LossConfig())  # still defined: image negatives remain
    assert torch.isfinite(loss.total)


def test_no_caption_negatives():
    scores, concept = batch(4, kc=0, ki=3, empty=None)
    gen = torch.Generator().manual_seed(9)
    state = gen.get_state()
    got = mvsa_scores(scores, concept, 0, gen)
    assert torch.equal(gen.get_state(), state)               # nothing drawn
    assert got.negative_concept.shape == (B, N, 1) and not got.negative_concept_mask.any()
    assert torch.equal(got.negative_concept, torch.zeros(B, N, 1))
    assert torch.equal(got.negative_image, scores[:, 1:].permute(0, 2, 1))
    assert got.negative_image.tolist() == reference_mvsa(scores, concept, 0, 9)["negative_image"]
    drawn = sample_concept_negatives(scores[:, 1:1], concept[:, 1:1], gen)
    assert drawn.pick.shape == drawn.scores.shape == drawn.mask.shape == (B, N, 0)


def test_gradients_reach_the_drawn_nodes_once_per_draw():
    scores, concept = batch(6)
    scores.requires_grad_(True)
    got = mvsa_scores(scores, concept, KC, torch.Generator().manual_seed(1))
    got.negative_concept.sum().backward()
    picks = sample_concept_negatives(scores[:, 1:1 + KC].detach(), concept[:, 1:1 + KC],
                                     torch.Generator().manual_seed(1)).pick
    expected = torch.zeros_like(scores)
    for i in range(B):
        for s in range(N):
            for k in range(KC):
                expected[i, 1 + k, picks[i, s, k]] += 1
    assert torch.equal(scores.grad, expected)


def test_shapes_are_checked():
    scores, concept = batch(0)
    with pytest.raises(ValueError, match="Kc"):
        mvsa_scores(scores, concept, KC + KI + 1, torch.Generator())
    with pytest.raises(ValueError, match="same shape|one shape"):
        mvsa_scores(scores, concept[:, :, :-1], KC, torch.Generator())
    with pytest.raises(ValueError, match="B, Kc, N"):
        sample_concept_negatives(scores[0], concept[0], torch.Generator())


def test_flat_mvsa_scores_match_the_loop_reference():
    b, m, kc, ki, p = 2, 3, 2, 1, 11                           # p extra pairs
    g = torch.Generator().manual_seed(0)
    match = torch.randn(b, 1 + kc + ki, generator=g)
    extra = torch.randn(p, generator=g)
    mask = torch.tensor([[True, True, False], [True, False, False]])
    positive = torch.randint(p, (b, m), generator=g)
    neg_c = torch.randint(p, (b, m, kc), generator=g)
    neg_i = torch.randint(p, (b, m, ki), generator=g)
    for t in (positive, neg_c, neg_i):
        t[~mask] = p                                          # masked slots point past the extra scores
    plan = FlatMVSAPlan(texts=[], pair_image=torch.zeros(p, dtype=torch.long), pair_text=torch.zeros(p, dtype=torch.long),
                        positive=positive, negative_concept=neg_c, negative_image=neg_i, mask=mask)
    got = flat_mvsa_scores(match, extra, plan, kc)
    padded = extra.tolist() + [0.0]
    for i in range(b):
        assert float(got.positive[i, 0]) == float(match[i, 0])
        assert got.negative_concept[i, 0].tolist() == match[i, 1:1 + kc].tolist()
        assert got.negative_image[i, 0].tolist() == match[i, 1 + kc:].tolist()
        for s in range(m):
            assert float(got.positive[i, 1 + s]) == padded[int(positive[i, s])]
            assert got.negative_concept[i, 1 + s].tolist() == [padded[int(j)] for j in neg_c[i, s]]
            assert got.negative_image[i, 1 + s].tolist() == [padded[int(j)] for j in neg_i[i, s]]
            assert bool(got.mask[i, 1 + s]) == bool(mask[i, s])
            assert got.negative_concept_mask[i, 1 + s].tolist() == [bool(mask[i, s])] * kc
    assert got.mask[:, 0].all()

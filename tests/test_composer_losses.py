"""COMPOSER's losses on hand-made score tensors: hand-computed values, margins, zero cases, gradients."""

from __future__ import annotations

import math

import pytest
import torch

from composer.models.composer.config import LossConfig
from composer.models.composer.losses import MVSAScores, OrderScores, composer_loss, match_loss, mvsa_loss, order_loss


def test_match_loss_is_the_nll_of_column_zero():
    scores = torch.tensor([[2.0, 0.0, 1.0], [0.0, 0.0, 0.0]])
    expected = (-(2.0 - math.log(math.exp(2) + 1 + math.e)) + math.log(3)) / 2
    assert match_loss(scores).item() == pytest.approx(expected, rel=1e-6)


def test_match_loss_masks_missing_negatives_and_rejects_a_masked_positive():
    scores = torch.tensor([[1.0, 5.0, 0.0]])
    mask = torch.tensor([[True, False, True]])
    assert match_loss(scores, mask).item() == pytest.approx(math.log(1 + math.exp(-1)), rel=1e-6)
    with pytest.raises(ValueError, match="column 0"):
        match_loss(scores, torch.tensor([[False, True, True]]))


def test_match_loss_gradient_pushes_the_positive_up():
    scores = torch.tensor([[0.5, 0.2, -0.1]], requires_grad=True)
    match_loss(scores).backward()
    assert scores.grad[0, 0] < 0 and (scores.grad[0, 1:] > 0).all()
    assert scores.grad.sum().item() == pytest.approx(0.0, abs=1e-6)


def test_mvsa_hinge_by_hand():
    # two pairs (B = 2), two concepts each, one negative of each kind
    pos = torch.tensor([[1.0, 0.5], [0.2, 2.0]])
    neg_c = torch.tensor([[[0.5], [0.9]], [[0.0], [0.0]]])
    neg_i = torch.tensor([[[0.1], [-1.0]], [[0.3], [1.5]]])
    # [0.8 - pos + neg]_+ per term
    # concept negatives: 0.8-1+0.5 = 0.3, 0.8-0.5+0.9 = 1.2, 0.8-0.2+0 = 0.6, 0.8-2+0 < 0
    # image negatives:   0.8-1+0.1 < 0,   0.8-0.5-1 < 0,     0.8-0.2+0.3 = 0.9, 0.8-2+1.5 = 0.3
    expected = (0.3 + 1.2 + 0.6 + 0.9 + 0.3) / 2
    assert mvsa_loss(pos, neg_c, neg_i, margin=0.8).item() == pytest.approx(expected, rel=1e-6)


def test_mvsa_zero_when_every_positive_clears_the_margin():
    pos = torch.tensor([[3.0, 2.0]])
    neg = torch.tensor([[[1.0, 0.5], [1.1, -2.0]]])
    assert mvsa_loss(pos, neg, neg, margin=0.8).item() == 0.0
    assert mvsa_loss(pos, neg, neg, margin=1.0).item() == pytest.approx(2 * (1.0 - 2.0 + 1.1) / 2, rel=1e-6)


def test_mvsa_masks_concepts_and_negatives_and_averages_over_k():
    pos = torch.tensor([[0.0, 0.0]])
    neg = torch.tensor([[[0.2, 0.4], [9.0, 9.0]]])
    concept_mask = torch.tensor([[True, False]])
    # concept 0: hinge of the two negatives, averaged: ((0.8+0.2) + (0.8+0.4)) / 2 = 1.1, twice (both kinds)
    assert mvsa_loss(pos, neg, neg, concept_mask).item() == pytest.approx(2.2, rel=1e-6)
    neg_mask = torch.tensor([[[True, False], [True, True]]])
    out = mvsa_loss(pos, neg, neg, concept_mask, negative_concept_mask=neg_mask, negative_image_mask=neg_mask)
    assert out.item() == pytest.approx(2 * 1.0, rel=1e-6)
    none = torch.zeros_like(neg_mask)
    assert mvsa_loss(pos, neg, neg, concept_mask, negative_concept_mask=none, negative_image_mask=none).item() == 0.0


def test_mvsa_nll_variant_by_hand():
    pos = torch.tensor([[1.0]])
    neg_c, neg_i = torch.tensor([[[0.0, 1.0]]]), torch.tensor([[[2.0]]])
    expected = -(1 - math.log(math.e + 1 + math.e)) - (1 - math.log(math.e + math.exp(2)))
    assert mvsa_loss(pos, neg_c, neg_i, kind="nll").item() == pytest.approx(expected, rel=1e-6)
    with pytest.raises(ValueError, match="choose one of"):
        mvsa_loss(pos, neg_c, neg_i, kind="softplus")


def test_mvsa_gradients_flow_to_positive_and_negatives():
    pos = torch.tensor([[0.3, 0.1]], requires_grad=True)
    neg_c = torch.tensor([[[0.2], [0.0]]], requires_grad=True)
    neg_i = torch.tensor([[[0.1], [5.0]]], requires_grad=True)
    mvsa_loss(pos, neg_c, neg_i).backward()
    assert pos.grad.tolist() == [[-2.0, -2.0]]
    assert neg_c.grad.flatten().tolist() == [1.0, 1.0] and neg_i.grad.flatten().tolist() == [1.0, 1.0]


def test_order_loss_by_hand_with_mask():
    parent = torch.tensor([[1.0, 0.3, 0.0], [0.0, 0.0, 0.0]])
    child = torch.tensor([[0.5, 0.2, 3.0], [0.1, -0.3, 0.0]])
    mask = torch.tensor([[True, True, False], [True, True, False]])
    # [0.2 - p + c]_+: 0, 0.1, (masked), 0.3, 0 -> 0.4 over 2 pairs
    assert order_loss(parent, child, mask, margin=0.2).item() == pytest.approx(0.2, rel=1e-6)
    assert order_loss(parent, child, mask, margin=0.0).item() == pytest.approx(0.05, rel=1e-6)


def test_order_loss_gradient_raises_parents_and_lowers_children():
    parent = torch.tensor([[0.0]], requires_grad=True)
    child = torch.tensor([[0.0]], requires_grad=True)
    order_loss(parent, child).backward()
    assert parent.grad.item() == -1.0 and child.grad.item() == 1.0


def test_composer_loss_weights_the_parts():
    match = torch.tensor([[0.0, 0.0]], requires_grad=True)
    mvsa = MVSAScores(positive=torch.tensor([[0.0]]), negative_concept=torch.tensor([[[0.0]]]),
                      negative_image=torch.tensor([[[0.0]]]))
    order = OrderScores(parent=torch.tensor([[0.0]]), child=torch.tensor([[0.0]]))
    out = composer_loss(match, mvsa, order)                       # paper: lambda1 = lambda2 = 1
    assert out.match.item() == pytest.approx(math.log(2))
    assert out.mvsa.item() == pytest.approx(1.6) and out.order.item() == pytest.approx(0.2)
    assert out.total.item() == pytest.approx(math.log(2) + 1.6 + 0.2)
    weighted = composer_loss(match, mvsa, order, LossConfig(lambda_mvsa=0.5, lambda_order=0.0))
    assert weighted.total.item() == pytest.approx(math.log(2) + 0.8)
    bare = composer_loss(match, None, None)
    assert bare.total.item() == pytest.approx(math.log(2)) and bare.mvsa.item() == 0.0
    bare.total.backward()
    assert match.grad is not None and match.grad.tolist() == [[-0.5, 0.5]]
    with pytest.raises(ValueError, match="choose one of"):
        LossConfig(mvsa="l2")

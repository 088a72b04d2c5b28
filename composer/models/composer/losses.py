"""COMPOSER's objectives (§3.3, Appendix D) as pure functions of score tensors.

    l = l_MATCH + lambda1 * l_MVSA + lambda2 * l_ORDER

* :func:`match_loss` -- NLL of each positive (image, sentence) pair against its sampled negatives
  (ViLBERT's strategy: negative captions and/or images for each positive);
* :func:`mvsa_loss` -- multi-level visual-semantic alignment: a triplet hinge (or NLL) for every
  concept of the caption, against negative concepts on the same image and the same concept on
  negative images;
* :func:`order_loss` -- a parent (closer to the sentence) should score higher than its child by a margin.

**Reduction.** The paper sums every term over the batch; here each is summed over a pair's
concepts, negatives-averaged, edges-summed as the paper writes them, and then **averaged** over
the B positive pairs. All three terms are divided by the same B, so the lambdas keep their meaning
and only the effective learning rate changes. With K > 1 negatives per concept, the hinge (or NLL)
terms are averaged over the K valid negatives, which equals the paper's formula for K = 1.

**How the training loop fills the MVSA tensors.** For positive pair i with caption y_i on image
x_i, run the model on (x_i, y_i), on (x_i, y^-_k) for negative captions and on (x^-_k, y_i) for
negative images. Then ``positive[i, n]`` is node n's score on (x_i, y_i); ``negative_image[i, n, k]``
is the *same node* n on (x^-_k, y_i) -- nodes align one to one since the caption is the same; and
``negative_concept[i, n, k]`` is the score on x_i of a concept taken from a negative caption
(the paper: "we derive c^- from the negative sentences"), e.g. a random non-primitive node of
y^-_k, or the node of the same level; which one is the caller's choice, and masks mark the slots
that have no negative.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from composer.models.composer.config import MVSA_KINDS, LossConfig

__all__ = ["ComposerLoss", "MVSAScores", "OrderScores", "composer_loss", "match_loss", "mvsa_loss", "order_loss"]


def _batch(x: torch.Tensor) -> int:
    return max(int(x.shape[0]), 1)


def match_loss(scores: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """l_MATCH: ``-log softmax(scores[i])[0]`` averaged over i.

    Args:
        scores: (B, 1 + K) column 0 = s(x_i, y_i) of the positive, columns 1.. = its K negatives.
        mask: (B, 1 + K) bool, True = a real candidate (column 0 must be True); None = all real.

    >>> round(match_loss(torch.tensor([[0.0, 0.0]])).item(), 4)  # log 2
    0.6931
    """
    if scores.dim() != 2 or scores.shape[1] < 1:
        raise ValueError(f"scores must be (B, 1 + K) with the positive in column 0, got {tuple(scores.shape)}")
    if mask is not None:
        if not bool(mask[:, 0].all()):
            raise ValueError("match_loss: column 0 holds the positives and must be unmasked")
        scores = scores.masked_fill(~mask, float("-inf"))
    return -F.log_softmax(scores, dim=1)[:, 0].sum() / _batch(scores)


def _against(positive: torch.Tensor, negative: torch.Tensor, mask: torch.Tensor | None, margin: float,
             kind: str) -> torch.Tensor:
    """Per-concept loss of (B, N) positives against (B, N, K) negatives; -> (B, N)."""
    if negative.shape[:2] != positive.shape or negative.dim() != 3:
        raise ValueError(f"negatives {tuple(negative.shape)} must be (B, N, K) for positives {tuple(positive.shape)}")
    valid = torch.ones_like(negative, dtype=torch.bool) if mask is None else mask
    if kind == "hinge":
        hinge = F.relu(margin - positive[..., None] + negative) * valid.to(negative.dtype)  # (B, N, K)
        return hinge.sum(-1) / valid.sum(-1).clamp_min(1).to(negative.dtype)              # (B, N)
    logits = torch.cat([positive[..., None], negative.masked_fill(~valid, float("-inf"))], dim=-1)  # (B, N, 1+K)
    return -F.log_softmax(logits, dim=-1)[..., 0]                                                     # (B, N)


def mvsa_loss(positive: torch.Tensor, negative_concept: torch.Tensor, negative_image: torch.Tensor,
              mask: torch.Tensor | None = None, *, negative_concept_mask: torch.Tensor | None = None,
              negative_image_mask: torch.Tensor | None = None, margin: float = 0.8,
              kind: str = "hinge") -> torch.Tensor:
    """l_MVSA: ``[alpha - s(x, c) + s(x, c^-)]_+ + [alpha - s(x, c) + s(x^-, c)]_+`` summed over concepts.

    Args:
        positive: (B, N) s(x_i, c_n) for the concepts of pair i's caption.
        negative_concept: (B, N, K) s(x_i, c^-): negative concepts scored on the positive image.
        negative_image: (B, N, K') s(x^-, c_n): the same concept scored on negative images.
        mask: (B, N) bool, True = concept n counts (see ``ComposerOutput.concept_mask``); None = all.
        negative_concept_mask, negative_image_mask: (B, N, K) / (B, N, K') bool, True = real negative.
        margin: alpha (0.8 in the paper); unused by the NLL variant.
        kind: ``"hinge"`` (the paper's choice) or ``"nll"`` (Table 10's alternative: softmax of the
            positive against the negatives, per concept and direction).

    >>> pos = torch.tensor([[1.0]]); neg = torch.tensor([[[0.5]]])
    >>> round(mvsa_loss(pos, neg, neg, margin=0.8).item(), 4)  # 2 * (0.8 - 1.0 + 0.5)
    0.6
    """
    if kind not in MVSA_KINDS:
        raise ValueError(f"kind={kind!r}; choose one of {MVSA_KINDS}")
    per_concept = (_against(positive, negative_concept, negative_concept_mask, margin, kind)
                   + _against(positive, negative_image, negative_image_mask, margin, kind))  # (B, N)
    if mask is not None:
        per_concept = per_concept * mask.to(per_concept.dtype)
    return per_concept.sum() / _batch(positive)


def order_loss(parent: torch.Tensor, child: torch.Tensor, mask: torch.Tensor | None = None, *,
               margin: float = 0.2) -> torch.Tensor:
    """l_ORDER: ``[beta - s(x, c_parent) + s(x, c_child)]_+`` summed over edges, averaged over pairs.

    Args:
        parent, child: (B, E) scores of each edge's parent (closer to the sentence) and child, on the
            positive image (``ComposerOutput.edge_scores()``).
        mask: (B, E) bool, True = real edge.

    >>> round(order_loss(torch.tensor([[1.0, 0.3]]), torch.tensor([[0.5, 0.2]])).item(), 4)  # 0 + 0.1
    0.1
    """
    if parent.shape != child.shape:
        raise ValueError(f"parent {tuple(parent.shape)} and child {tuple(child.shape)} scores must match")
    hinge = F.relu(margin - parent + child)  # (B, E)
    if mask is not None:
        hinge = hinge * mask.to(hinge.dtype)
    return hinge.sum() / _batch(parent)


@dataclass
class MVSAScores:
    """Inputs of :func:`mvsa_loss` (shapes there)."""

    positive: torch.Tensor                              # (B, N)
    negative_concept: torch.Tensor                      # (B, N, K)
    negative_image: torch.Tensor                        # (B, N, K')
    mask: torch.Tensor | None = None                    # (B, N) bool
    negative_concept_mask: torch.Tensor | None = None   # (B, N, K) bool
    negative_image_mask: torch.Tensor | None = None     # (B, N, K') bool


@dataclass
class OrderScores:
    """Inputs of :func:`order_loss`."""

    parent: torch.Tensor                  # (B, E)
    child: torch.Tensor                   # (B, E)
    mask: torch.Tensor | None = None      # (B, E) bool, True = real edge


@dataclass
class ComposerLoss:
    """The total and its (unweighted) parts, all scalars."""

    total: torch.Tensor
    match: torch.Tensor
    mvsa: torch.Tensor
    order: torch.Tensor


def composer_loss(match_scores: torch.Tensor, mvsa: MVSAScores | None, order: OrderScores | None,
                  config: LossConfig | None = None, *, match_mask: torch.Tensor | None = None) -> ComposerLoss:
    """``l_MATCH + lambda1 * l_MVSA + lambda2 * l_ORDER``; a None part (or a zero lambda) counts 0.

    Args:
        match_scores: (B, 1 + K) positive in column 0 (:func:`match_loss`).
        mvsa: the MVSA score tensors, or None to train without it (Table 5's "- MVSA" rows).
        order: the order score tensors, or None.
        config: margins, weights and the MVSA variant; default the paper's.
        match_mask: (B, 1 + K) bool, True = real candidate.
    """
    config = config or LossConfig()
    zero = match_scores.new_zeros(())
    match = match_loss(match_scores, match_mask)
    l_mvsa = zero if mvsa is None or config.lambda_mvsa == 0 else mvsa_loss(
        mvsa.positive, mvsa.negative_concept, mvsa.negative_image, mvsa.mask,
        negative_concept_mask=mvsa.negative_concept_mask, negative_image_mask=mvsa.negative_image_mask,
        margin=config.mvsa_margin, kind=config.mvsa)
    l_order = zero if order is None or config.lambda_order == 0 else order_loss(
        order.parent, order.child, order.mask, margin=config.order_margin)
    total = match + config.lambda_mvsa * l_mvsa + config.lambda_order * l_order
    return ComposerLoss(total=total, match=match, mvsa=l_mvsa, order=l_order)

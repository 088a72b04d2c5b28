"""Negative sampling for MVSA (§3.3): what each concept of a positive caption is compared with. No Lightning.

l_MVSA (:func:`composer.models.composer.losses.mvsa_loss`) asks every concept c of a positive pair (x_i, y_i) to
score higher on x_i than

* s(x_i, c^-): a concept c^- drawn from each *caption negative* (another image's caption, composed on
  x_i), and
* s(x^-, c): c itself on each *image negative* (another image, with y_i).

The training batch (:class:`composer.training.data.TrainBatch`) already holds both kinds of pairs, so
sampling only chooses, for each concept slot, which node of each caption negative stands against it:

* COMPOSER scores every node of every pair in one forward pass; :func:`mvsa_scores` gathers the
  negatives from those scores (:func:`sample_concept_negatives` draws the nodes).
* The flat model has no nodes, so phrases become texts of their own: :func:`flat_mvsa_plan` lists the
  extra (image, text) pairs to score, and :func:`flat_mvsa_scores` arranges their scores for the loss.

Dimensions: B positives per batch; K = Kc + Ki negatives per positive (Kc caption negatives, then Ki
image negatives, as in ``TrainBatch``); N node slots per caption (padded); M phrase slots (flat model).

Every draw comes from a generator the caller seeds per step, so a resumed run draws what it would have.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from composer.models.composer.losses import MVSAScores
from composer.models.composer.program import ConceptProgram

__all__ = ["ConceptNegatives", "FlatMVSAPlan", "flat_mvsa_plan", "flat_mvsa_scores", "mvsa_scores",
           "sample_concept_negatives"]

# weight of a non-concept node in the draw: a negative caption with no concept at all still has a
# distribution to draw from (uniform); its draws are masked out
_NON_CONCEPT_WEIGHT = 1e-9


@dataclass
class ConceptNegatives:
    """For each node slot of each positive caption, one node drawn from each caption negative.

    Attributes:
        pick: (B, N, Kc) long, the node of caption negative k drawn for slot n: uniform over that
            negative's concepts (over all N slots, masked, when it has none).
        scores: (B, N, Kc) the drawn nodes' scores (on the positive image).
        mask: (B, N, Kc) bool, True = the drawn node is a concept (False for every draw from a negative
            without concepts).
    """

    pick: torch.Tensor
    scores: torch.Tensor
    mask: torch.Tensor


def sample_concept_negatives(node_scores: torch.Tensor, concept_mask: torch.Tensor,
                             generator: torch.Generator) -> ConceptNegatives:
    """Draw, for each of the N node slots of each positive, one concept of each of its Kc caption negatives.

    Draws are made on the CPU, one ``torch.multinomial`` over a (B, N) weight matrix per negative, in
    order k = 0 .. Kc-1 (with replacement: a negative with fewer concepts than N repeats them); a
    fixed ``generator`` seed therefore gives the same picks on every device.

    Args:
        node_scores: (B, Kc, N) each caption negative's node scores on the positive image.
        concept_mask: (B, Kc, N) bool, True = the node is a concept (a node MVSA compares).
        generator: a CPU generator, seeded by the caller.

    >>> scores = torch.tensor([[[0.25, 0.5, 0.75]], [[1.0, 2.0, 3.0]]])     # B = 2, Kc = 1, N = 3
    >>> concepts = torch.tensor([[[False, True, False]], [[False, False, False]]])
    >>> neg = sample_concept_negatives(scores, concepts, torch.Generator().manual_seed(0))
    >>> neg.pick.shape, neg.pick[0, :, 0].tolist(), neg.scores[0, :, 0].tolist()
    (torch.Size([2, 3, 1]), [1, 1, 1], [0.5, 0.5, 0.5])
    >>> neg.mask[:, :, 0].tolist()                                           # the second negative has no concept
    [[True, True, True], [False, False, False]]
    """
    if node_scores.dim() != 3 or concept_mask.shape != node_scores.shape:
        raise ValueError(f"node_scores must be (B, Kc, N) and concept_mask the same shape; got "
                         f"{tuple(node_scores.shape)} and {tuple(concept_mask.shape)}")
    b, kc, n = node_scores.shape
    device = node_scores.device
    picks, scores, masks = [], [], []
    for k in range(kc):
        valid = concept_mask[:, k]                                                     # (B, N)
        weights = valid.float().cpu() + _NON_CONCEPT_WEIGHT                            # (B, N)
        pick = torch.multinomial(weights, n, replacement=True, generator=generator).to(device)  # (B, N) node ids
        picks.append(pick)
        scores.append(node_scores[:, k].gather(1, pick))                               # (B, N)
        masks.append(valid.gather(1, pick) & valid.any(1, keepdim=True))               # (B, N)
    if kc == 0:
        return ConceptNegatives(torch.zeros(b, n, 0, dtype=torch.long, device=device), node_scores.new_zeros(b, n, 0),
                                torch.zeros(b, n, 0, dtype=torch.bool, device=device))
    return ConceptNegatives(torch.stack(picks, 2), torch.stack(scores, 2), torch.stack(masks, 2))  # (B, N, Kc) each


def mvsa_scores(node_scores: torch.Tensor, concept_mask: torch.Tensor, num_caption_negatives: int,
                generator: torch.Generator) -> MVSAScores:
    """COMPOSER's MVSA tensors: each concept of the positive caption against (a) a concept drawn from each
    caption negative, scored on the positive image, and (b) itself on each image negative.

    Args:
        node_scores: (B, 1 + K, N) every pair's node scores in ``TrainBatch`` order: column 0 the
            positive pair, columns 1..Kc the caption negatives (positive image), the rest the image
            negatives (positive caption, so their node n is the positive's node n).
        concept_mask: (B, 1 + K, N) bool, True = the node is a concept.
        num_caption_negatives: Kc.
        generator: the draws' source (:func:`sample_concept_negatives`).

    Returns:
        :class:`composer.models.composer.losses.MVSAScores` with positive (B, N), negative_concept (B, N, Kc) (a single
        masked column when Kc = 0), negative_image (B, N, Ki) and their masks.
    """
    b, k1, n = node_scores.shape
    kc = num_caption_negatives
    if concept_mask.shape != node_scores.shape or not 0 <= kc < k1:
        raise ValueError(f"need node_scores and concept_mask of one shape (B, 1 + K, N) and 0 <= Kc <= K; got "
                         f"{tuple(node_scores.shape)}, {tuple(concept_mask.shape)}, Kc = {kc}")
    positive, mask = node_scores[:, 0], concept_mask[:, 0]                             # (B, N)
    neg_img = node_scores[:, 1 + kc:].permute(0, 2, 1)                                 # (B, N, Ki)
    neg_img_mask = mask[:, :, None].expand_as(neg_img)                                 # (B, N, Ki)
    drawn = sample_concept_negatives(node_scores[:, 1:1 + kc], concept_mask[:, 1:1 + kc], generator)
    if kc > 0:
        neg_c, neg_c_mask = drawn.scores, drawn.mask                                   # (B, N, Kc)
    else:  # one all-masked column: the loss's mean over negatives stays defined
        neg_c = positive.new_zeros(b, n, 1)                                            # (B, N, 1)
        neg_c_mask = torch.zeros(b, n, 1, dtype=torch.bool, device=positive.device)    # (B, N, 1)
    return MVSAScores(positive, neg_c, neg_img, mask, neg_c_mask, neg_img_mask)


# ---------------------------------------------------------------------- the flat model
@dataclass
class FlatMVSAPlan:
    """Extra (image, text) pairs that give the flat model's phrase-level MVSA scores.

    Indices in ``positive`` / ``negative_concept`` / ``negative_image`` point into the scores of
    the extra pairs; masked slots point to ``num_pairs`` (a padding score appended by the caller).
    M = ``mvsa_concepts``; Kc, Ki = caption and image negatives per positive.
    """

    texts: list[str]                    # (T',) distinct phrase texts
    pair_image: torch.Tensor            # (P,) long, image of each extra pair (the batch's image index)
    pair_text: torch.Tensor             # (P,) long, index into ``texts``
    positive: torch.Tensor              # (B, M) long: s(x_i, c)
    negative_concept: torch.Tensor      # (B, M, Kc) long: s(x_i, c^-)
    negative_image: torch.Tensor        # (B, M, Ki) long: s(x^-, c)
    mask: torch.Tensor                  # (B, M) bool, True = a real concept slot

    @property
    def num_pairs(self) -> int:
        return int(self.pair_image.shape[0])


def _phrases(p: ConceptProgram) -> list[int]:
    """Composed concepts other than the sentence."""
    return [n for n in range(p.num_nodes) if not p.is_primitive(n) and n != p.root]


def flat_mvsa_plan(programs: Sequence[ConceptProgram], pair_image: torch.Tensor, pair_caption: torch.Tensor,
                   num_caption_negatives: int, mvsa_concepts: int, rng: random.Random) -> FlatMVSAPlan:
    """Draw up to ``mvsa_concepts`` phrases of each positive caption and their negatives.

    For each positive i, the phrases c (composed, non-sentence nodes) are sampled without replacement;
    each is paired with the positive image, with one composed node (its sentence included) drawn from
    each caption negative on the positive image, and with each negative image.

    Args:
        programs: the batch's C distinct captions.
        pair_image, pair_caption: (B, 1 + K) the batch's pairs, positive in column 0, then the
            ``num_caption_negatives`` caption negatives, then the image negatives.
        rng: the draws' source (seeded per step by the caller, for exact resume).
    """
    b, k1 = pair_image.shape
    kc, m = num_caption_negatives, mvsa_concepts
    ki = k1 - 1 - kc
    text_slot: dict[str, int] = {}
    images: list[int] = []
    texts: list[int] = []

    def pair(image: int, text: str) -> int:
        texts.append(text_slot.setdefault(text, len(text_slot)))
        images.append(image)
        return len(images) - 1

    positive = torch.zeros(b, m, dtype=torch.long)
    neg_concept = torch.zeros(b, m, kc, dtype=torch.long)
    neg_image = torch.zeros(b, m, ki, dtype=torch.long)
    mask = torch.zeros(b, m, dtype=torch.bool)
    pi, pc = pair_image.tolist(), pair_caption.tolist()
    for i in range(b):
        p = programs[pc[i][0]]
        nodes = _phrases(p)
        chosen = rng.sample(nodes, min(m, len(nodes)))
        for slot, node in enumerate(chosen):
            text = p.texts[node]
            positive[i, slot] = pair(pi[i][0], text)
            for k in range(kc):  # a concept of the k-th negative caption, on the positive image
                q = programs[pc[i][1 + k]]
                pool = [n for n in range(q.num_nodes) if not q.is_primitive(n)] or [q.root]
                neg_concept[i, slot, k] = pair(pi[i][0], q.texts[rng.choice(pool)])
            for k in range(ki):  # the same concept on the k-th negative image
                neg_image[i, slot, k] = pair(pi[i][1 + kc + k], text)
            mask[i, slot] = True
    n = len(images)
    pad = ~mask                                                               # (B, M)
    positive[pad] = n
    neg_concept[pad] = n
    neg_image[pad] = n
    return FlatMVSAPlan(texts=list(text_slot), pair_image=torch.tensor(images, dtype=torch.long),
                        pair_text=torch.tensor(texts, dtype=torch.long), positive=positive,
                        negative_concept=neg_concept, negative_image=neg_image, mask=mask)


def flat_mvsa_scores(match_scores: torch.Tensor, extra_scores: torch.Tensor, plan: FlatMVSAPlan,
                     num_caption_negatives: int) -> MVSAScores:
    """The flat model's MVSA tensors: the sentence as slot 0 (its negatives are the batch's sampled
    ones, scored by the match loss anyway), then the plan's M phrases.

    Args:
        match_scores: (B, 1 + K) the batch's pair scores, positive first.
        extra_scores: (P,) the scores of ``plan``'s extra pairs.
        plan: from :func:`flat_mvsa_plan`.
        num_caption_negatives: Kc.
    """
    b = match_scores.shape[0]
    kc = num_caption_negatives
    extra = torch.cat([extra_scores, extra_scores.new_zeros(1)])                        # (P + 1,), last = padding
    dev = extra.device
    positive = torch.cat([match_scores[:, :1], extra[plan.positive.to(dev)]], 1)       # (B, 1 + M)
    neg_c = torch.cat([match_scores[:, None, 1:1 + kc], extra[plan.negative_concept.to(dev)]], 1)  # (B, 1+M, Kc)
    neg_i = torch.cat([match_scores[:, None, 1 + kc:], extra[plan.negative_image.to(dev)]], 1)     # (B, 1+M, Ki)
    mask = torch.cat([torch.ones(b, 1, dtype=torch.bool), plan.mask], 1).to(dev)       # (B, 1 + M)
    return MVSAScores(positive, neg_c, neg_i, mask, mask[..., None].expand_as(neg_c),
                      mask[..., None].expand_as(neg_i))

"""Shortlist-and-rerank retrieval: a cheap first stage keeps the top k images per caption, the
cross-modal model rescores only those.

Full cross-scoring costs Q x I model calls (5,000 x 1,000 = 5M pairs on Flickr30K's test split), each
a pass of the Composition Transformer per concept. A dual encoder scores all pairs with one matrix
product; keeping its top k (e.g. 20-100) and cross-scoring only those costs Q x k pairs. The price is
the **shortlist recall**: a caption whose image the first stage ranks below k cannot be recovered. The
final ranking puts the shortlist first, in the cross model's order, then every other image in the first
stage's order, so R@K for K <= k is bounded by the shortlist recall.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import numpy as np
import torch

from composer.models.common.retrieval import recall_at_k

__all__ = ["shortlist_top_k", "shortlist_recall", "combine_rankings", "dual_encoder_scores",
           "cross_score_shortlist", "RerankResult", "shortlist_and_rerank"]


def shortlist_top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """(Q, k) indices of each row's k best candidates, best first (ties: lower index first).

    >>> shortlist_top_k(np.array([[0.1, 0.9, 0.5], [0.3, 0.2, 0.1]]), 2)
    array([[1, 2],
           [0, 1]])
    """
    if scores.ndim != 2:
        raise ValueError(f"scores must be (Q, I), got shape {scores.shape}")
    if not 1 <= k <= scores.shape[1]:
        raise ValueError(f"shortlist size k={k} must be in [1, {scores.shape[1]}] (the number of images)")
    return np.argsort(-scores, axis=1, kind="stable")[:, :k]


def shortlist_recall(shortlist: np.ndarray, target: np.ndarray) -> float:
    """Percent of queries whose correct candidate ``target`` (Q,) is in their shortlist (Q, k).

    >>> shortlist_recall(np.array([[1, 2], [0, 1]]), np.array([2, 2]))
    50.0
    """
    return float(100.0 * np.mean((shortlist == target[:, None]).any(1)))


def combine_rankings(first_scores: np.ndarray, shortlist: np.ndarray, rerank_scores: np.ndarray) -> np.ndarray:
    """(Q, I) scores whose order is the final ranking: the shortlist by ``rerank_scores``, then the rest by
    ``first_scores``. Ties in either stage stay ties (so :func:`recall_at_k` still counts them against).

    Args:
        first_scores: (Q, I) first-stage scores.
        shortlist: (Q, k) candidate indices.
        rerank_scores: (Q, k) the cross model's scores of the shortlisted pairs.

    >>> first = np.array([[0.9, 0.8, 0.1, 0.5]])
    >>> combine_rankings(first, np.array([[0, 1]]), np.array([[-3.0, 7.0]]))
    array([[ 1.,  2., -2., -1.]])
    """
    from scipy.stats import rankdata

    Q, k = shortlist.shape
    if rerank_scores.shape != (Q, k) or first_scores.shape[0] != Q:
        raise ValueError(f"first_scores {first_scores.shape}, shortlist {shortlist.shape} and rerank_scores "
                         f"{rerank_scores.shape} disagree")
    rows = np.arange(Q)[:, None]
    listed = np.zeros(first_scores.shape, dtype=bool)                       # (Q, I)
    listed[rows, shortlist] = True
    # the rest: -(rank among the non-shortlisted by first score), all <= -1; tied scores share a rank
    rest = np.where(listed, -np.inf, first_scores)
    out = -rankdata(-rest, method="min", axis=1).astype(np.float64)         # (Q, I)
    # the shortlist: k + 1 - (rank by cross score), all >= 1
    out[rows, shortlist] = k + 1 - rankdata(-rerank_scores, method="min", axis=1)
    return out


@torch.no_grad()
def dual_encoder_scores(model, regions: torch.Tensor, geometry: torch.Tensor, region_mask: torch.Tensor,
                        texts: list[str], *, batch_size: int = 256) -> np.ndarray:
    """(Q, I) first-stage scores of a dual encoder: text embeddings @ image embeddings.T.

    ``model.encode_images(regions, geometry, region_mask) -> (I, D)`` embeds images;
    ``model.encode_sentences(texts) -> (Q, D)`` (as :class:`composer.models.vse.model.VSE`), or else
    ``model.encode_texts(texts)``, embeds caption strings. Normalise inside them for cosine similarity.
    """
    encode_text = getattr(model, "encode_sentences", None) or getattr(model, "encode_texts", None)
    if not callable(getattr(model, "encode_images", None)) or not callable(encode_text):
        raise TypeError(f"{type(model).__name__} is not a dual encoder: a first stage needs encode_images() and "
                        f"encode_sentences() (or encode_texts() taking strings), or is a (Q, I) score matrix")
    images = torch.cat([model.encode_images(regions[i:i + batch_size], geometry[i:i + batch_size],
                                            region_mask[i:i + batch_size])
                        for i in range(0, regions.shape[0], batch_size)])                # (I, D)
    text = torch.cat([encode_text(texts[i:i + batch_size]) for i in range(0, len(texts), batch_size)])  # (Q, D)
    return (text.float() @ images.float().T).cpu().numpy()                              # (Q, I)


@torch.no_grad()
def cross_score_shortlist(model, regions: torch.Tensor, geometry: torch.Tensor, region_mask: torch.Tensor,
                          programs, tokenizer, shortlist: np.ndarray, *, max_pairs: int = 4096) -> np.ndarray:
    """(Q, k) cross-model scores of each caption against its shortlisted images.

    Captions go a few at a time (``max_pairs // k`` of them); each chunk passes the model only the
    images its shortlists name, so per-image work (visual encodings) is not repeated for all I images.

    Args:
        model: anything with :meth:`composer.models.composer.model.Composer.score_pairs`'s signature.
        regions, geometry, region_mask: (I, R, Dr), (I, R, 5), (I, R) of all candidates.
        programs: the Q captions' ``ConceptProgram`` objects; tokenizer: the model's.
        shortlist: (Q, k) candidate indices.
    """
    from composer.models.composer.program import ProgramBatch

    Q, k = shortlist.shape
    if Q != len(programs):
        raise ValueError(f"shortlist has {Q} rows for {len(programs)} captions")
    out = np.empty((Q, k), dtype=np.float32)
    per_chunk = max(1, max_pairs // k)
    device = regions.device
    for c0 in range(0, Q, per_chunk):
        rows = shortlist[c0:c0 + per_chunk]                                  # (c, k)
        images, local = np.unique(rows, return_inverse=True)                 # (i,), (c * k,)
        sel = torch.as_tensor(images, device=device)
        batch = ProgramBatch.collate(programs[c0:c0 + len(rows)], tokenizer)
        pair_caption = torch.arange(len(rows), device=device).repeat_interleave(k)        # (c * k,)
        pair_image = torch.as_tensor(local.reshape(-1), device=device)                    # (c * k,)
        s = model.score_pairs(regions[sel], geometry[sel], region_mask[sel], batch, pair_image, pair_caption)
        out[c0:c0 + len(rows)] = s.view(len(rows), k).float().cpu().numpy()
    return out


@dataclass
class RerankResult:
    """Both stages' R@K, the shortlist's recall, and the cost against full cross-scoring."""

    k: int
    first_stage: dict[str, float]        # R@K of the first stage alone
    reranked: dict[str, float]           # R@K after cross-scoring the shortlist
    shortlist_recall: float              # percent of captions whose image is in the shortlist
    pairs_scored: int                    # Q * k cross-model calls
    pairs_full: int                      # Q * I, full cross-scoring
    first_stage_seconds: float
    rerank_seconds: float

    def to_dict(self) -> dict:
        d = asdict(self)
        d["pairs_fraction"] = round(self.pairs_scored / max(self.pairs_full, 1), 6)
        return d


def shortlist_and_rerank(cross_model, regions: torch.Tensor, geometry: torch.Tensor, region_mask: torch.Tensor,
                         programs, tokenizer, target: np.ndarray, *, first_stage, k: int = 50,
                         max_pairs: int = 4096, ks=(1, 5, 10)) -> RerankResult:
    """Text-to-image retrieval by shortlist and rerank.

    Args:
        cross_model: the expensive model (``score_pairs``), in eval mode.
        regions, geometry, region_mask: (I, R, Dr), (I, R, 5), (I, R) of the candidates.
        programs: the Q query captions (``ConceptProgram``); tokenizer: the cross model's.
        target: (Q,) index of each caption's image.
        first_stage: a (Q, I) score matrix, or a dual encoder (:func:`dual_encoder_scores`), which is
            given the captions' sentences.
        k: shortlist size per caption.
    """
    started = time.perf_counter()
    if isinstance(first_stage, (np.ndarray, torch.Tensor)):
        first = np.asarray(first_stage.detach().cpu() if isinstance(first_stage, torch.Tensor) else first_stage,
                           dtype=np.float64)
    else:
        first = dual_encoder_scores(first_stage, regions, geometry, region_mask,
                                    [p.texts[p.root] for p in programs]).astype(np.float64)
    n_img = regions.shape[0]
    if first.shape != (len(programs), n_img):
        raise ValueError(f"first-stage scores {first.shape} should be (captions, images) = {(len(programs), n_img)}")
    if not np.isfinite(first).all():  # a NaN ranks nowhere: the caption would be a silent miss
        bad = ~np.isfinite(first)
        raise ValueError(f"first-stage scores: {int(bad.sum())} NaN or infinite value(s), first in row "
                         f"{int(np.flatnonzero(bad.any(axis=1))[0])}")
    first_seconds = time.perf_counter() - started
    shortlist = shortlist_top_k(first, k)                                   # (Q, k)
    started = time.perf_counter()
    cross = cross_score_shortlist(cross_model, regions, geometry, region_mask, programs, tokenizer, shortlist,
                                  max_pairs=max_pairs)                       # (Q, k)
    rerank_seconds = time.perf_counter() - started
    final = combine_rankings(first, shortlist, cross)
    return RerankResult(k=k, first_stage=recall_at_k(first, target, ks), reranked=recall_at_k(final, target, ks),
                        shortlist_recall=shortlist_recall(shortlist, target), pairs_scored=int(shortlist.size),
                        pairs_full=int(first.size), first_stage_seconds=round(first_seconds, 3),
                        rerank_seconds=round(rerank_seconds, 3))

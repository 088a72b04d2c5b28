"""Retrieval metrics and full cross-scoring (pure functions on score matrices, plus the scoring loop).

Text-to-image retrieval as in the paper (§5.1): every caption query ranks every candidate image;
R@K is the share of queries whose correct image is among the K best. With several correct images
per query (phrase retrieval scored with denotations), a query counts as a hit when any correct
image is in the top K.

A non-finite score (NaN, +-inf from a damaged feature or an overflow) is never a hit: the metrics rank
a non-finite positive below everything and a non-finite negative above everything, and
:func:`score_matrix` refuses to return a matrix holding one (:class:`NonFiniteScoreError` names the
caption and the image).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

__all__ = ["NonFiniteScoreError", "RetrievalResult", "check_finite_scores", "recall_at_k", "recall_at_k_multi",
           "score_matrix", "score_matrix_pairwise"]


class NonFiniteScoreError(ValueError):
    """A score matrix holds NaN or infinity: the model or its inputs are broken, and no metric of it
    would mean anything."""


def check_finite_scores(scores, *, captions=None, images=None) -> None:
    """Raise :class:`NonFiniteScoreError` naming the first non-finite (caption, image) pair and the count.

    ``captions`` / ``images`` label the rows / columns (caption texts, image ids); default: indices.

    >>> try:
    ...     check_finite_scores(np.array([[0.5, np.nan]]), captions=["a red ball"], images=["w0-1", "w0-2"])
    ... except NonFiniteScoreError as err:
    ...     print(err)
    1 of 2 scores are not finite, first: caption 'a red ball' (row 0) on image 'w0-2' (column 1) scored nan; check the feature store (features.check) and the model's weights
    """
    scores = np.asarray(scores)
    bad = ~np.isfinite(scores)
    if not bad.any():
        return
    r, c = (int(x) for x in np.argwhere(bad)[0])
    caption = repr(captions[r]) if captions is not None else f"#{r}"
    image = repr(images[c]) if images is not None else f"#{c}"
    raise NonFiniteScoreError(
        f"{int(bad.sum())} of {scores.size} scores are not finite, first: caption {caption} (row {r}) on image "
        f"{image} (column {c}) scored {scores[r, c]}; check the feature store (features.check) and the model's "
        f"weights")


def recall_at_k(scores: np.ndarray, target: np.ndarray, ks=(1, 5, 10)) -> dict[str, float]:
    """R@K in percent for queries with one correct candidate.

    Args:
        scores: (Q, I) higher = better.
        target: (Q,) index of each query's correct candidate.

    >>> s = np.array([[0.9, 0.1, 0.0], [0.2, 0.1, 0.7]])
    >>> recall_at_k(s, np.array([0, 1]), ks=(1, 2))
    {'R@1': 50.0, 'R@2': 50.0}
    """
    positives = np.zeros(scores.shape, dtype=bool)
    positives[np.arange(len(target)), target] = True
    return recall_at_k_multi(scores, positives, ks)


def recall_at_k_multi(scores: np.ndarray, positives: np.ndarray, ks=(1, 5, 10)) -> dict[str, float]:
    """R@K in percent when each query may have several correct candidates.

    ``positives`` (Q, I) bool. A query's rank is the best rank of any of its positives; ties count
    against the query (a positive tied with a negative is ranked after it).

    >>> s = np.array([[0.9, 0.1, 0.5]])
    >>> recall_at_k_multi(s, np.array([[False, True, True]]), ks=(1, 2))
    {'R@1': 0.0, 'R@2': 100.0}
    >>> recall_at_k_multi(np.full((2, 3), np.nan), np.eye(2, 3, dtype=bool), ks=(1, 2))  # never a hit
    {'R@1': 0.0, 'R@2': 0.0}
    """
    scores, positives = np.asarray(scores, dtype=np.float64), np.asarray(positives, dtype=bool)
    if scores.shape != positives.shape:
        raise ValueError(f"scores {scores.shape} and positives {positives.shape} differ in shape")
    if not positives.any(axis=1).all():
        raise ValueError("every query needs at least one correct candidate")
    finite = np.isfinite(scores)
    if not finite.all():  # a non-finite positive loses to everything, a non-finite negative beats everything
        scores = np.where(finite, scores, np.where(positives, -np.inf, np.inf))
    best_positive = np.where(positives, scores, -np.inf).max(axis=1)            # (Q,)
    better_negatives = ((scores >= best_positive[:, None]) & ~positives).sum(1)  # (Q,) rank of best positive
    return {f"R@{k}": float(100.0 * np.mean(better_negatives < k)) for k in ks}


@dataclass
class RetrievalResult:
    """Scores of every (query, image) pair and how long they took."""

    scores: np.ndarray     # (Q, I)
    seconds: float
    pairs_per_second: float


@torch.no_grad()
def score_matrix(model, regions: torch.Tensor, geometry: torch.Tensor, region_mask: torch.Tensor, programs,
                 tokenizer, *, max_pairs: int = 4096, progress: bool = False, caption_labels=None,
                 image_labels=None) -> RetrievalResult:
    """Score every caption against every image, at most ``max_pairs`` pairs per model call.

    Three paths, the same numbers (tested):

    * a dual encoder (a model with ``cross_scores(regions, geometry, region_mask, sentences)``: VSE, the CLIP
      family) encodes every image and every caption's sentence once and scores them all with one product;
    * a cross-encoder with ``score_all(regions, geometry, region_mask, programs, tokenizer, max_pairs=...,
      on_chunk=...)`` (COMPOSER, the flat model) scores the whole set itself, doing its image-only and
      text-only work once (:meth:`composer.models.composer.model.Composer.score_all`);
    * any other model with ``score_pairs``: :func:`score_matrix_pairwise`.

    Args:
        model: a :class:`composer.models.composer.model.Composer` (anything with its ``score_pairs`` signature).
        regions, geometry, region_mask: (I, R, Dr), (I, R, 5), (I, R) of the candidate images.
        programs: the C query captions as ``ConceptProgram`` objects.
        tokenizer: the model's ``TemplateTokenizer``.
        caption_labels, image_labels: names of the rows and columns (caption texts, image ids) for the
            error a non-finite score raises.
    """
    n_img, n_cap = regions.shape[0], len(programs)
    started = time.perf_counter()
    cross_scores = getattr(model, "cross_scores", None)
    score_all = getattr(model, "score_all", None)
    if callable(cross_scores):  # a dual encoder: each image and sentence encoded once
        sentences = [p.texts[p.root] for p in programs]
        out = cross_scores(regions, geometry, region_mask, sentences).float().cpu()    # (C, I)
    elif callable(score_all):
        with tqdm(desc="cross-scoring", unit="chunk", disable=not progress) as bar:
            out = score_all(regions, geometry, region_mask, list(programs), tokenizer, max_pairs=max_pairs,
                            on_chunk=lambda: bar.update(1)).float().cpu()              # (C, I)
    else:
        out = score_matrix_pairwise(model, regions, geometry, region_mask, programs, tokenizer,
                                    max_pairs=max_pairs, progress=progress)             # (C, I)
    seconds = time.perf_counter() - started
    check_finite_scores(out.numpy(), captions=caption_labels, images=image_labels)
    return RetrievalResult(out.numpy(), seconds, n_cap * n_img / max(seconds, 1e-9))


@torch.no_grad()
def score_matrix_pairwise(model, regions: torch.Tensor, geometry: torch.Tensor, region_mask: torch.Tensor,
                          programs, tokenizer, *, max_pairs: int = 4096, progress: bool = False) -> torch.Tensor:
    """(C, I) scores by ``model.score_pairs`` in chunks of at most ``max_pairs`` pairs: the generic path, and
    the reference the models' ``score_all`` is tested against.

    Captions are taken a few at a time against as many images as fit, and each caption chunk is
    collated once: its text-only work (the Predicate Transformer over its templates) runs once per
    image chunk -- once in all when all images fit in one chunk.
    """
    from composer.models.composer.program import ProgramBatch

    n_img, n_cap = regions.shape[0], len(programs)
    out = torch.empty(n_cap, n_img)
    images_per_chunk = max(1, min(n_img, max_pairs))
    captions_per_chunk = max(1, max_pairs // images_per_chunk)
    steps = math.ceil(n_cap / captions_per_chunk) * math.ceil(n_img / images_per_chunk)
    bar = tqdm(total=steps, desc="cross-scoring", unit="chunk", disable=not progress)
    device = regions.device
    for c0 in range(0, n_cap, captions_per_chunk):
        chunk = ProgramBatch.collate(programs[c0:c0 + captions_per_chunk], tokenizer)
        caps = torch.arange(chunk.num_captions, device=device)
        for i0 in range(0, n_img, images_per_chunk):
            imgs = torch.arange(i0, min(n_img, i0 + images_per_chunk), device=device)
            pair_caption = caps.repeat_interleave(len(imgs))                   # (c * i,)
            pair_image = imgs.repeat(len(caps))                                # (c * i,)
            s = model.score_pairs(regions, geometry, region_mask, chunk, pair_image, pair_caption)
            out[c0:c0 + len(caps), i0:i0 + len(imgs)] = s.view(len(caps), len(imgs)).float().cpu()
            bar.update(1)
    bar.close()
    return out

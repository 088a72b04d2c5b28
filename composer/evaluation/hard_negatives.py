"""Compositional evaluation with hard negatives: I2T, T2I and group accuracy, per type, averaged as vl_compo.

The conventions are those of vl_compo (Oh et al. 2024, §2) over CREPE-style negatives (Ma et al. 2023):

* **I2T accuracy**: an item is right when its image scores the true caption above every one of its
  negative captions (top-1 among 1 + K captions);
* **T2I accuracy**: right when the true caption scores its own image above every distractor image;
* **group accuracy**: right when both hold (Winoground's group score over an item's captions and images).

Ties count as failures, as in :mod:`composer.models.common.retrieval`: a model scoring everything alike gets 0,
not chance. Accuracies are in percent.

Evaluation sets are plain data (:func:`build_eval_set`: lists, dicts and strings, JSON as is), so
any model can be scored later: score every ``(image_id, text)`` pair of :func:`eval_pairs` with the
model's ``score_pairs`` (parse the texts into programs, gather the images' features), then hand the
scores to :func:`evaluate_pair_scores`. Nothing here needs torch.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

__all__ = ["wins", "i2t_accuracy", "t2i_accuracy", "group_accuracy", "accuracy_by_type", "recursive_average",
           "average_tree", "build_eval_set", "edit_of", "eval_pairs", "evaluate_pair_scores", "first_captions",
           "restrict_eval_set", "training_image_set", "world_hard_negative_set", "EVAL_SET_VERSION"]

EVAL_SET_VERSION = 1


# ---------------------------------------------------------------------------- metrics
def wins(positive: np.ndarray, negatives: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """Whether each positive scores strictly above all of its (real) negatives.

    Args:
        positive: (N,) score of each item's true pair.
        negatives: (N, K) scores of its negatives, padded where an item has fewer than K.
        mask: (N, K) bool, True = a real negative (default: all real). Padding is ignored, so its
            value does not matter.

    Returns:
        (N,) bool.

    >>> wins(np.array([0.9, 0.5, 0.4]), np.array([[0.1, 0.8], [0.5, 0.0], [0.3, 9.0]]),
    ...      np.array([[True, True], [True, True], [True, False]])).tolist()
    [True, False, True]
    """
    positive = np.asarray(positive, dtype=np.float64)
    negatives = np.asarray(negatives, dtype=np.float64)
    if negatives.ndim != 2 or positive.shape != negatives.shape[:1]:
        raise ValueError(f"expected positive (N,) and negatives (N, K), got {positive.shape} and {negatives.shape}")
    mask = np.ones(negatives.shape, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    if mask.shape != negatives.shape:
        raise ValueError(f"mask {mask.shape} and negatives {negatives.shape} differ in shape")
    empty = np.flatnonzero(~mask.any(axis=1))
    if len(empty):
        raise ValueError(f"items {empty[:10].tolist()} have no negative; leave them out (or score them "
                         f"elsewhere) instead of counting them as wins")
    if not np.isfinite(positive).all() or not np.isfinite(negatives[mask]).all():
        raise ValueError("scores must be finite (NaN or inf among the positive or real negative scores)")
    best_negative = np.where(mask, negatives, -np.inf).max(axis=1)  # (N,)
    return positive > best_negative


def i2t_accuracy(positive: np.ndarray, negative_captions: np.ndarray, mask: np.ndarray | None = None) -> float:
    """Percent of images whose true caption outscores all their negative captions.

    >>> i2t_accuracy(np.array([1.0, 0.0]), np.array([[0.5], [0.5]]))
    50.0
    """
    return float(100.0 * wins(positive, negative_captions, mask).mean())


def t2i_accuracy(positive: np.ndarray, distractor_images: np.ndarray, mask: np.ndarray | None = None) -> float:
    """Percent of captions whose own image outscores all their distractor images."""
    return float(100.0 * wins(positive, distractor_images, mask).mean())


def group_accuracy(positive: np.ndarray, negative_captions: np.ndarray, distractor_images: np.ndarray,
                   caption_mask: np.ndarray | None = None, image_mask: np.ndarray | None = None) -> float:
    """Percent of items right both ways: I2T and T2I (shapes as in :func:`wins`).

    >>> group_accuracy(np.array([1.0, 1.0]), np.array([[0.0], [0.0]]), np.array([[0.0], [2.0]]))
    50.0
    """
    both = wins(positive, negative_captions, caption_mask) & wins(positive, distractor_images, image_mask)
    return float(100.0 * both.mean())


def accuracy_by_type(positive: np.ndarray, negatives: np.ndarray, types: np.ndarray,
                     mask: np.ndarray | None = None) -> dict[str, float]:
    """I2T accuracy per negative type, each item compared with its negatives of that type only.

    Args:
        positive: (N,); negatives: (N, K); types: (N, K) type label of each negative; mask (N, K).

    Returns:
        type -> percent, over the items that have at least one negative of the type.

    >>> accuracy_by_type(np.array([1.0, 1.0]), np.array([[0.0, 2.0], [0.5, 0.0]]),
    ...                  np.array([["A", "B"], ["A", "A"]]))
    {'A': 100.0, 'B': 0.0}
    """
    negatives = np.asarray(negatives, dtype=np.float64)
    types = np.asarray(types)
    mask = np.ones(negatives.shape, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    if types.shape != negatives.shape:
        raise ValueError(f"types {types.shape} and negatives {negatives.shape} differ in shape")
    out = {}
    for t in sorted(set(types[mask].tolist())):
        m = mask & (types == t)
        rows = m.any(axis=1)
        out[str(t)] = float(100.0 * wins(np.asarray(positive)[rows], negatives[rows], m[rows]).mean())
    return out


def recursive_average(tree) -> float | None:
    """vl_compo's benchmark score: average sub-task scores recursively, siblings weighing equally.

    vl_compo groups the scores of a benchmark's sub-tasks by their common ancestor and averages
    each group, level by level, until one number is left. So a node's score is the plain mean of its
    children's scores, whatever the number of examples or of sub-sub-tasks under each child: in
    ``{"I2T": {"atom": 80, "swap": 40, "neg": 60}, "T2I": 50}`` I2T counts as 60 and weighs as much
    as T2I, giving 55 (a flat mean of the four leaves would give 57.5).

    Leaves are numbers; ``None`` marks a sub-task that could not be evaluated (no items) and is left
    out of its parent's mean; a node whose children are all ``None`` is ``None``.

    >>> recursive_average({"I2T": {"atom": 80, "swap": 40, "neg": 60}, "T2I": 50})
    55.0
    >>> recursive_average({"a": {"x": None}, "b": 10.0})
    10.0
    """
    if tree is None:
        return None
    if isinstance(tree, Mapping):
        if not tree:
            raise ValueError("an empty group of sub-tasks has no score; drop it or mark it None")
        scores = [s for s in (recursive_average(v) for v in tree.values()) if s is not None]
        return float(np.mean(scores)) if scores else None
    value = float(tree)
    if not math.isfinite(value):
        raise ValueError(f"sub-task score must be finite, got {tree!r}")
    return value


def average_tree(tree) -> dict[str, float | None]:
    """Every node's recursive average, keyed by its path (``"I2T/HN-ATOM"``; the root is ``""``).

    >>> average_tree({"I2T": {"a": 1, "b": 3}, "T2I": 4})
    {'': 3.0, 'I2T': 2.0, 'I2T/a': 1.0, 'I2T/b': 3.0, 'T2I': 4.0}
    """
    out: dict[str, float | None] = {}

    def visit(node, path: str) -> None:
        out[path] = recursive_average(node)
        if isinstance(node, Mapping):
            for k, v in node.items():
                visit(v, f"{path}/{k}" if path else str(k))

    visit(tree, "")
    return out


# ---------------------------------------------------------------------------- evaluation sets
def build_eval_set(negatives: Iterable, *, distractors: Mapping[tuple[str, str], Sequence[str]] | None = None,
                   positives: Iterable[tuple[str, str]] | None = None, name: str = "",
                   meta: Mapping | None = None) -> dict:
    """An evaluation set as plain data: one item per (image, true caption).

    Args:
        negatives: :class:`crg.hard_negatives.HardNegative` records (or their ``to_dict()``); each
            names its image and source caption. A negative without an image is an error.
        distractors: ``(image_id, caption) -> image ids`` of which the caption is false (T2I).
        positives: the ``(image_id, caption)`` items to include, in order; by default every
            (image, source) of ``negatives`` and ``distractors``, in order of first appearance.
        name, meta: recorded as they are.

    Returns:
        ``{"version", "name", "meta", "items": [{"id", "image_id", "positive", "negatives":
        [{"text", "type", "change"}], "distractor_images": [...]}]}``.
    """
    distractors = dict(distractors or {})
    grouped: dict[tuple[str, str], list[dict]] = {}
    order: list[tuple[str, str]] = []
    for n in negatives:
        d = n if isinstance(n, Mapping) else n.to_dict()
        if d.get("image_id") is None:
            raise ValueError(f"hard negative {d.get('text')!r} of {d.get('source')!r} names no image; "
                             f"generate it with image_id set")
        key = (str(d["image_id"]), d["source"])
        if key not in grouped:
            grouped[key] = []
            order.append(key)
        grouped[key].append({"text": d["text"], "type": d["type"], "change": d["change"]})
    for key in distractors:
        if key not in grouped:
            grouped[key] = []
            order.append(key)
    keys = order if positives is None else [(str(i), t) for i, t in positives]
    items = []
    for k, (image_id, caption) in enumerate(keys):
        items.append({"id": k, "image_id": image_id, "positive": caption,
                      "negatives": grouped.get((image_id, caption), []),
                      "distractor_images": list(distractors.get((image_id, caption), []))})
    return {"version": EVAL_SET_VERSION, "name": name, "meta": dict(meta or {}), "items": items}


def eval_pairs(eval_set: Mapping) -> list[tuple[str, str]]:
    """The distinct ``(image_id, text)`` pairs a model must score for ``eval_set``, in a fixed order."""
    _check(eval_set)
    seen: dict[tuple[str, str], None] = {}
    for item in eval_set["items"]:
        seen.setdefault((item["image_id"], item["positive"]), None)
        for n in item["negatives"]:
            seen.setdefault((item["image_id"], n["text"]), None)
        for image in item["distractor_images"]:
            seen.setdefault((image, item["positive"]), None)
    return list(seen)


def evaluate_pair_scores(eval_set: Mapping, scores) -> dict:
    """I2T (overall and per type), T2I and group accuracy from the scores of :func:`eval_pairs`.

    Args:
        eval_set: from :func:`build_eval_set`.
        scores: (P,) scores aligned with ``eval_pairs(eval_set)``, or a mapping ``(image_id, text) ->
            score``.

    Returns:
        ``{"i2t", "i2t_by_type", "i2t_by_edit", "t2i", "group", "counts", "tree", "average"}``: accuracies in
        percent (``None`` where no item qualifies; by edit: ``"HN-ATOM/replace_relation"``, each item against
        its negatives of that edit, :func:`edit_of`), item counts, the score tree ``{"I2T": {type:
        ...}, "T2I": ..., "Group": ...}`` and its :func:`recursive_average`.
    """
    pairs = eval_pairs(eval_set)
    if isinstance(scores, Mapping):
        lookup = {p: float(scores[p]) for p in pairs}
    else:
        arr = np.asarray(scores, dtype=np.float64).reshape(-1)
        if len(arr) != len(pairs):
            raise ValueError(f"got {len(arr)} scores for the {len(pairs)} pairs of eval_pairs(eval_set)")
        lookup = dict(zip(pairs, arr.tolist()))
    items = eval_set["items"]
    k = max((len(i["negatives"]) for i in items), default=0)
    m = max((len(i["distractor_images"]) for i in items), default=0)
    n = len(items)
    pos = np.array([lookup[(i["image_id"], i["positive"])] for i in items], dtype=np.float64)  # (N,)
    neg = np.zeros((n, max(k, 1)))                                                             # (N, K)
    neg_mask = np.zeros((n, max(k, 1)), dtype=bool)
    neg_type = np.full((n, max(k, 1)), "", dtype=object)
    neg_edit = np.full((n, max(k, 1)), "", dtype=object)  # "HN-ATOM/replace_relation": the type and its edit
    img = np.zeros((n, max(m, 1)))                                                             # (N, M)
    img_mask = np.zeros((n, max(m, 1)), dtype=bool)
    for r, item in enumerate(items):
        for c, neg_item in enumerate(item["negatives"]):
            neg[r, c] = lookup[(item["image_id"], neg_item["text"])]
            neg_mask[r, c] = True
            neg_type[r, c] = neg_item["type"]
            neg_edit[r, c] = f"{neg_item['type']}/{edit_of(neg_item.get('change'))}"
        for c, image in enumerate(item["distractor_images"]):
            img[r, c] = lookup[(image, item["positive"])]
            img_mask[r, c] = True
    has_neg, has_img = neg_mask.any(1), img_mask.any(1)
    both = has_neg & has_img
    i2t = i2t_accuracy(pos[has_neg], neg[has_neg], neg_mask[has_neg]) if has_neg.any() else None
    t2i = t2i_accuracy(pos[has_img], img[has_img], img_mask[has_img]) if has_img.any() else None
    group = group_accuracy(pos[both], neg[both], img[both], neg_mask[both], img_mask[both]) if both.any() else None
    by_type = accuracy_by_type(pos[has_neg], neg[has_neg], neg_type[has_neg].astype(str),
                               neg_mask[has_neg]) if has_neg.any() else {}
    by_edit = accuracy_by_type(pos[has_neg], neg[has_neg], neg_edit[has_neg].astype(str),
                               neg_mask[has_neg]) if has_neg.any() else {}
    tree = {"I2T": by_type or None, "T2I": t2i, "Group": group}
    counts = {"items": n, "with_negatives": int(has_neg.sum()), "with_distractors": int(has_img.sum()),
              "with_both": int(both.sum()), "negatives_by_type": {
                  t: int((neg_type[neg_mask] == t).sum()) for t in sorted(set(neg_type[neg_mask].tolist()))},
              "negatives_by_edit": {
                  e: int((neg_edit[neg_mask] == e).sum()) for e in sorted(set(neg_edit[neg_mask].tolist()))}}
    return {"i2t": i2t, "i2t_by_type": by_type, "i2t_by_edit": by_edit, "t2i": t2i, "group": group,
            "counts": counts, "tree": tree, "average": recursive_average(tree)}


def edit_of(change) -> str:
    """The edit a negative made (``replace_relation``, ``swap_arguments``, ...): its change's ``op``; ``?`` when
    the record has none (sets written before edits were recorded, or by hand).

    Why: one CREPE type mixes edits a model may find easy and hard. HN-ATOM replaces a colour, a shape *or a
    relation word*; only the last asks for the two objects' positions, as HN-SWAP does.

    >>> edit_of({"op": "replace_relation", "before": ["in front of"]}), edit_of(None)
    ('replace_relation', '?')
    """
    return str(change["op"]) if isinstance(change, Mapping) and change.get("op") else "?"


def restrict_eval_set(eval_set: Mapping, usable: Mapping[str, object]) -> tuple[dict, dict]:
    """``eval_set`` without the texts that have no program: items whose true caption has none are
    dropped, and so are negatives without one. Returns the new set and what was dropped.

    >>> es = {"version": 1, "name": "", "meta": {}, "items": [
    ...     {"id": 0, "image_id": "a", "positive": "p", "negatives": [{"text": "n", "type": "T", "change": {}},
    ...      {"text": "bad", "type": "T", "change": {}}], "distractor_images": ["b"]},
    ...     {"id": 1, "image_id": "b", "positive": "bad", "negatives": [], "distractor_images": []}]}
    >>> kept, dropped = restrict_eval_set(es, {"p": 1, "n": 1, "bad": None})
    >>> [i["positive"] for i in kept["items"]], [n["text"] for n in kept["items"][0]["negatives"]], dropped
    (['p'], ['n'], {'items': 1, 'negatives': 1})
    """
    items, dropped_items, dropped_negs = [], 0, 0
    for item in eval_set["items"]:
        if usable.get(item["positive"]) is None:
            dropped_items += 1
            continue
        negatives = [n for n in item["negatives"] if usable.get(n["text"]) is not None]
        dropped_negs += len(item["negatives"]) - len(negatives)
        items.append({**item, "negatives": negatives})
    return {**eval_set, "items": items}, {"items": dropped_items, "negatives": dropped_negs}


def _check(eval_set: Mapping) -> None:
    if not isinstance(eval_set, Mapping) or "items" not in eval_set:
        raise ValueError("not an evaluation set: expected a dict with 'items' (see build_eval_set)")
    if eval_set.get("version") != EVAL_SET_VERSION:
        raise ValueError(f"evaluation set version {eval_set.get('version')!r}, expected {EVAL_SET_VERSION}; "
                         f"rebuild it with build_eval_set")


def world_hard_negative_set(world_dir: str | Path, captions: Sequence[tuple[str, str]], *,
                            distractor_pool: Sequence[str] | None = None, per_type: int = 5,
                            distractor_images: int = 5, seed: int = 0, name: str = "world-hn") -> tuple[dict, dict]:
    """The world's hard-negative evaluation set for ``(image_id, caption)`` pairs, and its generation report.

    Negatives are verified false of their image (:func:`features.catalog.world_hard_negatives`);
    text-to-image distractors are drawn from ``distractor_pool`` (default: the captions' own images), so
    that a model is not asked to rank images it was trained on.
    """
    from features.catalog import world_hard_negatives

    pool = list(dict.fromkeys(distractor_pool if distractor_pool is not None else [i for i, _ in captions]))
    negatives, report, distractors = world_hard_negatives(
        world_dir, captions, images=set(pool) | {i for i, _ in captions}, per_type=per_type,
        distractor_images=distractor_images, seed=seed)
    pool_set = set(pool)
    distractors = {k: [i for i in v if i in pool_set] for k, v in distractors.items()}
    eval_set = build_eval_set(negatives, distractors=distractors, positives=list(captions), name=name,
                              meta={"world_dir": str(world_dir), "per_type": per_type, "seed": seed,
                                    "distractor_images": distractor_images})
    summary = {"captions": len(captions), "negatives": len(negatives),
               "negatives_by_type": dict(sorted(report.produced.items())),
               "captions_with": dict(sorted(report.captions_with.items())),
               "skipped": {k: dict(v) for k, v in report.skipped.items()},
               "dropped_by_checker": {k: dict(v) for k, v in report.dropped.items()},
               "with_distractors": sum(1 for v in distractors.values() if v)}
    return eval_set, summary


def first_captions(images: Sequence, n_images: int) -> list[tuple[str, str]]:
    """``(image id, first caption)`` of the first ``n_images`` of ``images`` (a corpus's, in its order) that have a
    caption."""
    return [(im.image_id, im.captions[0]) for im in images if im.captions][:n_images]


def training_image_set(world_dir: str | Path, images: Sequence, n_images: int, *, seed: int = 0) -> tuple[dict, dict]:
    """:func:`world_hard_negative_set` of the first caption of the first ``n_images`` training ``images``: one
    negative per type, no distractor images.

    Why: a model trained with structural negatives has met such negatives of these very images, so failing them
    is failing to fit, not to generalise (``benchmarks/relation_diagnostics.py``); they are also the text a blind
    pair classifier learns from (``benchmarks/world_blind_negatives.py``).
    """
    return world_hard_negative_set(world_dir, first_captions(images, n_images), per_type=1, distractor_images=0,
                                   seed=seed, name=f"world-hn-train{n_images}")

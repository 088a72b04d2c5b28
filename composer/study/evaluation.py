"""The study's evaluations that the training command does not make: sentence retrieval on a split file (the
MCD split, each compound-divergence window), the world's hard-negative set, the generalisation gap. Every
model is scored through its ``score_pairs`` (:func:`composer.models.common.retrieval.score_matrix`), so all
numbers come from one code path.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from composer.evaluation.hard_negatives import build_eval_set
from composer.evaluation.sentence_retrieval import score_sentence_retrieval
from composer.models.composer.program import ConceptProgram

__all__ = ["flat_report", "generalisation_gap", "sentence_retrieval", "world_hard_negative_set"]


def sentence_retrieval(model, tokenizer, data, *, device: str | torch.device = "cpu", max_pairs: int = 4096) -> dict:
    """Sentence-to-image R@1/5/10 of every caption of ``data`` (an :class:`composer.evaluation.eval_sets.EvalData`)
    against all its candidate images, by full cross-scoring."""
    programs = [ConceptProgram.from_graph(data.graph, c) for c in data.captions]
    return flat_report(score_sentence_retrieval(model, tokenizer, data.regions.to(device), data.geometry.to(device),
                                                data.region_mask.to(device), programs, data.caption_image,
                                                max_pairs=max_pairs))


def flat_report(report: dict) -> dict:
    """A retrieval report with its sentence R@K at the top level, where the study's tables read them."""
    report = dict(report)
    return {**report.pop("sentence"), **report}


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


def generalisation_gap(in_domain: dict, systematic: dict) -> dict:
    """In-domain minus systematic recall, per metric both have (single-positive R@K, any-true R@K).

    >>> generalisation_gap({"R@1": 20.0, "sentence_any_true": {"R@1": 30.0}},
    ...                    {"R@1": 12.5, "sentence_any_true": {"R@1": 25.0}})
    {'R@1': 7.5, 'any_true_R@1': 5.0}
    """
    gap = {k: round(in_domain[k] - systematic[k], 3) for k in in_domain
           if k.startswith("R@") and isinstance(systematic.get(k), (int, float))}
    a, b = in_domain.get("sentence_any_true") or {}, systematic.get("sentence_any_true") or {}
    gap.update({f"any_true_{k}": round(a[k] - b[k], 3) for k in a if k in b})
    return gap

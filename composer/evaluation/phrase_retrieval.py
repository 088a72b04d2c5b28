"""Phrase-to-image retrieval (Zhang et al. 2021, §5.3 and Table 5).

The paper samples 5 non-sentence concepts of each test caption from the CRG and uses each as a
query; the image of the caption it came from is the correct answer ("single-positive"). A phrase
such as "a red ball" is usually true of many other candidates too, so that protocol counts a model
wrong whenever it ranks another image the phrase is equally true of first. We also report
**multi-positive** R@K, where every candidate the phrase is true of is correct:

* real corpora: the CRG's denotation (the images with a caption containing the phrase). Captions
  mention only some of what an image shows, so these denotations are *subsets* of the truth, and
  multi-positive R@K with them is a **lower bound** of R@K against the true denotations (an image
  the phrase is true of but no caption mentions still counts as a wrong answer);
* the generated world: the exact denotation from its scene graphs (any
  :class:`composer.evaluation.truth.ExactTruth`), falling back to the CRG's for the phrases outside the world's language (counted in the output).

Queries are the phrase's own sub-tree of the caption's composition (:meth:`ConceptProgram.subprogram`),
so COMPOSER composes a phrase exactly as it does inside the sentence, and scored by the same
:func:`composer.models.common.retrieval.score_matrix` path as sentences. Phrases sampled from several captions are
scored once.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from composer.models.composer.program import ConceptProgram
from composer.models.common.retrieval import recall_at_k, recall_at_k_multi, score_matrix
from crg.extract import PHRASE

__all__ = ["PhraseQueries", "phrase_program", "sample_phrase_queries", "crg_positives", "exact_positives",
           "ExactPositives", "phrase_recall", "evaluate_phrase_retrieval"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PhraseQueries:
    """Qp phrase queries over I candidate images, scored as U distinct phrase programs (U <= Qp).

    Attributes:
        captions: (Qp,) graph caption each phrase was sampled from.
        concepts: (Qp,) the phrase's CRG concept id.
        source_image: (Qp,) candidate index of that caption's image: the single positive.
        programs: (U,) distinct phrase programs, each rooted at its phrase.
        program_index: (Qp,) row of ``programs`` of each query.
        image_ids: (I,) the candidate images.
    """

    captions: np.ndarray
    concepts: np.ndarray
    source_image: np.ndarray
    programs: list[ConceptProgram]
    program_index: np.ndarray
    image_ids: list[str]

    @property
    def num_queries(self) -> int:
        return len(self.concepts)


def phrase_program(graph, caption: int, concept: int) -> ConceptProgram:
    """The composition of concept ``concept`` as it occurs in caption ``caption``, rooted at the concept."""
    program = ConceptProgram.from_graph(graph, caption)
    try:
        node = program.concept_ids.index(int(concept))
    except ValueError:
        raise ValueError(f"concept {concept} ({graph.concept_texts[concept]!r}) does not occur in caption "
                         f"{caption} ({graph.caption_texts[caption]!r})") from None
    return program.subprogram(node)


def sample_phrase_queries(graph, image_ids: list[str], *, captions=None, per_caption: int = 5,
                          seed: int = 0) -> PhraseQueries:
    """Sample up to ``per_caption`` phrase concepts (neither the sentence nor a primitive) of each caption.

    Args:
        graph: the split's :class:`crg.graph.ConceptGraph`.
        image_ids: (I,) candidate images; every sampled caption's image must be one of them.
        captions: graph caption indices to sample from; default: every caption of a candidate image.
        per_caption: the paper's 5; a caption with fewer phrases gives all of them.
    """
    position = {im: k for k, im in enumerate(image_ids)}
    if len(position) != len(image_ids):
        raise ValueError("image_ids holds duplicates")
    if captions is None:
        captions = [c for c in range(graph.num_captions) if graph.image_ids[graph.caption_image[c]] in position]
    captions = [int(c) for c in captions]
    for c in captions:
        image = graph.image_ids[graph.caption_image[c]]
        if image not in position:
            raise ValueError(f"caption {c} ({graph.caption_texts[c]!r}) belongs to image {image!r}, which is not "
                             f"among the {len(image_ids)} candidate images")
    pairs = graph.sample_phrase_queries(per_caption, seed=seed, captions=captions, kinds=(PHRASE,))
    rows: dict[ConceptProgram, int] = {}
    programs: list[ConceptProgram] = []
    program_index = []
    for cap, concept in pairs:
        prog = phrase_program(graph, cap, concept)
        if prog not in rows:
            rows[prog] = len(programs)
            programs.append(prog)
        program_index.append(rows[prog])
    return PhraseQueries(
        captions=np.asarray([c for c, _ in pairs], dtype=np.int64),
        concepts=np.asarray([k for _, k in pairs], dtype=np.int64),
        source_image=np.asarray([position[graph.image_ids[graph.caption_image[c]]] for c, _ in pairs],
                                dtype=np.int64),
        programs=programs, program_index=np.asarray(program_index, dtype=np.int64), image_ids=list(image_ids))


def crg_positives(graph, queries: PhraseQueries) -> np.ndarray:
    """(Qp, I) bool: the candidates in each phrase's CRG denotation (a lower bound of its true denotation)."""
    position = {im: k for k, im in enumerate(queries.image_ids)}
    out = np.zeros((queries.num_queries, len(queries.image_ids)), dtype=bool)
    for q, concept in enumerate(queries.concepts):
        cols = [position[graph.image_ids[i]] for i in graph.denotation_indices(int(concept))
                if graph.image_ids[i] in position]
        out[q, cols] = True
    out[np.arange(queries.num_queries), queries.source_image] = True  # the caption's own image, by construction
    return out


@dataclass
class ExactPositives:
    """Positives from exact truth, with what had to fall back to the CRG.

    Attributes:
        positives: (Qp, I) bool.
        exact: (Qp,) bool, True where the phrase has an exact denotation (else CRG denotation).
        crg_outside_truth: queries whose CRG denotation holds an image the truth says is false: a
            caption the world's semantics disagrees with, which should not happen (0 expected).
    """

    positives: np.ndarray
    exact: np.ndarray
    crg_outside_truth: int


def exact_positives(truth, graph, queries: PhraseQueries) -> ExactPositives:
    """(Qp, I) positives from a dataset's exact truth (:class:`composer.evaluation.truth.ExactTruth`; CRG
    denotations where it has none).

    The CRG denotation is kept inside the exact one (a union), so a disagreement never drops the
    caption's own image; disagreements are counted in ``crg_outside_truth``.
    """
    crg = crg_positives(graph, queries)
    out = crg.copy()
    exact = np.zeros(queries.num_queries, dtype=bool)
    missing = [im for im in queries.image_ids if not truth.has_image(im)]
    if missing:
        raise ValueError(f"{len(missing)} candidate images are unknown to the exact truth (first: "
                         f"{missing[:3]}); pass the world the features come from")
    disagree = 0
    rows: dict[int, np.ndarray | None] = {}
    for q, concept in enumerate(queries.concepts):
        concept = int(concept)
        if concept not in rows:  # evaluated on the candidates only: a full denotation scans the whole world
            rows[concept] = truth.holds_among(graph.concept_texts[concept], queries.image_ids)
        row = rows[concept]
        if row is None:
            continue
        exact[q] = True
        if (crg[q] & ~row).any():
            disagree += 1
            log.warning("phrase %r: the CRG denotation holds images the world's truth says it is false of",
                        graph.concept_texts[concept])
        out[q] |= row
    return ExactPositives(out, exact, disagree)


def phrase_recall(phrase_scores: np.ndarray, queries: PhraseQueries, positives: np.ndarray | None = None,
                  ks=(1, 5, 10)) -> dict:
    """Single-positive (and, given ``positives``, multi-positive) R@K of the phrase queries.

    Args:
        phrase_scores: (U, I) scores of each distinct phrase program against each candidate.
        positives: (Qp, I) bool correct candidates of each query; must include its source image.
    """
    if phrase_scores.shape != (len(queries.programs), len(queries.image_ids)):
        raise ValueError(f"phrase_scores {phrase_scores.shape} should be (distinct phrases, images) = "
                         f"{(len(queries.programs), len(queries.image_ids))}")
    scores = phrase_scores[queries.program_index]                              # (Qp, I)
    n_img = len(queries.image_ids)
    out = {"single": recall_at_k(scores, queries.source_image, ks), "num_queries": queries.num_queries,
           "num_phrases": len(queries.programs), "num_images": n_img,
           "chance_R@1": round(100.0 / n_img, 3)}
    if positives is not None:
        if not positives[np.arange(queries.num_queries), queries.source_image].all():
            raise ValueError("every query's source image must be among its positives")
        counts = positives.sum(1)
        out["multi"] = recall_at_k_multi(scores, positives, ks)
        out["mean_positives"] = round(float(counts.mean()), 3)
        out["multi_chance_R@1"] = round(float(100.0 * np.mean(counts / n_img)), 3)
    return out


def evaluate_phrase_retrieval(model, regions, geometry, region_mask, tokenizer, graph, image_ids: list[str], *,
                              truth=None, captions=None, per_caption: int = 5, seed: int = 0,
                              max_pairs: int = 4096, ks=(1, 5, 10), progress: bool = False) -> dict:
    """Phrase-to-image R@K, single- and multi-positive, as a JSON-serialisable dict.

    Args:
        model: anything with :meth:`composer.models.composer.model.Composer.score_pairs`'s signature (in eval mode).
        regions, geometry, region_mask: (I, R, Dr), (I, R, 5), (I, R) of the candidates ``image_ids``.
        graph: the candidates' CRG; ``truth``: a ``WorldTruth`` for exact multi-positive denotations.
    """
    queries = sample_phrase_queries(graph, image_ids, captions=captions, per_caption=per_caption, seed=seed)
    if queries.num_queries == 0:
        raise ValueError(f"no phrase concept in the {len(image_ids)} images' captions: nothing to retrieve")
    if truth is not None:
        ex = exact_positives(truth, graph, queries)
        positives = ex.positives
        extra = {"multi_positives": "exact denotations from the world's scene graphs (CRG denotations for "
                                    "phrases outside the world's language)",
                 "exact_fraction": round(float(ex.exact.mean()), 4), "crg_outside_truth": ex.crg_outside_truth}
    else:
        positives = crg_positives(graph, queries)
        extra = {"multi_positives": "CRG denotations: images with a caption containing the phrase, a subset of "
                                    "the true denotation, so multi-positive R@K is a lower bound"}
    res = score_matrix(model, regions, geometry, region_mask, queries.programs, tokenizer, max_pairs=max_pairs,
                       progress=progress)
    out = phrase_recall(res.scores, queries, positives, ks)
    if truth is not None:  # the CRG's lower bound beside the exact number: how much captions leave unsaid
        crg = phrase_recall(res.scores, queries, crg_positives(graph, queries), ks)
        extra.update({"multi_crg": crg["multi"], "mean_positives_crg": crg["mean_positives"]})
    out.update(extra)
    out.update({"per_caption": per_caption, "seed": seed, "seconds": round(res.seconds, 2),
                "pairs_per_second": round(res.pairs_per_second, 1)})
    return out

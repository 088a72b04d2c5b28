"""Sentence-to-image retrieval: one report for every model, and the evaluation set it is computed on. No Lightning.

Every caption of an evaluation set ranks every candidate image (the paper's 1,000 images x 5 captions,
§5.1). However the (C, I) score matrix was made -- full cross-scoring with ``score_pairs``
(:func:`score_sentence_retrieval`) or a dual encoder's one matrix product (the CLIP family) -- it becomes
the same report by :func:`sentence_retrieval_report`::

    {"sentence": {"R@1": ..., "R@5": ..., "R@10": ...}, "num_images": I, "num_captions": C,
     "pairs_per_second": C * I / seconds, "seconds": ..., "chance_R@1": 100 / I}

which training writes as ``results.json``'s ``val`` / ``test`` and the study reads. Where the dataset knows
its exact truth (the generated world), the set carries it and the report adds

* ``sentence_any_true``: R@K when *any* image the caption is true of counts as a hit (multi-positive),
  next to the paper's single-positive protocol, which counts only the image the caption was written for;
* ``ceilings``: what oracles reach on the same set under both protocols (:func:`ceiling_reports`):
  exact truth, a bag of bound objects, a bag of words -- so every model's numbers are printed beside
  what the set can measure (docs/world.md).

Every report also gives ``sentence_by_length``, R@1 within caption-length buckets, and where the set knows which
captions occur verbatim in training, ``unseen_in_training``: R@1 on the others
(:mod:`composer.evaluation.caption_subsets`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from composer.evaluation.caption_subsets import caption_length, own_image_ranks, recall_by_length, recall_on_subset
from composer.models.common.retrieval import recall_at_k, recall_at_k_multi, score_matrix
from composer.models.composer.program import ConceptProgram

__all__ = ["SentenceRetrievalSet", "ceiling_reports", "flat_report", "format_retrieval_table", "generalisation_gap",
           "score_sentence_retrieval", "sentence_retrieval", "sentence_retrieval_report"]


@dataclass
class SentenceRetrievalSet:
    """The queries and candidates of one sentence-retrieval evaluation: every caption against every image.

    Attributes:
        name: what the set is (``"val"``, ``"test"``), for logs and errors.
        image_ids: (I,) the candidate images.
        programs: (C,) each caption's composition program (:class:`composer.models.composer.program.ConceptProgram`).
        caption_image: (C,) int, index into ``image_ids`` of each caption's own image.
        read_regions: returns the candidates' ``(regions (I, R, Dr), geometry (I, R, 5), region_mask (I, R))``
            as CPU tensors (mask True = a real region). Called only where the set is scored, so a set can
            be handed to every process of a distributed run while only one reads the features.
        positives: (C, I) bool, whether each caption is true of each image (exact truth), or None where the
            dataset knows only which caption was written for which image.
        ceilings: the oracles' reports on this set (:func:`ceiling_reports`), or None.
        unseen_in_training: (C,) bool, whether each caption differs from every training caption
            (:func:`composer.evaluation.caption_subsets.unseen_in_training`), or None where not known.
    """

    name: str
    image_ids: list[str]
    programs: list
    caption_image: np.ndarray
    read_regions: Callable[[], tuple[torch.Tensor, torch.Tensor, torch.Tensor]]
    positives: np.ndarray | None = None
    ceilings: dict | None = None
    unseen_in_training: np.ndarray | None = None

    def __post_init__(self):
        self.caption_image = np.asarray(self.caption_image)
        if self.caption_image.shape != (len(self.programs),):
            raise ValueError(f"{self.name}: caption_image has shape {self.caption_image.shape} for "
                             f"{len(self.programs)} captions; give one image index per caption")
        if self.positives is not None:
            self.positives = np.asarray(self.positives, dtype=bool)
            c, i = len(self.programs), len(self.image_ids)
            if self.positives.shape != (c, i):
                raise ValueError(f"{self.name}: positives has shape {self.positives.shape}, not ({c}, {i})")
            own = self.positives[np.arange(c), self.caption_image]
            if not own.all():  # the truth and the corpus disagree: a wrong store, truth or caption order
                bad = int(np.flatnonzero(~own)[0])
                raise ValueError(f"{self.name}: caption {bad} ({self.texts[bad]!r}) is false of its own image "
                                 f"{self.image_ids[self.caption_image[bad]]} by the dataset's exact truth")
        if self.unseen_in_training is not None:
            self.unseen_in_training = np.asarray(self.unseen_in_training, dtype=bool)
            if self.unseen_in_training.shape != (len(self.programs),):
                raise ValueError(f"{self.name}: unseen_in_training has shape {self.unseen_in_training.shape} for "
                                 f"{len(self.programs)} captions")

    def report(self, scores, *, seconds: float, ks: Sequence[int] = (1, 5, 10)) -> dict:
        """The sentence-retrieval report of ``scores`` (C, I) on this set, with the any-true protocol and the
        ceilings where the set has them."""
        out = sentence_retrieval_report(scores, self.caption_image, seconds=seconds, ks=ks)
        if isinstance(scores, torch.Tensor):
            scores = scores.detach().float().cpu().numpy()
        if self.positives is not None:
            out["sentence_any_true"] = recall_at_k_multi(np.asarray(scores), self.positives, ks)
        if self.ceilings is not None:
            out["ceilings"] = self.ceilings
        ranks = own_image_ranks(scores, self.caption_image)
        out["sentence_by_length"] = recall_by_length(ranks, [caption_length(t) for t in self.texts])
        if self.unseen_in_training is not None:
            out["unseen_in_training"] = recall_on_subset(ranks, self.unseen_in_training)
        return out

    @property
    def texts(self) -> list[str]:
        """(C,) each caption's sentence (its program's root)."""
        return [p.texts[p.root] for p in self.programs]

    def __len__(self) -> int:
        return len(self.programs)

    def to(self, device) -> SentenceRetrievalSet:
        """The set itself: it holds nothing on a device (the regions are read where it is scored). This is
        what lets a training loop that moves each batch with ``.to(device)`` (Lightning's) pass it whole."""
        return self


def sentence_retrieval_report(scores, caption_image, *, seconds: float, ks: Sequence[int] = (1, 5, 10)) -> dict:
    """The sentence-retrieval report (module docstring) of a score matrix.

    Args:
        scores: (C, I) score of each caption on each candidate image, higher = better (numpy or a tensor).
        caption_image: (C,) index of each caption's own image.
        seconds: how long the scores took (``pairs_per_second`` is C * I / seconds).
        ks: the recall cut-offs.

    >>> s = np.array([[0.9, 0.1, 0.0], [0.2, 0.1, 0.7], [0.0, 1.0, 0.5], [0.3, 0.2, 0.1]])
    >>> sentence_retrieval_report(s, [0, 1, 1, 2], seconds=2.0, ks=(1, 2))
    {'sentence': {'R@1': 50.0, 'R@2': 50.0}, 'num_images': 3, 'num_captions': 4, 'pairs_per_second': 6.0, 'seconds': 2.0, 'chance_R@1': 33.333}
    """
    if isinstance(scores, torch.Tensor):
        scores = scores.detach().float().cpu().numpy()
    scores, caption_image = np.asarray(scores), np.asarray(caption_image)
    if scores.ndim != 2 or caption_image.shape != (scores.shape[0],):
        raise ValueError(f"scores must be (C, I) and caption_image (C,); got {scores.shape} and {caption_image.shape}")
    n_cap, n_img = scores.shape
    if n_img == 0 or (n_cap and not (0 <= caption_image.min() and caption_image.max() < n_img)):
        raise ValueError(f"caption_image must index the {n_img} candidate images; got values in "
                         f"[{caption_image.min() if n_cap else '-'}, {caption_image.max() if n_cap else '-'}]")
    return {"sentence": recall_at_k(scores, caption_image, ks), "num_images": n_img, "num_captions": n_cap,
            "pairs_per_second": round(n_cap * n_img / max(seconds, 1e-9), 1), "seconds": round(seconds, 2),
            "chance_R@1": round(100.0 / n_img, 3)}


def ceiling_reports(oracle_scores: dict[str, np.ndarray], caption_image, positives: np.ndarray | None = None, *,
                    ks: Sequence[int] = (1, 5, 10), tie_breaks: int = 5) -> dict:
    """What each oracle reaches on a set: ``{oracle: {"sentence": R@K, "sentence_any_true": R@K}}``.

    An oracle's scores tie often (every image a caption is true of scores 1), so ties are broken at random,
    ``tie_breaks`` times (seeds 0, 1, ...), and R@K is the mean over the draws (one number per protocol,
    rounded to 0.1; the spread over draws is about 1-2 R@1 on 100 images, docs/world.md).

    Args:
        oracle_scores: oracle name -> (C, I) scores without tie-breaking, higher = more true.
        caption_image: (C,) each caption's own image.
        positives: (C, I) bool exact truth, for the any-true protocol; None to skip it.

    >>> s = {"blind": np.ones((2, 3))}            # an oracle that cannot tell the images apart
    >>> ceiling_reports(s, [0, 1], tie_breaks=100, ks=(1,))["blind"]["sentence"]["R@1"]  # about 1/3
    32.5
    """
    caption_image = np.asarray(caption_image)
    out = {}
    for name, matrix in oracle_scores.items():
        matrix = np.asarray(matrix, dtype=np.float64)
        single, any_true = [], []
        for seed in range(tie_breaks):  # below the smallest step between two oracle scores
            noisy = matrix + 1e-6 * np.random.default_rng(seed).random(matrix.shape)
            single.append(recall_at_k(noisy, caption_image, ks))
            if positives is not None:
                any_true.append(recall_at_k_multi(noisy, positives, ks))
        out[name] = {"sentence": _mean_recalls(single)}
        if positives is not None:
            out[name]["sentence_any_true"] = _mean_recalls(any_true)
    return out


def _mean_recalls(reports: list[dict]) -> dict:
    return {k: round(float(np.mean([r[k] for r in reports])), 1) for k in reports[0]}


@torch.no_grad()
def score_sentence_retrieval(model, tokenizer, regions: torch.Tensor, geometry: torch.Tensor,
                             region_mask: torch.Tensor, programs: Sequence, caption_image, *, max_pairs: int = 4096,
                             progress: bool = False, caption_labels=None, image_labels=None) -> dict:
    """Score every caption against every image with ``model.score_pairs`` (:func:`composer.models.common.retrieval.score_matrix`)
    and report (:func:`sentence_retrieval_report`). The model is scored in eval mode and left in its mode.

    Args:
        model: anything with :meth:`composer.models.composer.model.Composer.score_pairs`'s signature.
        tokenizer: the model's ``TemplateTokenizer``.
        regions, geometry, region_mask: (I, R, Dr), (I, R, 5), (I, R) bool (True = real region), on the
            model's device.
        programs: the C query captions as ``ConceptProgram`` objects.
        caption_image: (C,) index of each caption's own image.
        max_pairs: pairs scored per forward pass.
        caption_labels, image_labels: names of the rows and columns for the error a non-finite score raises.
    """
    was_training = model.training
    model.eval()
    try:
        res = score_matrix(model, regions, geometry, region_mask, list(programs), tokenizer, max_pairs=max_pairs,
                           progress=progress, caption_labels=caption_labels, image_labels=image_labels)
    finally:
        model.train(was_training)
    return sentence_retrieval_report(res.scores, caption_image, seconds=res.seconds)



def sentence_retrieval(model, tokenizer, data, *, device: str | torch.device = "cpu", max_pairs: int = 4096) -> dict:
    """Sentence-to-image R@1/5/10 of every caption of ``data`` (an :class:`composer.evaluation.eval_sets.EvalData`:
    a split file such as the MCD split or a compound-divergence window) against all its candidate images, by full
    cross-scoring, as :func:`flat_report`."""
    programs = [ConceptProgram.from_graph(data.graph, c) for c in data.captions]
    return flat_report(score_sentence_retrieval(model, tokenizer, data.regions.to(device), data.geometry.to(device),
                                                data.region_mask.to(device), programs, data.caption_image,
                                                max_pairs=max_pairs))


def flat_report(report: dict) -> dict:
    """A retrieval report with its sentence R@K at the top level, where the study's tables read them."""
    report = dict(report)
    return {**report.pop("sentence"), **report}


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

_SET_LABELS = {"test": "test (in-domain)", "systematic": "systematic", "productivity": "productivity"}
_ORACLE_ORDER = ("exact", "bound_objects", "bag_of_words")  # the most structure first


def format_retrieval_table(reports: dict[str, dict]) -> str:
    """Reports of several sets side by side, as a user wants to see them first: R@1/5/10, any-true R@1 and
    the oracles' R@1 ceilings per set, then the generalisation gap (in-domain minus systematic R@1).

    >>> r = {"sentence": {"R@1": 20.0, "R@5": 50.0, "R@10": 70.0}, "num_images": 100, "num_captions": 500}
    >>> print(format_retrieval_table({"test": r, "systematic": {**r, "sentence": {"R@1": 12.5, "R@5": 40.0,
    ...                                                                          "R@10": 60.0}}}))
    set                images  captions   R@1   R@5  R@10
    test (in-domain)      100       500  20.0  50.0  70.0
    systematic            100       500  12.5  40.0  60.0
    generalisation gap (in-domain - systematic R@1): 7.5

    Where the reports have ceilings, the table adds them and the gap relative to each set's exact-truth ceiling
    (a set of distinctive captions is easier for every model, an oracle included).
    """
    reports = {k: v for k, v in reports.items() if v}
    if not reports:
        return ""
    extra = any("sentence_any_true" in r for r in reports.values())
    found = {o for r in reports.values() for o in r.get("ceilings", {})}
    oracles = [o for o in _ORACLE_ORDER if o in found] + sorted(found - set(_ORACLE_ORDER))
    head = f"{'set':<18} {'images':>6} {'captions':>9} {'R@1':>5} {'R@5':>5} {'R@10':>5}"
    if extra:
        head += f" {'any-true R@1':>12}"
    if oracles:
        head += "  R@1 ceilings: " + " / ".join(oracles) + " (single-positive, any-true)"
    lines = [head]
    for name, r in reports.items():
        rec = r["sentence"]
        line = (f"{_SET_LABELS.get(name, name):<18} {r.get('num_images', ''):>6} {r.get('num_captions', ''):>9} "
                f"{rec['R@1']:5.1f} {rec['R@5']:5.1f} {rec['R@10']:5.1f}")
        if extra:
            any_true = r.get("sentence_any_true", {}).get("R@1")
            line += f" {'' if any_true is None else format(any_true, '.1f'):>12}"
        if oracles:
            cells = []
            for o in oracles:
                c = r.get("ceilings", {}).get(o, {})
                single, anyt = c.get("sentence", {}).get("R@1"), c.get("sentence_any_true", {}).get("R@1")
                cells.append("-" if single is None else f"{single:.1f}" + ("" if anyt is None else f", {anyt:.1f}"))
            line += "  " + " / ".join(cells)
        lines.append(line)
    for name, r in reports.items():  # Winoground-style minimal pairs: chance is 25 / 25 / 16.7, ties fail
        t = r.get("twins")
        if t:
            kinds = ", ".join(f"{k} {t[k]['group']:.1f}" for k in ("relation", "binding") if t.get(k))
            lines.append(f"twins, {_SET_LABELS.get(name, name)}: text {t['text']:.1f} / image {t['image']:.1f} / group "
                         f"{t['group']:.1f} ({t['groups']} groups; group by kind: {kinds})")
            inter = t.get("interaction")
            if inter:  # a 0 above: blind to the difference (same caption wins on both images) or reading it backwards
                by_kind = ", ".join(f"{k} {_fmt(inter[k]['image_dependence'], '.2f')}"
                                    for k in ("relation", "binding") if inter.get(k))
                lines.append(f"  image dependence of the caption preference {_fmt(inter['image_dependence'], '.2f')} "
                             f"({by_kind}); ties {inter['tie']:.1f}%, same caption on both images "
                             f"{inter['same_caption']:.1f}%, wrong way {inter['wrong_way']:.1f}%")
    if "test" in reports and "systematic" in reports:
        test, systematic = reports["test"], reports["systematic"]
        gap = test["sentence"]["R@1"] - systematic["sentence"]["R@1"]
        lines.append(f"generalisation gap (in-domain - systematic R@1): {gap:.1f}")
        shares = [_share_of_exact(r) for r in (test, systematic)]
        if None not in shares:  # the sets' ceilings differ: compare what each model reaches of its set's ceiling
            lines.append(f"  relative to each set's exact-truth ceiling: {shares[0]:.1f}% - {shares[1]:.1f}% = "
                         f"{shares[0] - shares[1]:.1f} points")
    lines += _subset_lines(reports)
    return "\n".join(lines)


def _fmt(value, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _subset_lines(reports: dict[str, dict]) -> list[str]:
    """R@1 by caption length per set (and the gap per length), and in-domain R@1 on captions unseen in training.

    >>> b = lambda r1, r2: {"1-6": {"R@1": r1, "num_captions": 10}, "7-9": {"R@1": r2, "num_captions": 4}}
    >>> rep = lambda by, **kw: {"sentence": {"R@1": 0.0}, "sentence_by_length": by, **kw}
    >>> print("\\n".join(_subset_lines({"test": rep(b(20.0, 10.0), unseen_in_training={"R@1": 15.0,
    ...     "num_captions": 12}), "systematic": rep(b(10.0, None))})))
    R@1 by caption length (words; captions):        1-6        7-9
      test (in-domain)                        20.0 (10)   10.0 (4)
      systematic                              10.0 (10)      - (4)
      gap (in-domain - systematic)                 10.0          -
    in-domain R@1 on the 12 captions not seen verbatim in training: 15.0
    """
    with_lengths = {k: r["sentence_by_length"] for k, r in reports.items() if r.get("sentence_by_length")}
    lines = []
    if with_lengths:
        labels = list(next(iter(with_lengths.values())))
        lines.append(f"{'R@1 by caption length (words; captions):':<40}" + "".join(f"{b:>11}" for b in labels))

        def cell(c):
            return ("    -" if c["R@1"] is None else f"{c['R@1']:5.1f}") + f" ({c['num_captions']})"

        for name, by in with_lengths.items():
            lines.append(f"  {_SET_LABELS.get(name, name):<38}" + "".join(f"{cell(by[b]):>11}" for b in labels))
        if "test" in with_lengths and "systematic" in with_lengths:
            t, s = with_lengths["test"], with_lengths["systematic"]
            gaps = ["-" if t[b]["R@1"] is None or s[b]["R@1"] is None else f"{t[b]['R@1'] - s[b]['R@1']:.1f}"
                    for b in labels]
            lines.append(f"  {'gap (in-domain - systematic)':<38}" + "".join(f"{g:>11}" for g in gaps))
    unseen = reports.get("test", {}).get("unseen_in_training")
    if unseen and unseen["R@1"] is not None:
        lines.append(f"in-domain R@1 on the {unseen['num_captions']} captions not seen verbatim in training: "
                     f"{unseen['R@1']:.1f}")
    return lines


def _share_of_exact(report: dict) -> float | None:
    """R@1 as a percentage of the exact-truth oracle's R@1 on the same set (single-positive protocol)."""
    exact = report.get("ceilings", {}).get("exact", {}).get("sentence", {}).get("R@1")
    return None if not exact else 100.0 * report["sentence"]["R@1"] / exact

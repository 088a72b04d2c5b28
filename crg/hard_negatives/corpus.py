"""Hard negatives of a whole corpus, with a report of what was made and, per type, why captions gave none.

The report is what tells a probe set's coverage: a type that most captions cannot form (HN-SWAP
needs a predicate with two arguments of one kind) is counted with its reasons instead of vanishing.
With ``HardNegativeConfig.refinement`` the negatives are selected against blind text scorers over
the whole corpus (:mod:`crg.hard_negatives.refine`), and the report says what the selection kept.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field

from crg.hard_negatives.generators import caption_candidates, caption_hard_negatives
from crg.hard_negatives.parsed_caption import ParsedCaption
from crg.hard_negatives.records import CaptionNegatives, HardNegative, HardNegativeConfig
from crg.hard_negatives.refine import BlindScorer, CandidateGroup, ensemble_scores, select_negatives
from crg.hard_negatives.vocabulary import AtomVocabulary

__all__ = ["GenerationReport", "corpus_hard_negatives"]


@dataclass
class GenerationReport:
    """Counts over a corpus: negatives per type, captions covered per type, skips per type and reason.

    ``refinement`` (refined runs only): the scorers, the settings and, per type, what the selection
    saw and kept (:meth:`crg.hard_negatives.refine.TypeSelection.as_dict`: counts, and each scorer's
    accuracy in % over all candidates, over each caption's first ``per_type`` and over the kept).
    """

    num_captions: int = 0
    produced: dict[str, int] = field(default_factory=dict)
    captions_with: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, dict[str, int]] = field(default_factory=dict)
    refinement: dict | None = None
    dropped_ungrammatical: dict[str, int] = field(default_factory=dict)

    def add(self, result: CaptionNegatives) -> None:
        self.num_captions += 1
        types = Counter(n.type for n in result.negatives)
        for t, n in types.items():
            self.produced[t] = self.produced.get(t, 0) + n
            self.captions_with[t] = self.captions_with.get(t, 0) + 1
        for t, reason in result.skipped.items():
            self.skip(t, reason)
        for t, n in getattr(result, "ungrammatical", {}).items():  # the world's negatives have none
            self.dropped_ungrammatical[t] = self.dropped_ungrammatical.get(t, 0) + n

    def skip(self, hn_type: str, reason: str) -> None:
        bucket = self.skipped.setdefault(hn_type, {})
        bucket[reason] = bucket.get(reason, 0) + 1

    def per_thousand(self) -> dict[str, float]:
        """Negatives produced per 1,000 captions, by type."""
        n = max(self.num_captions, 1)
        return {t: round(1000.0 * c / n, 1) for t, c in sorted(self.produced.items())}

    def as_dict(self) -> dict:
        d = asdict(self)
        if d["refinement"] is None:  # plain runs: the same dict as before refinement existed
            del d["refinement"]
        d["per_thousand_captions"] = self.per_thousand()
        return d


def corpus_hard_negatives(captions: Iterable[tuple[str | None, ParsedCaption]], *,
                          vocabulary: AtomVocabulary | None = None,
                          config: HardNegativeConfig = HardNegativeConfig(),
                          scorers: Sequence[BlindScorer] = ()) -> tuple[list[HardNegative], GenerationReport]:
    """Hard negatives of a corpus of ``(image_id, parsed caption)`` pairs.

    The vocabulary is built from the same captions unless given; the words of all captions of an
    image are kept from being its captions' foils. With ``config.refinement``, ``scorers`` (e.g.
    ``[LanguageModelScorer(TrigramLM.fit(train_captions)), GrammarScorer()]``) decide which
    candidates are kept; they are unused otherwise. Negatives come in caption order, then type order.
    """
    captions = list(captions)
    if vocabulary is None:
        vocabulary = AtomVocabulary.from_parsed(p for _, p in captions)
    image_words: dict[str | None, set[str]] = {}
    for image_id, p in captions:
        image_words.setdefault(image_id, set()).update(p.words())
    report, out = GenerationReport(), []
    if config.refinement is None:
        for image_id, p in captions:
            result = caption_hard_negatives(p, vocabulary=vocabulary, config=config, image_id=image_id,
                                            image_words=image_words[image_id])
            report.add(result)
            out.extend(result.negatives)
        return out, report
    if not scorers:
        raise ValueError("config.refinement is set but no scorers were given: pass scorers=[LanguageModelScorer("
                         "TrigramLM.fit(train_captions)), GrammarScorer()] (crg.hard_negatives.refine), or set "
                         "refinement=None for the plain generator")
    names = [sc.name for sc in scorers]
    if len(set(names)) != len(names):
        raise ValueError(f"scorer names must differ, got {names}")
    cache: dict = {}

    def scores(text: str, tagged) -> tuple[float, ...]:
        key = (text, tuple(tagged))
        if key not in cache:
            cache[key] = ensemble_scores(scorers, text, tagged).scores
        return cache[key]

    ref = config.refinement
    per_caption, groups, where = [], [], []
    for ci, (image_id, p) in enumerate(captions):
        result = caption_candidates(p, vocabulary=vocabulary, config=config, image_id=image_id,
                                    image_words=image_words[image_id], limit=ref.candidates_per_type)
        per_caption.append(result)
        source = scores(p.text, p.tokens)
        for t, cands in result.candidates.items():
            groups.append(CandidateGroup(t, source, tuple(scores(c.negative.text, c.tagged) for c in cands),
                                         key=f"{image_id}\t{p.text}"))
            where.append((ci, t))
    selection = select_negatives(groups, per_group=config.per_type, max_accuracy=ref.max_blind_accuracy,
                                 pick=ref.pick, spread=ref.spread,
                                 margin=ref.margin if ref.margin_types is None else
                                 {t: ref.margin for t in ref.margin_types})
    kept = {w: k for w, k in zip(where, selection.kept)}
    for ci, result in enumerate(per_caption):
        negatives, skipped = [], dict(result.skipped)
        for t in config.types:
            if t not in result.candidates:
                continue
            chosen = kept[ci, t]
            if not chosen:
                skipped[t] = "refinement: a blind scorer told every candidate from the caption"
            negatives.extend(result.candidates[t][k].negative for k in chosen)
        caption_result = CaptionNegatives(negatives, skipped, dict(result.ungrammatical))
        report.add(caption_result)
        out.extend(negatives)
    report.refinement = {"scorers": names, "candidates_per_type": ref.candidates_per_type,
                         "max_blind_accuracy": ref.max_blind_accuracy, "extended_edits": ref.extended_edits,
                         "pick": ref.pick,
                         "spread": ref.spread, "margin": ref.margin,
                         "margin_types": list(ref.margin_types) if ref.margin_types is not None else None,
                         "types": {t: st.as_dict(names) for t, st in selection.stats.items()}}
    return out, report

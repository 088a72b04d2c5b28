"""Adversarial refinement: keep the negatives that blind text scorers cannot tell from the true caption.

SugarCrepe (Hsieh et al. 2023, §3.3) found that rule-made negatives are told from true captions by
text alone -- the negative is less plausible, less grammatical or longer -- and debiased its own by
selecting, after generation, pairs on which text-only scorers are near chance. Here the same is done
per type of :mod:`crg.hard_negatives` negative, with any number of blind scorers at once:

1. **Over-generate.** Each caption gets up to ``candidates_per_type`` candidates per type
   (:func:`crg.hard_negatives.generators.caption_candidates`), where the plain generator keeps
   ``per_type``.
2. **Score.** Every scorer (:class:`BlindScorer`; the project's two are :class:`LanguageModelScorer`
   around :class:`crg.blind.TrigramLM` and :class:`GrammarScorer` around
   :class:`crg.blind.GrammarLengthHeuristic`) scores the caption and each candidate. A candidate's
   *gap* under a scorer is ``score(caption) - score(candidate)``: positive when the scorer prefers
   the caption (it "wins" the pair), zero for a tie (half a win), negative when it prefers the
   negative.
3. **Pick per caption** (:func:`select_negatives`): a caption's candidates are ranked by how many
   scorers they lose to (wins summed over scorers, a tie one half), then by the sum of their gaps,
   each divided by the median absolute gap of the type under that scorer (so nats per token and
   violations weigh alike); the ``per_type`` best are kept.
4. **Balance per type.** While some scorer prefers the true caption in more than
   ``max_blind_accuracy`` of a type's kept pairs -- or in fewer than ``1 - max_blind_accuracy``: a
   scorer that prefers the *negative* too often separates the pairs as well, with the rule turned
   round (shorter negations for a length scorer) -- a pair is removed: the one whose removal eases
   most of the violated bounds (a pair the scorer wins, for a bound from above; one it loses, from
   below), then worsens fewest, then is separated most clearly there (largest normalised gap;
   SugarCrepe removes the pairs the blind models separate most confidently). A tie is never removed.

Everything is deterministic: ties are broken by the groups' keys, then by group and candidate
order, which the seeded generator fixes. The selection sees only scores, so it is tested on synthetic numbers
(``tests/test_hard_negative_refinement.py``).

**What it does not show.** Refining against a scorer and then measuring with the same scorer
measures the selection, not the negatives: a scorer trained on other captions (or of another kind)
can still separate them. ``benchmarks/bench_blind_baselines.py --refine`` therefore also refines
against a language model trained on one half of the Flickr30K train images and measures with one
trained on the other half (docs/hard_negatives.md, "Adversarial refinement").

>>> groups = [CandidateGroup("HN-ATOM", (0.0,), ((-1.0,), (1.0,))),  # candidate 0 scores below the caption, 1 above
...           CandidateGroup("HN-ATOM", (0.0,), ((-1.0,),)),           # below
...           CandidateGroup("HN-ATOM", (0.0,), ((-2.0,),))]           # far below
>>> sel = select_negatives(groups, per_group=1, max_accuracy=0.5)
>>> sel.kept            # group 0 keeps the candidate the scorer prefers; the most obvious pair goes
[(1,), (0,), ()]
>>> sel.stats["HN-ATOM"].kept, sel.stats["HN-ATOM"].accuracy_kept
(2, (0.5,))
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from crg.blind import CountingRule, GrammarLengthHeuristic, TrigramLM

__all__ = ["BlindScorer", "CandidateGroup", "CountingScorer", "EnsembleScores", "GrammarScorer", "LanguageModelScorer",
           "Selection", "TypeSelection", "ensemble_scores", "select_negatives"]


class BlindScorer(Protocol):
    """A text-only scorer: higher = the more plausible caption. ``tagged``: the text's ``(word, PTB tag)``."""

    name: str

    def score(self, text: str, tagged: Sequence[tuple[str, str]]) -> float:
        ...


@dataclass(frozen=True)
class LanguageModelScorer:
    """A caption's mean log-probability per token under a language model (:meth:`crg.blind.TrigramLM.score`),
    cut at ``order`` (1-3: one fit gives the ensemble's unigram, bigram and trigram LMs)."""

    lm: TrigramLM = field(repr=False)
    name: str = "LM"
    order: int = 3

    def score(self, text: str, tagged: Sequence[tuple[str, str]]) -> float:
        return self.lm.score(text, order=self.order)


@dataclass(frozen=True)
class CountingScorer:
    """A counting rule (:class:`crg.blind.CountingRule`: "more 'and' is the negative", "shorter is the
    caption") as a refinement scorer, so the selection balances the cue as it balances an LM."""

    rule: CountingRule
    name: str = ""

    def __post_init__(self):
        if not self.name:
            object.__setattr__(self, "name", self.rule.name)

    def score(self, text: str, tagged: Sequence[tuple[str, str]]) -> float:
        return self.rule.score(text)


@dataclass(frozen=True)
class EnsembleScores:
    """What an ensemble of blind scorers makes of one text: each scorer's score, in the order given."""

    names: tuple[str, ...]
    scores: tuple[float, ...]


def ensemble_scores(scorers: Sequence[BlindScorer], text: str, tagged: Sequence[tuple[str, str]]) -> EnsembleScores:
    """Every scorer's score of ``text``: refinement's view of a candidate (each scorer is balanced on
    its own, so one that is fooled cannot hide another that is not).

    >>> from crg.blind import COUNTING_RULES
    >>> e = ensemble_scores([CountingScorer(r) for r in COUNTING_RULES[2:]], "a dog and a cat", [])
    >>> e.scores
    (-1.0, -5.0)
    """
    names = tuple(sc.name for sc in scorers)
    if len(set(names)) != len(names):
        raise ValueError(f"scorer names must differ, got {list(names)}")
    return EnsembleScores(names, tuple(float(sc.score(text, tagged)) for sc in scorers))


@dataclass(frozen=True)
class GrammarScorer:
    """Minus agreement violations, then minus length (:class:`crg.blind.GrammarLengthHeuristic`), read
    from the tags the caller gives (for a candidate, the tags its edit wrote: no tagger is run)."""

    heuristic: GrammarLengthHeuristic = field(default_factory=GrammarLengthHeuristic)
    name: str = "grammar"

    def score(self, text: str, tagged: Sequence[tuple[str, str]]) -> float:
        return self.heuristic.score(tagged)


@dataclass(frozen=True)
class CandidateGroup:
    """One caption's candidates of one type, as the blind scorers see them.

    Attributes:
        type: the negatives' type (the unit that is balanced).
        source_scores: the true caption's score under each scorer, shape (S,).
        candidate_scores: each candidate's scores, shape (C, S), in the generator's order.
        key: breaks ties between groups (then their order), so that a selection does not depend on
            the order captions come in when keys differ (:func:`corpus_hard_negatives` uses the image
            id and the caption).
    """

    type: str
    source_scores: tuple[float, ...]
    candidate_scores: tuple[tuple[float, ...], ...]
    key: str = ""


@dataclass(frozen=True)
class TypeSelection:
    """What refinement did to one type.

    Attributes:
        groups: captions with at least one candidate of the type.
        candidates: candidates scored.
        picked: candidates left after each caption's ``per_group`` hardest are picked (step 3).
        kept: negatives kept after balancing (step 4).
        groups_kept: captions that keep at least one.
        accuracy_candidates: per scorer, the fraction (0-1) of all candidate pairs it wins (a tie one half).
        accuracy_first: the same over each caption's first ``per_group`` candidates (what the plain
            generator would have kept, give or take HN-COMP's sampling).
        accuracy_kept: the same over the kept pairs (within ``[1 - max_accuracy, max_accuracy]``
            unless nothing could be kept).
    """

    groups: int
    candidates: int
    kept: int
    groups_kept: int
    accuracy_candidates: tuple[float, ...]
    accuracy_first: tuple[float, ...]
    accuracy_kept: tuple[float, ...]
    picked: int = 0

    def as_dict(self, scorer_names: Sequence[str]) -> dict:
        def named(acc):
            return {n: round(100.0 * a, 2) for n, a in zip(scorer_names, acc)}

        return {"captions": self.groups, "candidates": self.candidates, "picked": self.picked, "kept": self.kept,
                "captions_kept": self.groups_kept, "blind_accuracy_candidates": named(self.accuracy_candidates),
                "blind_accuracy_first": named(self.accuracy_first), "blind_accuracy_kept": named(self.accuracy_kept)}


@dataclass
class Selection:
    """The result of :func:`select_negatives`.

    Attributes:
        kept: per group, the indices of its kept candidates, ascending.
        stats: per type, :class:`TypeSelection`.
    """

    kept: list[tuple[int, ...]]
    stats: dict[str, TypeSelection]


#: ``pick="close"``: a scorer's normalised gap counts at most this much, so one scorer with a huge gap
#: (an unknown word under an LM) does not outweigh all the others.
_CLOSE_CAP = 4.0


def _win(gap: float) -> float:
    return 1.0 if gap > 0 else 0.5 if gap == 0 else 0.0


def _accuracy(wins: list[tuple[float, ...]], num_scorers: int) -> tuple[float, ...]:
    if not wins:
        return tuple(math.nan for _ in range(num_scorers))
    return tuple(sum(w[j] for w in wins) / len(wins) for j in range(num_scorers))


def select_negatives(groups: Sequence[CandidateGroup], *, per_group: int, max_accuracy: float,
                     pick: str = "lose", spread: bool = False,
                     margin: float | Mapping[str, float] = 0.0) -> Selection:
    """Keep at most ``per_group`` candidates per group such that, per type, every scorer prefers the
    source in between ``1 - max_accuracy`` and ``max_accuracy`` (0.5-1) of the kept pairs (steps 3
    and 4 of the module doc).

    ``pick``: step 3's order, ``"lose"`` (fewest scorers prefer the caption, then the smallest
    normalised gaps) or ``"close"`` (the smallest sum over scorers of ``min(|gap| / scale, 4)``:
    the candidates every scorer finds about as plausible as the caption). ``spread``: in step 4, among
    pairs that ease as many bounds and worsen as few, a caption's first pick goes after its other
    picks, so that as many captions as possible keep a negative. ``margin`` (>= 0): a scorer that
    prefers the negative by less than ``margin`` times its median absolute gap over the type still
    counts as preferring the caption (an exact tie stays a tie): the balance then rests on pairs a
    scorer loses clearly, which another scorer of the same kind loses too more often than the ones it
    loses by a hair (the winner's curse of selecting on a noisy score).

    Every group must have as many scores per source and candidate (S >= 1).
    """
    if pick not in ("close", "lose"):
        raise ValueError(f"pick must be 'close' or 'lose', got {pick!r}")
    if per_group < 1:
        raise ValueError(f"per_group must be >= 1, got {per_group}")
    if not 0.5 <= max_accuracy <= 1.0:
        raise ValueError(f"max_accuracy must be in [0.5, 1], got {max_accuracy}")
    margins = dict(margin) if isinstance(margin, Mapping) else None
    if not all(m >= 0.0 for m in (margins.values() if margins is not None else [margin])):
        raise ValueError(f"margin must be >= 0, got {margin}")
    sizes = {len(g.source_scores) for g in groups} | {len(c) for g in groups for c in g.candidate_scores}
    if len(sizes) > 1 or 0 in sizes:
        raise ValueError(f"every source and candidate needs the same number (>= 1) of scores, "
                         f"got sizes {sorted(sizes)}")
    num_scorers = sizes.pop() if sizes else 1
    kept: list[list[int]] = [[] for _ in groups]
    stats = {}
    by_type: dict[str, list[int]] = {}
    for gi, g in enumerate(groups):
        by_type.setdefault(g.type, []).append(gi)
    for hn_type, members in by_type.items():
        stats[hn_type] = _select_type([groups[gi] for gi in members], members, kept, per_group, max_accuracy,
                                      num_scorers, pick, spread,
                                      margin if margins is None else margins.get(hn_type, 0.0))
    return Selection([tuple(sorted(k)) for k in kept], stats)


def _select_type(groups: list[CandidateGroup], members: list[int], kept: list[list[int]], per_group: int,
                 max_accuracy: float, num_scorers: int, pick: str = "lose", spread: bool = False,
                 margin: float = 0.0) -> TypeSelection:
    S = range(num_scorers)
    # gaps[g][c][j]: source score - candidate score, > 0 = scorer j prefers the true caption
    gaps = [[tuple(g.source_scores[j] - c[j] for j in S) for c in g.candidate_scores] for g in groups]
    scale = []
    for j in S:
        nonzero = sorted(abs(gc[j]) for gg in gaps for gc in gg if gc[j] != 0 and math.isfinite(gc[j]))
        scale.append(nonzero[len(nonzero) // 2] if nonzero else 1.0)

    def wins(gap):  # what each scorer says of the pair (reported)
        return tuple(_win(gap[j]) for j in S)

    def counted(gap):  # what balancing counts: a loss by less than the margin is a win, an exact tie a tie
        return tuple(_win(gap[j] + margin * scale[j] if gap[j] != 0 else 0.0) for j in S)

    def hardness(gap):  # lower = harder to tell from the caption
        if pick == "close":  # closest to losing by the margin (to a tie without one)
            return (sum(min(abs(gap[j] + (margin * scale[j] if gap[j] != 0 else 0.0)) / scale[j], _CLOSE_CAP)
                        for j in S),)
        return sum(wins(gap)), sum(gap[j] / scale[j] for j in S)

    all_wins = [wins(gc) for gg in gaps for gc in gg]
    first_wins = [wins(gc) for gg in gaps for gc in gg[:per_group]]
    # step 3: each caption's per_group hardest candidates
    pool = []  # (group position, candidate index)
    first = set()  # each caption's first pick
    for gpos, gg in enumerate(gaps):
        order = sorted(range(len(gg)), key=lambda c: (*hardness(gg[c]), c))
        pool.extend((gpos, c) for c in order[:per_group])
        if order:
            first.add((gpos, order[0]))
    # step 4: remove pairs until every scorer's accuracy is within [1 - max_accuracy, max_accuracy]
    alive = set(pool)
    # the bound from above counts wins with the margin, the one from below plain wins (a scorer must
    # not prefer the negatives too often either, margin or not); without a margin the two are one
    item_up = {it: counted(gaps[it[0]][it[1]]) for it in pool}
    item_low = {it: wins(gaps[it[0]][it[1]]) for it in pool}
    total_up = [sum(w[j] for w in item_up.values()) for j in S]
    total_low = [sum(w[j] for w in item_low.values()) for j in S]

    def violated():  # (scorer, +1): prefers the caption too often; (scorer, -1): the negative
        n = len(alive)
        return tuple([(j, 1) for j in S if total_up[j] > max_accuracy * n + 1e-9] +
                     [(j, -1) for j in S if total_low[j] < (1.0 - max_accuracy) * n - 1e-9])

    # A pair's place in the removal order depends only on the pair and the set of violated bounds,
    # of which there are at most 3^S: each set's order is sorted once, and a cursor walks it. Pairs
    # only ever leave, and a pass removes consecutive alive pairs from its order's front, so the
    # first alive pair at or after the cursor is what re-sorting the alive pairs would put first.
    orders: dict[tuple, list] = {}
    cursor: dict[tuple, int] = {}

    def removal_order(bad):
        """The pairs whose removal eases a bound in ``bad``: most eased, fewest worsened, most obvious first."""
        keyed = []
        for it in pool:
            up, low, gap = item_up[it], item_low[it], gaps[it[0]][it[1]]
            helps = [j for j, d in bad if (up[j] == 1.0 if d > 0 else low[j] == 0.0)]
            if not helps:
                continue
            hurts = sum((up[j] == 0.0 if d > 0 else low[j] == 1.0) for j, d in bad)
            strength = sum(abs(gap[j]) / scale[j] for j in helps)
            protected = spread and it in first
            keyed.append(((-len(helps), hurts, protected, -strength, groups[it[0]].key, it), it))
        keyed.sort(key=lambda x: x[0])
        return [it for _, it in keyed]

    bad = violated()
    while bad and alive:
        if bad not in orders:
            orders[bad], cursor[bad] = removal_order(bad), 0
        current, changed = bad, False
        order, k = orders[current], cursor[current]
        while k < len(order):
            it = order[k]
            k += 1
            if it not in alive:
                continue
            alive.discard(it)
            for j in S:
                total_up[j] -= item_up[it][j]
                total_low[j] -= item_low[it][j]
            now = violated()
            if now != bad:
                bad, changed = now, True
                break
        cursor[current] = k
        if not changed:
            break  # only ties (or pairs that would make it worse) left: nothing removal can fix
    for gp, c in alive:
        kept[members[gp]].append(c)
    kept_wins = [wins(gaps[gp][c]) for gp, c in alive]
    return TypeSelection(groups=len(groups), candidates=sum(len(gg) for gg in gaps), kept=len(alive),
                         groups_kept=len({gp for gp, _ in alive}), picked=len(pool),
                         accuracy_candidates=_accuracy(all_wins, num_scorers),
                         accuracy_first=_accuracy(first_wins, num_scorers),
                         accuracy_kept=_accuracy(kept_wins, num_scorers))

"""Adversarial refinement of hard negatives (crg.hard_negatives.refine): the selection on synthetic scores
(balance per type and scorer, the most obvious pairs removed first, as many kept as a naive optimum,
determinism), the edits refinement adds (noun and relation swaps, negations as long as or shorter than
the caption), and corpus_hard_negatives with refinement on a toy corpus."""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

import pytest
from nltk import Tree

from crg.blind import blind_accuracy
from crg.hard_negatives import (
    HN_ATOM, HN_COMP, HN_NEG, HN_SWAP, AtomVocabulary, CandidateGroup, GrammarScorer, HardNegativeConfig,
    ParsedCaption, RefinementConfig, caption_hard_negatives, corpus_hard_negatives, select_negatives)

EXTENDED = HardNegativeConfig(refinement=RefinementConfig(), min_atom_count=1)


def skewed_groups(rng: random.Random, n: int, hn_type: str, p_win: tuple[float, ...], size=(1, 6)):
    """n groups of 1-5 candidates; under scorer j a candidate scores below its source with
    probability p_win[j] (the scorer then prefers the source), by a random gap."""
    groups = []
    for _ in range(n):
        source = tuple(rng.uniform(-3, 0) for _ in p_win)
        cands = tuple(tuple(s - rng.uniform(0.01, 1) if rng.random() < p else s + rng.uniform(0.01, 1)
                            for s, p in zip(source, p_win)) for _ in range(rng.randrange(*size)))
        groups.append(CandidateGroup(hn_type, source, cands))
    return groups


def kept_accuracy(groups, kept, j):
    return blind_accuracy((g.source_scores[j], g.candidate_scores[c][j]) for g, k in zip(groups, kept) for c in k)


# ---------------------------------------------------------------------------- selection on synthetic scores
def test_a_skewed_candidate_set_is_balanced_per_type_and_scorer():
    rng = random.Random(0)
    groups = (skewed_groups(rng, 400, HN_SWAP, (0.85, 0.7)) + skewed_groups(rng, 300, HN_NEG, (0.6, 0.95))
              + skewed_groups(rng, 300, HN_COMP, (0.9, 0.1)))  # scorer 1 prefers the negative: as telling
    types = (HN_SWAP, HN_NEG, HN_COMP)
    before = {t: [blind_accuracy((g.source_scores[j], c[j]) for g in groups if g.type == t for c in g.candidate_scores)
                  for j in (0, 1)] for t in types}
    assert min(before[HN_SWAP]) > 68 and max(before[HN_NEG]) > 90 and before[HN_COMP][1] < 15  # skewed as built
    sel = select_negatives(groups, per_group=3, max_accuracy=0.6)
    for t in types:
        members = [i for i, g in enumerate(groups) if g.type == t]
        sub, kept = [groups[i] for i in members], [sel.kept[i] for i in members]
        for j in (0, 1):
            assert 40.0 - 1e-9 <= kept_accuracy(sub, kept, j) <= 60.0 + 1e-9, (t, j)
            assert sel.stats[t].accuracy_kept[j] == pytest.approx(kept_accuracy(sub, kept, j) / 100)
            assert sel.stats[t].accuracy_candidates[j] == pytest.approx(before[t][j] / 100)
        assert sel.stats[t].kept == sum(map(len, kept)) > 0
        assert sel.stats[t].candidates == sum(len(g.candidate_scores) for g in sub)
        assert all(len(k) <= 3 and list(k) == sorted(set(k)) for k in kept)


def test_one_scorer_keeps_as_many_as_a_naive_optimum_and_drops_the_most_obvious_first():
    """With one scorer and no ties the best possible selection keeps every lost pair (L, at most
    per_group per caption, the hardest first) and floor(L * t / (1 - t)) won pairs: the won pairs
    with the smallest gaps."""
    rng = random.Random(1)
    groups = skewed_groups(rng, 300, HN_ATOM, (0.8,), size=(1, 4))
    t = 0.65
    sel = select_negatives(groups, per_group=5, max_accuracy=t)  # per_group above every group's size
    lost = sum(c[0] > g.source_scores[0] for g in groups for c in g.candidate_scores)
    won_gaps = sorted(g.source_scores[0] - c[0] for g in groups for c in g.candidate_scores
                      if c[0] < g.source_scores[0])
    keep_won = min(len(won_gaps), int(lost * t / (1 - t) + 1e-9))
    assert sel.stats[HN_ATOM].kept == lost + keep_won
    kept_won_gaps = sorted(g.source_scores[0] - g.candidate_scores[c][0] for g, k in zip(groups, sel.kept) for c in k
                           if g.candidate_scores[c][0] < g.source_scores[0])
    assert kept_won_gaps == won_gaps[:keep_won]


def test_per_group_keeps_the_hardest_candidates_of_a_caption():
    # scorer 0 prefers the caption by 3, 1, -1 (a loss), 2: with per_group=2, candidates 2 and 1 stay
    groups = [CandidateGroup(HN_ATOM, (0.0,), ((-3.0,), (-1.0,), (1.0,), (-2.0,)))]
    sel = select_negatives(groups, per_group=2, max_accuracy=1.0)
    assert sel.kept == [(1, 2)] and sel.stats[HN_ATOM].accuracy_first == (1.0,)  # the first two: both won


def test_ties_count_half_and_are_never_removed():
    # the grammar scorer ties on every candidate (same length), the LM prefers the caption on 3 of 4
    groups = [CandidateGroup(HN_NEG, (0.0, -0.1), ((-g, -0.1),)) for g in (0.5, 0.2, 0.1, -0.3)]
    sel = select_negatives(groups, per_group=1, max_accuracy=0.5)
    assert sel.kept == [(), (), (0,), (0,)]  # the two most obvious LM wins go; ties stay
    assert sel.stats[HN_NEG].accuracy_kept == (0.5, 0.5)


def test_a_type_that_cannot_be_balanced_keeps_nothing_and_says_so():
    groups = [CandidateGroup(HN_SWAP, (0.0,), ((-1.0,), (-2.0,)))] * 3
    sel = select_negatives(groups, per_group=5, max_accuracy=0.6)
    assert sel.kept == [(), (), ()] and sel.stats[HN_SWAP].kept == 0 and sel.stats[HN_SWAP].groups_kept == 0


def naive_selection(groups, per_group, max_accuracy):
    """The module doc's steps 3 and 4 written out: after every single removal the violated bounds are
    found again and the best pair to remove is searched among all pairs left."""
    kept = [[] for _ in groups]
    for hn_type in dict.fromkeys(g.type for g in groups):
        members = [i for i, g in enumerate(groups) if g.type == hn_type]
        S = range(len(groups[members[0]].source_scores))
        gap = {(i, c): [groups[i].source_scores[j] - cs[j] for j in S]
               for i in members for c, cs in enumerate(groups[i].candidate_scores)}
        scale = []
        for j in S:
            nonzero = sorted(abs(g[j]) for g in gap.values() if g[j] != 0)
            scale.append(nonzero[len(nonzero) // 2] if nonzero else 1.0)
        win = {it: [1.0 if g[j] > 0 else 0.5 if g[j] == 0 else 0.0 for j in S] for it, g in gap.items()}
        alive = []
        for i in members:
            cands = range(len(groups[i].candidate_scores))
            alive += [(i, c) for c in sorted(cands, key=lambda c: (sum(win[i, c]),
                                                                    sum(gap[i, c][j] / scale[j] for j in S), c))
                      [:per_group]]
        while alive:
            n = len(alive)
            bad = [(j, 1) for j in S if sum(win[it][j] for it in alive) > max_accuracy * n + 1e-9] + \
                [(j, -1) for j in S if sum(win[it][j] for it in alive) < (1 - max_accuracy) * n - 1e-9]
            options = []
            for it in alive:
                helps = [j for j, d in bad if win[it][j] == (1.0 if d > 0 else 0.0)]
                hurts = sum(win[it][j] == (0.0 if d > 0 else 1.0) for j, d in bad)
                if helps:
                    options.append(((-len(helps), hurts, -sum(abs(gap[it][j]) / scale[j] for j in helps),
                                     groups[it[0]].key, members.index(it[0]), it[1]), it))
            if not options:
                break
            alive.remove(min(options)[1])
        for i, c in alive:
            kept[i].append(c)
    return [tuple(sorted(k)) for k in kept]


@pytest.mark.parametrize("per_group,max_accuracy", [(1, 0.6), (3, 0.55), (2, 0.65)])
def test_selection_removes_what_a_naive_search_after_every_removal_removes(per_group, max_accuracy):
    rng = random.Random(per_group)
    groups = (skewed_groups(rng, 60, HN_SWAP, (0.85, 0.7, 0.5)) + skewed_groups(rng, 50, HN_NEG, (0.6, 0.95, 0.2))
              + skewed_groups(rng, 50, HN_COMP, (0.9, 0.1, 0.75)))
    groups += [CandidateGroup(HN_NEG, g.source_scores,
                              tuple((c[0], g.source_scores[1], c[2]) for c in g.candidate_scores))
               for g in groups[60:90]]  # ties under scorer 1
    assert select_negatives(groups, per_group=per_group, max_accuracy=max_accuracy).kept == \
        naive_selection(groups, per_group, max_accuracy)


def test_selection_is_deterministic_and_validates_its_input():
    rng = random.Random(2)
    groups = skewed_groups(rng, 200, HN_COMP, (0.8, 0.6))
    assert select_negatives(groups, per_group=2, max_accuracy=0.6).kept == \
        select_negatives(list(groups), per_group=2, max_accuracy=0.6).kept
    with pytest.raises(ValueError, match="max_accuracy must be in"):
        select_negatives(groups, per_group=2, max_accuracy=60)
    with pytest.raises(ValueError, match="same number"):
        select_negatives([CandidateGroup(HN_ATOM, (0.0, 1.0), ((1.0,),))], per_group=1, max_accuracy=0.6)
    with pytest.raises(ValueError, match="fraction"):
        RefinementConfig(max_blind_accuracy=65)
    with pytest.raises(ValueError, match="candidates_per_type"):
        HardNegativeConfig(per_type=5, refinement=RefinementConfig(candidates_per_type=3))


# ---------------------------------------------------------------------------- the edits refinement adds
TREES = {
    "bed": "(TOP (NP (NP (DT A) (NN cat)) (PP (IN on) (NP (NP (DT a) (NN bed)) (PP (IN in) (NP (DT a) (NN room)))))"
           " (. .)))",
    "hat": "(TOP (S (NP (DT A) (JJ young) (NN man)) (VP (VBZ is) (VP (VBG riding) (NP (DT a) (JJ brown) (NN horse))))"
           " (. .)))",
    "with": "(TOP (NP (NP (DT A) (NN man)) (PP (IN with) (NP (DT a) (JJ red) (NN hat))) (. .)))",
    "verbs": "(TOP (NP (NP (DT A) (NN man)) (VP (VBG riding) (NP (DT a) (NN horse)) (S (VP (VBG holding) "
             "(NP (DT a) (NN flag))))) (. .)))",
    "pair": "(TOP (NP (NP (DT A) (NN dog)) (CC and) (NP (DT a) (NN cat)) (. .)))",
}


def parsed(name: str) -> ParsedCaption:
    return ParsedCaption.from_tree(Tree.fromstring(TREES[name]))


def texts(result, hn_type, op=None):
    return {n.text for n in result.negatives if n.type == hn_type and (op is None or n.change.op == op)}


def words(text):
    return re.findall(r"[a-z']+", text.lower())


def test_refinement_adds_noun_and_relation_swaps_only_when_on():
    cfg = HardNegativeConfig(types=(HN_SWAP,), per_type=20, refinement=RefinementConfig())
    res = caption_hard_negatives(parsed("bed"), config=cfg)
    assert "A bed on a cat in a room." in texts(res, HN_SWAP, "swap_nouns")
    # "on" and "in" both place the cat: swapped, they say near enough the same (issue 33's hand-read)
    assert "A cat in a bed on a room." not in texts(res, HN_SWAP, "swap_relations")
    assert "A man holding a horse riding a flag." in texts(caption_hard_negatives(parsed("verbs"), config=cfg),
                                                            HN_SWAP, "swap_relations")
    # "a dog and a cat": swapping alike-modified conjuncts keeps the meaning
    assert texts(caption_hard_negatives(parsed("pair"), config=cfg), HN_SWAP) == set()
    plain = caption_hard_negatives(parsed("bed"), config=HardNegativeConfig(types=(HN_SWAP,), per_type=20))
    assert {n.change.op for n in plain.negatives} <= {"swap_arguments"}


def test_refinement_adds_negations_as_long_as_or_shorter_than_the_caption():
    cfg = HardNegativeConfig(types=(HN_NEG,), per_type=20, refinement=RefinementConfig())
    hat = texts(caption_hard_negatives(parsed("hat"), config=cfg), HN_NEG)
    assert {"No young man is riding a brown horse.", "No man is riding a horse.",
            "A young man is not riding a horse."} <= hat
    with_ = caption_hard_negatives(parsed("with"), config=cfg)
    got = texts(with_, HN_NEG)
    assert {"A man without a red hat.", "A man without a hat.", "A man with no red hat.", "A man with no hat.",
            "There is no man with a hat."} <= got
    source_len = len(words(parsed("with").text))
    by_op = {n.text: n.change for n in with_.negatives}
    assert by_op["A man without a hat."].where == "preposition; without red"
    assert any(len(words(t)) < source_len for t in got) and any(len(words(t)) == source_len for t in got)
    plain = texts(caption_hard_negatives(parsed("with"), config=HardNegativeConfig(types=(HN_NEG,), per_type=20)),
                  HN_NEG)
    assert all(len(words(t)) > source_len for t in plain)  # what the length heuristic exploited


# ---------------------------------------------------------------------------- the corpus, refined
@dataclass(frozen=True)
class ShorterScorer:
    """A blind scorer that prefers fewer words (synthetic: needs no training)."""

    name: str = "shorter"

    def score(self, text, tagged):
        return -float(len(words(text)))


def corpus():
    items = [(f"img{i}", parsed(name)) for i, name in enumerate(sorted(TREES) * 2)]
    return items, AtomVocabulary.from_parsed(p for _, p in items)


def test_corpus_refinement_balances_each_type_and_reports_what_it_kept():
    items, vocab = corpus()
    cfg = HardNegativeConfig(per_type=2, min_atom_count=1, refinement=RefinementConfig(max_blind_accuracy=0.6))
    scorers = [ShorterScorer(), GrammarScorer()]
    negs, report = corpus_hard_negatives(items, vocabulary=vocab, config=cfg, scorers=scorers)
    assert report.refinement["scorers"] == ["shorter", "grammar"]
    for t, st in report.refinement["types"].items():
        pairs = [(n.source, n.text) for n in negs if n.type == t]
        assert st["kept"] == len(pairs) == report.produced.get(t, 0)
        if pairs:
            acc = blind_accuracy((ShorterScorer().score(p, ()), ShorterScorer().score(n, ())) for p, n in pairs)
            assert acc <= 60.0 and st["blind_accuracy_kept"]["shorter"] == pytest.approx(acc, abs=0.01)
    assert report.produced[HN_NEG] > 0  # negations survive a length scorer: the short forms
    again, _ = corpus_hard_negatives(list(reversed(items)), vocabulary=vocab, config=cfg, scorers=scorers)
    assert sorted(n.text for n in negs) == sorted(n.text for n in again)


def test_corpus_refinement_needs_scorers_and_the_plain_generator_is_one_flag_away():
    items, vocab = corpus()
    with pytest.raises(ValueError, match="no scorers"):
        corpus_hard_negatives(items, vocabulary=vocab, config=EXTENDED)
    plain, report = corpus_hard_negatives(items, vocabulary=vocab, config=HardNegativeConfig(min_atom_count=1))
    assert "refinement" not in report.as_dict()
    assert not {n.change.op for n in plain} & {"swap_nouns", "swap_relations", "negate_with", "negate_determiner"}

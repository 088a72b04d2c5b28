"""Labelled-bracket precision, recall and F1 between constituency trees (evalb-style).

Conventions follow evalb's ``COLLINS.prm``: punctuation tokens are deleted before spans are
counted, the root (``TOP``) and preterminals are not brackets, and brackets are compared as a
multiset of ``(label, start, end)``. Scores are micro-averaged over the corpus.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

from nltk import Tree

from crg.dep_to_constituency import PUNCT_TAGS

__all__ = ["brackets", "punctuation_positions", "BracketScore", "score_trees"]

_EVALB_PUNCT = PUNCT_TAGS | {"#"}


def brackets(tree: Tree, labels: Iterable[str] | None = None, skip: set[int] | None = None) -> Counter:
    """The multiset of labelled spans of ``tree``, over non-punctuation token positions.

    ``skip`` lists the token positions to delete (default: those tagged as punctuation in ``tree``);
    scoring passes the gold tree's punctuation positions so both trees delete the same tokens.

    >>> sorted(brackets(Tree.fromstring("(TOP (S (NP (DT a) (NN dog)) (VP (VBZ runs)) (. .)))")).items())
    [(('NP', 0, 2), 1), (('S', 0, 3), 1), (('VP', 2, 3), 1)]
    """
    if skip is None:
        skip = punctuation_positions(tree)
    wanted = set(labels) if labels is not None else None
    out: Counter = Counter()
    position = 0

    def walk(node: Tree, start: int) -> int:
        nonlocal position
        if isinstance(node[0], str):  # preterminal
            keep = position not in skip
            position += 1
            return start + (1 if keep else 0)
        end = start
        for child in node:
            end = walk(child, end)
        label = node.label()
        if end > start and label != "TOP" and (wanted is None or label in wanted):
            out[(label, start, end)] += 1
        return end

    walk(tree, 0)
    return out


def punctuation_positions(tree: Tree) -> set[int]:
    return {i for i, (_, tag) in enumerate(tree.pos()) if tag in _EVALB_PUNCT}


@dataclass
class BracketScore:
    """Micro-averaged counts; ``per_label`` holds (matched, gold, predicted) per label."""

    matched: int = 0
    gold: int = 0
    predicted: int = 0
    per_label: dict = field(default_factory=dict)

    @property
    def precision(self) -> float:
        return 100.0 * self.matched / self.predicted if self.predicted else 0.0

    @property
    def recall(self) -> float:
        return 100.0 * self.matched / self.gold if self.gold else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0

    def label_f1(self, label: str) -> float:
        m, g, p = self.per_label.get(label, (0, 0, 0))
        return 200.0 * m / (g + p) if g + p else 0.0


def score_trees(gold: Iterable[Tree], predicted: Iterable[Tree], labels: Iterable[str] | None = None) -> BracketScore:
    """Score predicted trees against gold trees (same sentences, same order, same tokens)."""
    labels = list(labels) if labels is not None else None
    score = BracketScore()
    for i, (g, p) in enumerate(zip(gold, predicted, strict=True)):
        if g.leaves() != p.leaves():
            raise ValueError(f"sentence {i}: gold and predicted trees have different words:\n{g.leaves()}\n{p.leaves()}")
        skip = punctuation_positions(g)
        gb, pb = brackets(g, labels, skip), brackets(p, labels, skip)
        both = gb & pb
        score.matched += sum(both.values())
        score.gold += sum(gb.values())
        score.predicted += sum(pb.values())
        for label in {k[0] for k in gb} | {k[0] for k in pb}:
            m, gg, pp = score.per_label.get(label, (0, 0, 0))
            score.per_label[label] = (
                m + sum(v for k, v in both.items() if k[0] == label),
                gg + sum(v for k, v in gb.items() if k[0] == label),
                pp + sum(v for k, v in pb.items() if k[0] == label),
            )
    return score

"""Concepts and predicates from a constituency tree, as in Appendix A of Zhang et al. (2021).

Starting from the sentence, a breadth-first search over the current concept's constituency tree
finds its sub-concepts:

1. a word is a *primitive* concept when its POS tag is NN, NNS, NNP or NNPS;
2. a phrase of two or more words is a concept when its label is one of S, SBAR, SBARQ, SQ, SINV,
   NP, NX and it contains a primitive word.

The search does not descend into a node once it is a concept. The words left over form the
*predicate*, a template whose placeholders carry the sub-concepts' syntactic types
(``[NP] are running on [NP]``). Each sub-concept is decomposed the same way until only primitives
remain. Two details the paper leaves open, decided here:

* punctuation is not part of concepts' texts or templates (Table 8 shows none);
* a sub-concept covering exactly the words of its parent (a unary ``NP -> NP`` chain) would give
  the empty predicate ``[NP]``; the search looks inside it instead.

Texts are lower-cased (the models use uncased WordPiece), so "A dog" and "a dog" are one concept.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Iterator

from nltk import Tree

from crg.dep_to_constituency import PUNCT_TAGS, unescape_ptb_word

__all__ = [
    "PRIMITIVE_TAGS", "CONCEPT_LABELS", "Predicate", "ConceptNode", "extract_concepts",
    "concept_text", "prune_tree",
]

PRIMITIVE_TAGS = frozenset({"NN", "NNS", "NNP", "NNPS"})
CONCEPT_LABELS = frozenset({"S", "SBAR", "SBARQ", "SQ", "SINV", "NP", "NX"})
SENTENCE, PHRASE, PRIMITIVE = "sentence", "phrase", "primitive"


@dataclass(frozen=True)
class Predicate:
    """An n-ary function over concepts: a lexical template with typed placeholders.

    ``template`` is e.g. ``"[NP] are running on [NP]"``; ``arg_types`` the placeholder types in
    order (``("NP", "NP")``). A sentence without any noun has a predicate of arity 0.
    """

    template: str

    @property
    def arg_types(self) -> tuple[str, ...]:
        return tuple(tok[1:-1] for tok in self.template.split() if _is_placeholder(tok))

    @property
    def arity(self) -> int:
        return len(self.arg_types)


def _is_placeholder(token: str) -> bool:
    return len(token) > 2 and token[0] == "[" and token[-1] == "]" and token[1:-1].isupper()


@dataclass
class ConceptNode:
    """One concept of one caption, with the predicate that composes it from its children.

    Attributes:
        text: the concept's words, lower-cased, without punctuation.
        label: its syntactic type: a phrase label (NP, S, ...) or, for a primitive, its POS tag.
        kind: ``"sentence"``, ``"phrase"`` or ``"primitive"``.
        predicate: how the children compose into this concept; ``None`` for primitives.
        children: the argument concepts, in the order of the predicate's placeholders.
        start, end: the token span ``[start, end)`` in the caption's tree leaves.
    """

    text: str
    label: str
    kind: str
    start: int
    end: int
    predicate: Predicate | None = None
    children: list["ConceptNode"] = field(default_factory=list)

    @property
    def height(self) -> int:
        """Edges on the longest path down to a primitive (a primitive has height 0)."""
        return 1 + max(c.height for c in self.children) if self.children else 0

    def walk(self) -> Iterator["ConceptNode"]:
        """All concepts of the tree, parents before children."""
        yield self
        for c in self.children:
            yield from c.walk()

    def walk_bottom_up(self) -> Iterator["ConceptNode"]:
        for c in self.children:
            yield from c.walk_bottom_up()
        yield self

    def to_dict(self) -> dict:
        return {"text": self.text, "label": self.label, "kind": self.kind, "span": [self.start, self.end],
                "predicate": self.predicate.template if self.predicate else None,
                "children": [c.to_dict() for c in self.children]}


def concept_text(words: list[str]) -> str:
    """The canonical text of a concept: lower-cased words joined by single spaces.

    >>> concept_text(["Two", "dogs"])
    'two dogs'
    """
    return " ".join(unescape_ptb_word(w).lower() for w in words)


def _positions(tree: Tree) -> list[tuple[str, str]]:
    return tree.pos()


def extract_concepts(tree: Tree) -> ConceptNode:
    """Decompose a caption's tree into its concept tree (Appendix A).

    ``tree`` is a PTB tree; a ``TOP`` root is looked through. The result's root is the sentence
    concept; its descendants are phrases and primitives.

    >>> t = Tree.fromstring("(TOP (S (NP (CD two) (NNS dogs)) (VP (VBP are) (VP (VBG running) "
    ...                     "(PP (IN on) (NP (DT the) (NN grass)))))))")
    >>> root = extract_concepts(t)
    >>> root.predicate.template, [c.text for c in root.children]
    ('[NP] are running on [NP]', ['two dogs', 'the grass'])
    >>> [(c.predicate.template, [g.text for g in c.children]) for c in root.children]
    [('two [NNS]', ['dogs']), ('the [NN]', ['grass'])]
    """
    if tree.label() == "TOP" and len(tree) == 1 and isinstance(tree[0], Tree):
        tree = tree[0]
    pos = tree.pos()
    if not pos:
        raise ValueError("cannot extract concepts from an empty tree")
    spans = _constituent_spans(tree)
    words = [w for w, _ in pos]
    tags = [t for _, t in pos]
    content = [i for i, t in enumerate(tags) if t not in PUNCT_TAGS]
    root = ConceptNode(
        text=concept_text([words[i] for i in content]),
        label=tree.label(), kind=SENTENCE, start=0, end=len(words))
    _decompose(root, tree, spans, words, tags)
    return root


def _constituent_spans(tree: Tree) -> dict[int, tuple[int, int]]:
    """Token span of every subtree, keyed by ``id(subtree)``."""
    spans: dict[int, tuple[int, int]] = {}

    def walk(node, start: int) -> int:
        if isinstance(node[0], str):
            spans[id(node)] = (start, start + 1)
            return start + 1
        end = start
        for child in node:
            end = walk(child, end)
        spans[id(node)] = (start, end)
        return end

    walk(tree, 0)
    return spans


def _content_words(start: int, end: int, tags: list[str]) -> list[int]:
    return [i for i in range(start, end) if tags[i] not in PUNCT_TAGS]


def _is_primitive(node: Tree) -> bool:
    return isinstance(node[0], str) and node.label() in PRIMITIVE_TAGS


def _is_phrase_concept(node: Tree, spans, tags) -> bool:
    if isinstance(node[0], str) or node.label() not in CONCEPT_LABELS:
        return False
    start, end = spans[id(node)]
    words = _content_words(start, end, tags)
    return len(words) >= 2 and any(tags[i] in PRIMITIVE_TAGS for i in words)


def _decompose(concept: ConceptNode, tree: Tree, spans, words, tags) -> None:
    """Fill ``concept.predicate`` and ``concept.children`` by BFS over ``tree`` (the concept's subtree)."""
    own_words = _content_words(concept.start, concept.end, tags)
    found: list[tuple[Tree, str]] = []  # (subtree, kind)
    queue = deque(tree if not isinstance(tree[0], str) else [])
    while queue:
        node = queue.popleft()
        if not isinstance(node, Tree):
            continue
        if _is_primitive(node):
            found.append((node, PRIMITIVE))
            continue
        if _is_phrase_concept(node, spans, tags):
            start, end = spans[id(node)]
            if _content_words(start, end, tags) != own_words:  # not a unary copy of the parent
                found.append((node, PHRASE))
                continue
        if not isinstance(node[0], str):
            queue.extend(node)
    if not found and concept.kind == PRIMITIVE:
        return
    if len(found) == 1 and found[0][1] == PRIMITIVE and spans[id(found[0][0])] and \
            _content_words(*spans[id(found[0][0])], tags) == own_words:
        concept.label = found[0][0].label()  # a one-noun sentence ("Dogs.") is that primitive itself
        return
    found.sort(key=lambda f: spans[id(f[0])][0])
    template: list[str] = []
    cursor = concept.start
    for node, kind in found:
        start, end = spans[id(node)]
        template.extend(words[i].lower() for i in range(cursor, start) if tags[i] not in PUNCT_TAGS)
        template.append(f"[{node.label()}]")
        child = ConceptNode(
            text=concept_text([words[i] for i in _content_words(start, end, tags)]),
            label=node.label(), kind=kind, start=start, end=end)
        if kind == PHRASE:
            _decompose(child, node, spans, words, tags)
        concept.children.append(child)
        cursor = end
    template.extend(words[i].lower() for i in range(cursor, concept.end) if tags[i] not in PUNCT_TAGS)
    concept.predicate = Predicate(" ".join(unescape_ptb_word(w) for w in template))


def prune_tree(tree: Tree, probability: float, rng) -> Tree:
    """Degrade a parse by removing branches at random (Table 7's parse-quality study).

    Each phrasal node below the root is, with ``probability``, dissolved: its children are attached
    to its parent, so the words stay and the structure above them is lost. ``rng`` is a
    ``random.Random``; the same seed gives the same pruned tree.

    >>> import random
    >>> t = Tree.fromstring("(TOP (S (NP (DT a) (NN dog)) (VP (VBZ runs))))")
    >>> prune_tree(t, 0.0, random.Random(0)) == t
    True
    >>> prune_tree(t, 1.0, random.Random(0)).leaves() == t.leaves()
    True
    """
    if not 0.0 <= probability <= 1.0:
        raise ValueError(f"pruning probability must lie in [0, 1], got {probability}")

    def prune(node: Tree, is_root: bool) -> list:
        if isinstance(node[0], str):
            return [node.copy(deep=True)]
        kids = [k for child in node for k in prune(child, False)]
        if not is_root and rng.random() < probability:
            return kids
        return [Tree(node.label(), kids)]

    top = tree
    if tree.label() == "TOP" and len(tree) == 1:
        return Tree("TOP", prune(tree[0], True))
    return prune(top, True)[0]
